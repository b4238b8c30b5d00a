"""Inbound dedup, the message journal, session bindings and pruning in SQL, mixed into
`SqliteStore` and `PostgresStore` (sql_store.py): each statement written once, `?` marks
(sql_base.py). Each method is ONE statement, atomic on its own on either database.

First-wins claims are `INSERT ... ON CONFLICT DO NOTHING` (only uniqueness conflicts are
absorbed; CHECK and foreign-key violations still raise); the caller learns who won from
the row count."""

from __future__ import annotations

from bridge.store.port import MESSAGE_TRANSITIONS, JournaledMessage, MessageState
from bridge.store.sql_base import SqlStatements, Statement
from bridge.store.sql_rows import MESSAGE_COLUMNS, message_of

# Oldest first; what `prune` drops, one DELETE per table (each atomic on its own: a long
# prune never holds the whole store), a cutoff as the one parameter.
_PRUNE = (
    "DELETE FROM seen_events WHERE seen_at < ?",
    "DELETE FROM messages WHERE state = 'done' AND updated_at < ?",
    "DELETE FROM approvals WHERE status <> 'open' AND decided_at < ?",
    # Cascades to the turn's trace entries and any approval left on it.
    "DELETE FROM turns WHERE outcome IS NOT NULL AND finished_at < ?",
    "DELETE FROM outbox WHERE sent_at < ?",
    "DELETE FROM sessions WHERE active_at < ?",
    # An instance silent that long is gone (ids with a random suffix pile up).
    "DELETE FROM instances WHERE heartbeat_at < ?",
)


def state_update(message_id: str, state: MessageState, now: float) -> Statement | None:
    """The statement moving a message to `state` from the states allowed to reach it (none
    may: then there is nothing to run)."""
    sources = sorted(MESSAGE_TRANSITIONS[MessageState(state)])
    if not sources:
        return None
    marks = ", ".join("?" for _ in sources)
    return (
        f"UPDATE messages SET state = ?, updated_at = ? "
        f"WHERE message_id = ? AND state IN ({marks})",
        (MessageState(state).value, now, message_id, *(s.value for s in sources)),
    )


class SqlJournal(SqlStatements):
    retention_seconds: float

    # -- 1. inbound dedup --------------------------------------------------------------------

    async def claim_event(self, event_id: str, message_id: str | None, now: float) -> bool:
        # Either uniqueness constraint (event id, message id) absorbs a redelivery.
        sql = self._sql(
            "INSERT INTO seen_events (event_id, message_id, seen_at) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING"
        )
        return await self._write(sql, (event_id, message_id, now)) == 1

    # -- 2. inbound journal ------------------------------------------------------------------

    async def journal_message(
        self,
        conversation_key: str,
        message_id: str,
        sender_open_id: str,
        chat_id: str,
        text: str,
        now: float,
        attachments: str = "",
    ) -> bool:
        sql = self._sql(
            "INSERT INTO messages (message_id, conversation_key, sender_open_id, chat_id,"
            " text, state, received_at, updated_at, attachments)"
            " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?) ON CONFLICT DO NOTHING"
        )
        params = (message_id, conversation_key, sender_open_id, chat_id, text, now, now)
        return await self._write(sql, (*params, attachments)) == 1

    async def set_message_state(self, message_id: str, state: MessageState, now: float) -> bool:
        self._conn()
        update = state_update(message_id, state, now)
        return update is not None and await self._write(self._sql(update[0]), update[1]) == 1

    async def interrupt_running_messages(self, now: float) -> int:
        return await self._write(
            self._sql(
                "UPDATE messages SET state = 'interrupted', updated_at = ? WHERE state = 'running'"
            ),
            (now,),
        )

    async def message(self, message_id: str) -> JournaledMessage | None:
        row = await self._one(
            self._sql(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id = ?"),
            (message_id,),
        )
        return None if row is None else message_of(row)

    async def pending_messages(self, conversation_key: str) -> list[JournaledMessage]:
        rows = await self._all(
            self._sql(
                f"SELECT {MESSAGE_COLUMNS} FROM messages"
                " WHERE conversation_key = ? AND state <> 'done' ORDER BY seq"
            ),
            (conversation_key,),
        )
        return [message_of(row) for row in rows]

    async def unfinished_messages(self) -> list[JournaledMessage]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE state <> 'done' ORDER BY seq"
        )
        return [message_of(row) for row in rows]

    # -- 3. session bindings -----------------------------------------------------------------

    async def bind_session(self, conversation_key: str, session_id: str, now: float) -> None:
        await self._write(
            self._sql(
                "INSERT INTO bindings (conversation_key, session_id, bound_at) VALUES (?, ?, ?)"
                " ON CONFLICT (conversation_key) DO UPDATE SET"
                " session_id = excluded.session_id, bound_at = excluded.bound_at"
            ),
            (conversation_key, session_id, now),
        )

    async def session_for(self, conversation_key: str) -> str | None:
        row = await self._one(
            self._sql("SELECT session_id FROM bindings WHERE conversation_key = ?"),
            (conversation_key,),
        )
        return None if row is None else str(row[0])

    async def unbind(self, conversation_key: str) -> bool:
        sql = self._sql("DELETE FROM bindings WHERE conversation_key = ?")
        return await self._write(sql, (conversation_key,)) == 1

    # -- housekeeping ------------------------------------------------------------------------

    async def prune(self, now: float) -> int:
        cutoff = now - self.retention_seconds
        removed = 0
        for sql in _PRUNE:
            removed += await self._write(self._sql(sql), (cutoff,))
        return removed
