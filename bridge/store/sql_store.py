"""`SqlStore`: the `Store` port in SQL, every statement written once for both databases.

`SqliteStore` (sqlite.py) and `PostgresStore` (postgres.py) are this class over their
driver, a `SqlDriver`: the driver owns the connection, the schema and what truly differs by
dialect (bulk timeline writes, the effective settings); this class says what to run.
Statements are written with `?` marks, turned into the driver's own (`SqlDriver.mark`: "?"
for sqlite3, "%s" for psycopg) on their way to it.

Each method is ONE statement, atomic on its own on either database, except `begin_turn`
and `end_turn`: they write two or three tables (the turn, its message, the end signal's
outbox mark) and the port promises each as ONE atomic step, so they run as one transaction
(`SqlDriver.atomically`): a crash or an error part way leaves the turn, its message and the
mark as they were. The turn's statement comes first, and its row count is the result.

First-wins claims are `INSERT ... ON CONFLICT DO NOTHING` (only uniqueness conflicts are
absorbed; CHECK and foreign-key violations still raise); the caller learns who won from
the row count. First-terminal-wins updates are `UPDATE ... WHERE <not yet decided>`: the
check and the set are one atomic step.

A lease claim is an upsert whose update runs only while the row is free, expired or the
claimer's own: on PostgreSQL a second inserter of the same key waits for the first, then
sees its row and finds the condition false (no row returned: it lost); SQLite has one
writer at a time. The fence grows when the owner changes (NULL, a released lease, never
equals an owner, so a claim after a release grows it too).

An owed post is settled by its outbox mark through a trigger (`AFTER INSERT ON outbox`),
so every path that writes a mark, `end_turn`'s included, settles it in the same statement.

A new table: a migration appended to BOTH sqlite_schema.py and postgres_schema.py (same
version number, each in its own types), and its statements once here (`?` marks; several
writes that must land together through `atomically`). The contract tests in
tests/unit/store/ run against both databases and the memory fake.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from bridge.store.port import (
    MESSAGE_TRANSITIONS,
    Approval,
    ApprovalStatus,
    AsyncLifecycle,
    JournaledMessage,
    MessageState,
    Schedule,
    ScheduleKind,
    SessionRecord,
    Store,
    TraceEntry,
    TraceRecord,
    TurnOutcome,
    TurnRecord,
    UnknownTurn,
)
from bridge.store.port_cluster import InstanceRecord, Lease, UnownedConversation
from bridge.store.port_owed import OwedPost
from bridge.store.sql_rows import (
    APPROVAL_COLUMNS,
    MESSAGE_COLUMNS,
    SCHEDULE_COLUMNS,
    SESSION_COLUMNS,
    TURN_COLUMNS,
    approval_of,
    info_of,
    message_of,
    schedule_of,
    session_of,
    turn_of,
)

# One statement with its parameters.
Statement = tuple[str, tuple[Any, ...]]


class SqlDriver(Protocol):
    """What `SqlStore` needs of a database, each statement in the driver's own marks."""

    @property
    def mark(self) -> str:
        """The driver's parameter mark, for the `?` the statements are written with."""

    @property
    def greatest(self) -> str:
        """The later of two values: SQLite's two-argument MAX, PostgreSQL's GREATEST."""

    @property
    def where(self) -> str:
        """The database, as a log line may show it (no password)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    @property
    def is_open(self) -> bool: ...

    def check_open(self) -> None:
        """Raises `StoreClosed` when the store is not open."""

    async def write(self, sql: str, params: Iterable[Any] = ()) -> int:
        """ONE statement in autocommit mode, atomic on its own; its row count."""

    async def all(self, sql: str, params: Iterable[Any] = ()) -> Sequence[Sequence[Any]]:
        """ONE statement in autocommit mode; its rows."""

    async def atomically(self, statements: Sequence[Statement]) -> list[int]:
        """The statements in order as ONE transaction (all or none), in one hop to the
        database; their row counts."""

    def unknown_row(self, exc: Exception) -> bool:
        """Whether a driver error is a foreign-key violation (a row that names a record the
        store does not know)."""

    async def trace_many(self, records: Sequence[TraceRecord]) -> None:
        """The bulk timeline write, which differs by dialect."""

    async def settings(self) -> dict[str, str | int]:
        """The effective connection settings (for diagnostics and tests)."""


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

_START = (
    "INSERT INTO turns (turn_id, conversation_key, message_id, started_at)"
    " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_FINISH = "UPDATE turns SET outcome = ?, finished_at = ? WHERE turn_id = ? AND outcome IS NULL"

# A holder's own claim or renewal never moves its expiry back: one that waited out an
# outage lands with the expiry it computed before it, older than what a later one wrote
# (seed 892 of the simulator's cluster: the other instance took the lease as expired while
# its holder ran a turn on it). `{greatest}` is the driver's two-value maximum.
_CLAIM = (
    "INSERT INTO leases (conversation_key, owner, fence, expires_at) VALUES (?, ?, 1, ?)"
    " ON CONFLICT (conversation_key) DO UPDATE SET"
    " fence = CASE WHEN leases.owner = excluded.owner THEN leases.fence"
    " ELSE leases.fence + 1 END,"
    " expires_at = CASE WHEN leases.owner = excluded.owner"
    " THEN {greatest}(leases.expires_at, excluded.expires_at) ELSE excluded.expires_at END,"
    " owner = excluded.owner"
    " WHERE leases.owner IS NULL OR leases.owner = excluded.owner OR leases.expires_at <= ?"
    " RETURNING fence"
)
_RENEW = (
    "UPDATE leases SET expires_at = {greatest}(expires_at, ?) WHERE owner = ?"
    " RETURNING conversation_key"
)

# Conversations with no live lease and work left: unfinished messages first (oldest
# waiting first), then those whose only leftover is a post their owner recorded and died
# before sending (an answer, a command's reply: their messages are done). One round trip.
_UNOWNED = (
    "SELECT conversation_key, owner, fence FROM ("
    "SELECT m.conversation_key, l.owner, COALESCE(l.fence, 0) AS fence, 0 AS kind,"
    " MIN(m.seq) AS first FROM messages m"
    " LEFT JOIN leases l ON l.conversation_key = m.conversation_key"
    " WHERE m.state <> 'done'"
    " AND (l.conversation_key IS NULL OR l.owner IS NULL OR l.expires_at <= ?)"
    " GROUP BY m.conversation_key, l.owner, l.fence"
    " UNION ALL "
    "SELECT o.conversation_key, l.owner, COALESCE(l.fence, 0), 1, MIN(o.seq) FROM owed o"
    " LEFT JOIN leases l ON l.conversation_key = o.conversation_key"
    " WHERE l.conversation_key IS NULL OR l.owner IS NULL OR l.expires_at <= ?"
    " GROUP BY o.conversation_key, l.owner, l.fence"
    ") unowned ORDER BY kind, first"
)

_HEARTBEAT = (
    "INSERT INTO instances (instance_id, epoch, started_at, heartbeat_at, ops_url, info)"
    " VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (instance_id) DO UPDATE SET"
    " started_at = CASE WHEN instances.epoch = excluded.epoch THEN instances.started_at"
    " ELSE excluded.started_at END,"
    " epoch = excluded.epoch, heartbeat_at = excluded.heartbeat_at,"
    " ops_url = excluded.ops_url, info = excluded.info"
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


def outbox_mark(idempotency_key: str, message_ids: Sequence[str], now: float) -> Statement:
    """The statement of `mark_sent` (first mark wins)."""
    return (
        "INSERT INTO outbox (idempotency_key, message_ids, sent_at) VALUES (?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (idempotency_key, json.dumps([str(m) for m in message_ids]), now),
    )


class SqlStore(AsyncLifecycle):
    """The `Store` over a `SqlDriver`. Use as `async with store:`."""

    def __init__(self, driver: SqlDriver, *, retention_seconds: float) -> None:
        self.retention_seconds = retention_seconds
        self._db = driver

    def __repr__(self) -> str:
        state = "open" if self._db.is_open else "closed"
        return f"{type(self).__name__}({self._db.where!r}, {state})"

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    async def settings(self) -> dict[str, str | int]:
        """The effective connection settings (for diagnostics and tests)."""
        return await self._db.settings()

    # -- the driver, in `?` marks --------------------------------------------------------------

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._db.mark)

    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        return await self._db.write(self._sql(sql), params)

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> Sequence[Sequence[Any]]:
        return await self._db.all(self._sql(sql), params)

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> Sequence[Any] | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _with_turn(self, turn: Statement, *more: Statement | None) -> bool:
        """`turn` and the `more` statements as one transaction; whether `turn` changed a row."""
        statements = [turn, *(s for s in more if s is not None)]
        counts = await self._db.atomically([(self._sql(sql), p) for sql, p in statements])
        return counts[0] == 1

    # -- 1. inbound dedup --------------------------------------------------------------------

    async def claim_event(self, event_id: str, message_id: str | None, now: float) -> bool:
        # Either uniqueness constraint (event id, message id) absorbs a redelivery.
        sql = (
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
        sql = (
            "INSERT INTO messages (message_id, conversation_key, sender_open_id, chat_id,"
            " text, state, received_at, updated_at, attachments)"
            " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?) ON CONFLICT DO NOTHING"
        )
        params = (message_id, conversation_key, sender_open_id, chat_id, text, now, now)
        return await self._write(sql, (*params, attachments)) == 1

    async def set_message_state(self, message_id: str, state: MessageState, now: float) -> bool:
        self._db.check_open()
        update = state_update(message_id, state, now)
        return update is not None and await self._write(update[0], update[1]) == 1

    async def take_messages(self, message_ids: Sequence[str], fence: int) -> None:
        if message_ids:
            marks = ", ".join("?" * len(message_ids))
            sql = f"UPDATE messages SET taken = ? WHERE taken < ? AND message_id IN ({marks})"
            await self._write(sql, (fence, fence, *message_ids))

    async def interrupt_running_messages(self, now: float) -> int:
        return await self._write(
            "UPDATE messages SET state = 'interrupted', updated_at = ? WHERE state = 'running'",
            (now,),
        )

    async def message(self, message_id: str) -> JournaledMessage | None:
        row = await self._one(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id = ?", (message_id,)
        )
        return None if row is None else message_of(row)

    async def pending_messages(self, conversation_key: str) -> list[JournaledMessage]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages"
            " WHERE conversation_key = ? AND state <> 'done' ORDER BY seq",
            (conversation_key,),
        )
        return [message_of(row) for row in rows]

    async def unfinished_messages(self) -> list[JournaledMessage]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE state <> 'done' ORDER BY seq"
        )
        return [message_of(row) for row in rows]

    # -- a user's private chat with the bot --------------------------------------------------

    async def remember_p2p_chat(self, open_id: str, chat_id: str, now: float) -> None:
        await self._write(
            "INSERT INTO p2p_chats (open_id, chat_id, seen_at) VALUES (?, ?, ?)"
            " ON CONFLICT (open_id) DO UPDATE SET chat_id = excluded.chat_id,"
            " seen_at = excluded.seen_at",
            (open_id, chat_id, now),
        )

    async def p2p_chat(self, open_id: str) -> str | None:
        row = await self._one("SELECT chat_id FROM p2p_chats WHERE open_id = ?", (open_id,))
        return None if row is None else str(row[0])

    # -- 3. session bindings -----------------------------------------------------------------

    async def bind_session(self, conversation_key: str, session_id: str, now: float) -> None:
        await self._write(
            "INSERT INTO bindings (conversation_key, session_id, bound_at) VALUES (?, ?, ?)"
            " ON CONFLICT (conversation_key) DO UPDATE SET"
            " session_id = excluded.session_id, bound_at = excluded.bound_at",
            (conversation_key, session_id, now),
        )

    async def session_for(self, conversation_key: str) -> str | None:
        row = await self._one(
            "SELECT session_id FROM bindings WHERE conversation_key = ?", (conversation_key,)
        )
        return None if row is None else str(row[0])

    async def unbind(self, conversation_key: str) -> bool:
        sql = "DELETE FROM bindings WHERE conversation_key = ?"
        return await self._write(sql, (conversation_key,)) == 1

    # -- what a conversation chose (preferences) and had (sessions) --------------------------

    async def set_preference(
        self, conversation_key: str, name: str, value: str, now: float
    ) -> None:
        await self._write(
            "INSERT INTO preferences (conversation_key, name, value, set_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (conversation_key, name) DO UPDATE"
            " SET value = excluded.value, set_at = excluded.set_at",
            (conversation_key, name, value, now),
        )

    async def preferences(self, conversation_key: str) -> dict[str, str]:
        rows = await self._all(
            "SELECT name, value FROM preferences WHERE conversation_key = ?", (conversation_key,)
        )
        return {str(row[0]): str(row[1]) for row in rows}

    async def preference_everywhere(self, name: str) -> dict[str, str]:
        rows = await self._all(
            "SELECT conversation_key, value FROM preferences WHERE name = ?", (name,)
        )
        return {str(row[0]): str(row[1]) for row in rows}

    async def note_session(self, record: SessionRecord) -> None:
        await self._write(
            f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (conversation_key, session_id) DO UPDATE"
            " SET agent = excluded.agent, folder = excluded.folder,"
            " title = CASE WHEN excluded.title = '' THEN sessions.title"
            " ELSE excluded.title END,"
            f" active_at = {self._db.greatest}(sessions.active_at, excluded.active_at)",
            (
                record.conversation_key,
                record.session_id,
                record.agent,
                record.folder,
                record.title,
                record.started_at,
                record.active_at,
            ),
        )

    async def sessions_of(self, conversation_key: str, limit: int = 20) -> list[SessionRecord]:
        rows = await self._all(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE conversation_key = ?"
            " ORDER BY active_at DESC, started_at DESC LIMIT ?",
            (conversation_key, limit),
        )
        return [session_of(row) for row in rows]

    # -- 4. turns ----------------------------------------------------------------------------

    async def start_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        params = (turn_id, conversation_key, message_id, now)
        return await self._write(_START, params) == 1

    async def finish_turn(self, turn_id: str, outcome: TurnOutcome, now: float) -> bool:
        params = (TurnOutcome(outcome).value, now, turn_id)
        return await self._write(_FINISH, params) == 1

    async def begin_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        start: Statement = (_START, (turn_id, conversation_key, message_id, now))
        return await self._with_turn(start, state_update(message_id, MessageState.RUNNING, now))

    async def end_turn(
        self,
        turn_id: str,
        message_id: str,
        outcome: TurnOutcome,
        now: float,
        *,
        sent: tuple[str, Sequence[str]] | None = None,
    ) -> bool:
        finish: Statement = (_FINISH, (TurnOutcome(outcome).value, now, turn_id))
        done = state_update(message_id, MessageState.DONE, now)
        mark = None if sent is None else outbox_mark(sent[0], sent[1], now)
        return await self._with_turn(finish, done, mark)

    async def mark_prompted(self, turn_id: str, now: float) -> bool:
        sql = "UPDATE turns SET prompted_at = ? WHERE turn_id = ? AND prompted_at IS NULL"
        return await self._write(sql, (now, turn_id)) == 1

    async def turn(self, turn_id: str) -> TurnRecord | None:
        row = await self._one(f"SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = ?", (turn_id,))
        return None if row is None else turn_of(row)

    async def running_turns(self) -> list[TurnRecord]:
        rows = await self._all(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE outcome IS NULL ORDER BY seq"
        )
        return [turn_of(row) for row in rows]

    # -- 5. trace timeline -------------------------------------------------------------------

    async def trace(self, turn_id: str, kind: str, detail: str, now: float) -> None:
        try:
            await self._write(
                "INSERT INTO trace (turn_id, kind, detail, at) VALUES (?, ?, ?, ?)",
                (turn_id, kind, detail, now),
            )
        except Exception as exc:
            if self._db.unknown_row(exc):
                raise UnknownTurn(turn_id) from None
            raise

    async def trace_many(self, records: Sequence[TraceRecord]) -> None:
        await self._db.trace_many(records)

    async def trace_for(self, turn_id: str) -> list[TraceEntry]:
        rows = await self._all(
            "SELECT seq, turn_id, kind, detail, at FROM trace WHERE turn_id = ? ORDER BY seq",
            (turn_id,),
        )
        return [
            TraceEntry(
                seq=int(r[0]), turn_id=str(r[1]), kind=str(r[2]), detail=str(r[3]), at=float(r[4])
            )
            for r in rows
        ]

    # -- 6. approvals ------------------------------------------------------------------------

    async def save_approval(
        self,
        request_id: str,
        turn_id: str,
        conversation_key: str,
        card_message_id: str,
        requester_open_id: str,
        now: float,
        title: str = "",
    ) -> bool:
        sql = (
            "INSERT INTO approvals (request_id, turn_id, conversation_key, card_message_id,"
            " requester_open_id, created_at, title) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING"
        )
        params = (request_id, turn_id, conversation_key, card_message_id, requester_open_id)
        try:
            inserted = await self._write(sql, (*params, now, title))
        except Exception as exc:
            if self._db.unknown_row(exc):
                raise UnknownTurn(turn_id) from None
            raise
        return inserted == 1

    async def resolve_approval(
        self, request_id: str, status: ApprovalStatus, decided_by: str | None, now: float
    ) -> bool:
        status = ApprovalStatus(status)
        if status is ApprovalStatus.OPEN:
            raise ValueError("an approval cannot be resolved to 'open'")
        # First decision wins, as for turns.
        sql = (
            "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?"
            " WHERE request_id = ? AND status = 'open'"
        )
        return await self._write(sql, (status.value, decided_by, now, request_id)) == 1

    async def approval(self, request_id: str) -> Approval | None:
        row = await self._one(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE request_id = ?", (request_id,)
        )
        return None if row is None else approval_of(row)

    async def open_approvals(self) -> list[Approval]:
        rows = await self._all(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'open' ORDER BY seq"
        )
        return [approval_of(row) for row in rows]

    # -- 7. outbox marks ---------------------------------------------------------------------

    async def mark_sent(self, idempotency_key: str, message_ids: Sequence[str], now: float) -> bool:
        sql, params = outbox_mark(idempotency_key, message_ids, now)
        return await self._write(sql, params) == 1

    async def sent(self, idempotency_key: str) -> list[str] | None:
        row = await self._one(
            "SELECT message_ids FROM outbox WHERE idempotency_key = ?", (idempotency_key,)
        )
        if row is None:
            return None
        ids: list[Any] = json.loads(str(row[0]))
        return [str(m) for m in ids]

    # -- schedules ---------------------------------------------------------------------------

    async def add_schedule(
        self,
        conversation_key: str,
        chat_id: str,
        creator_open_id: str,
        kind: ScheduleKind,
        every_seconds: float | None,
        prompt: str,
        next_due_at: float,
        now: float,
        *,
        anchor_message_id: str = "",
        config_key: str = "",
    ) -> Schedule | None:
        rows = await self._all(
            "INSERT INTO schedules (conversation_key, chat_id, creator_open_id, kind,"
            " every_seconds, prompt, next_due_at, created_at, anchor_message_id,"
            " config_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            f" ON CONFLICT DO NOTHING RETURNING {SCHEDULE_COLUMNS}",
            (
                conversation_key,
                chat_id,
                creator_open_id,
                ScheduleKind(kind).value,
                every_seconds,
                prompt,
                next_due_at,
                now,
                anchor_message_id,
                config_key,
            ),
        )
        return schedule_of(rows[0]) if rows else None

    async def schedule(self, schedule_id: int) -> Schedule | None:
        row = await self._one(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE schedule_id = ?", (schedule_id,)
        )
        return None if row is None else schedule_of(row)

    async def schedules(self, conversation_key: str | None = None) -> list[Schedule]:
        if conversation_key is None:
            rows = await self._all(f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY schedule_id")
        else:
            rows = await self._all(
                f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE conversation_key = ?"
                " ORDER BY schedule_id",
                (conversation_key,),
            )
        return [schedule_of(row) for row in rows]

    async def remove_schedule(self, schedule_id: int) -> bool:
        sql = "DELETE FROM schedules WHERE schedule_id = ?"
        return await self._write(sql, (schedule_id,)) == 1

    async def note_schedule_run(
        self, schedule_id: int, slot: float, ran_at: float, next_due_at: float
    ) -> bool:
        # Conditional on the slot: of two writers of one occurrence, one wins (a float read
        # back from REAL / DOUBLE PRECISION compares equal to itself).
        sql = (
            "UPDATE schedules SET last_run_at = ?, next_due_at = ?"
            " WHERE schedule_id = ? AND next_due_at = ?"
        )
        return await self._write(sql, (ran_at, next_due_at, schedule_id, slot)) == 1

    async def note_schedule_skip(self, schedule_id: int, reason: str, at: float) -> bool:
        sql = "UPDATE schedules SET last_skip_at = ?, last_skip_reason = ? WHERE schedule_id = ?"
        return await self._write(sql, (at, reason, schedule_id)) == 1

    # -- leases ------------------------------------------------------------------------------

    async def claim_lease(
        self,
        conversation_key: str,
        owner: str,
        now: float,
        ttl: float,
        *,
        take_expired: bool = True,
    ) -> int | None:
        if not owner:
            raise ValueError("a lease owner is a non-empty instance id")
        expired_before = now if take_expired else float("-inf")  # -inf: none is
        params = (conversation_key, owner, now + ttl, expired_before)
        rows = await self._all(_CLAIM.format(greatest=self._db.greatest), params)
        return int(rows[0][0]) if rows else None

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]:
        rows = await self._all(_RENEW.format(greatest=self._db.greatest), (now + ttl, owner))
        return sorted(str(row[0]) for row in rows)

    async def release_leases(self, owner: str, keys: Sequence[str] | None = None) -> int:
        sql = "UPDATE leases SET owner = NULL WHERE owner = ?"
        params: list[Any] = [owner]
        if keys is not None:
            if not keys:
                return 0
            sql += f" AND conversation_key IN ({', '.join('?' for _ in keys)})"
            params += list(keys)
        return await self._write(sql, params)

    async def lease_of(self, conversation_key: str, now: float) -> Lease | None:
        rows = await self._all(
            "SELECT owner, fence, expires_at FROM leases"
            " WHERE conversation_key = ? AND owner IS NOT NULL AND expires_at > ?",
            (conversation_key, now),
        )
        if not rows:
            return None
        owner, fence, expires_at = rows[0]
        return Lease(owner=str(owner), fence=int(fence), expires_at=float(expires_at))

    async def unowned_conversations(self, now: float) -> list[UnownedConversation]:
        rows = await self._all(_UNOWNED, (now, now))
        found: dict[str, UnownedConversation] = {}
        for key, owner, fence in rows:
            found.setdefault(
                str(key),
                UnownedConversation(
                    conversation_key=str(key),
                    last_owner=None if owner is None else str(owner),
                    fence=int(fence),
                ),
            )
        return list(found.values())

    async def interrupt_running_of(self, conversation_key: str, now: float) -> int:
        return await self._write(
            "UPDATE messages SET state = 'interrupted', updated_at = ?"
            " WHERE conversation_key = ? AND state = 'running'",
            (now, conversation_key),
        )

    # -- instances ---------------------------------------------------------------------------

    async def heartbeat(
        self,
        instance_id: str,
        epoch: str,
        now: float,
        ops_url: str = "",
        info: Mapping[str, Any] | None = None,
    ) -> None:
        payload = json.dumps(dict(info or {}), sort_keys=True, separators=(",", ":"))
        await self._write(_HEARTBEAT, (instance_id, epoch, now, now, ops_url, payload))

    async def instances(self, now: float) -> list[InstanceRecord]:
        rows = await self._all(
            "SELECT instance_id, epoch, started_at, heartbeat_at, ops_url, info"
            " FROM instances ORDER BY instance_id"
        )
        return [
            InstanceRecord(
                instance_id=str(r[0]),
                epoch=str(r[1]),
                started_at=float(r[2]),
                heartbeat_at=float(r[3]),
                ops_url=str(r[4]),
                info=info_of(r[5]),
                age=now - float(r[3]),
            )
            for r in rows
        ]

    # -- owed posts --------------------------------------------------------------------------

    async def owe(
        self,
        idempotency_key: str,
        conversation_key: str,
        turn_id: str | None,
        payload: str,
        now: float,
    ) -> bool:
        # Not once its mark is written: a record that comes after its post was confirmed
        # would never be settled.
        sql = (
            "INSERT INTO owed (idempotency_key, conversation_key, turn_id, payload, owed_at)"
            " SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS"
            " (SELECT 1 FROM outbox WHERE idempotency_key = ?) ON CONFLICT DO NOTHING"
        )
        params = (idempotency_key, conversation_key, turn_id, payload, now, idempotency_key)
        return await self._write(sql, params) == 1

    async def owed(self) -> list[OwedPost]:
        rows = await self._all(
            "SELECT seq, idempotency_key, conversation_key, turn_id, payload, owed_at"
            " FROM owed ORDER BY seq"
        )
        return [
            OwedPost(int(r[0]), str(r[1]), str(r[2]), r[3], str(r[4]), float(r[5])) for r in rows
        ]

    async def settle(self, idempotency_key: str) -> None:
        await self._write("DELETE FROM owed WHERE idempotency_key = ?", (idempotency_key,))

    # -- housekeeping ------------------------------------------------------------------------

    async def prune(self, now: float) -> int:
        cutoff = now - self.retention_seconds
        removed = 0
        for sql in _PRUNE:
            removed += await self._write(sql, (cutoff,))
        return removed


if TYPE_CHECKING:
    _conforms: type[Store] = SqlStore
