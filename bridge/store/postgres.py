"""`PostgresStore`: the `Store` on a PostgreSQL server (BRIDGE_DATABASE_URL), through
psycopg 3 and a small connection pool. Imported only when that setting is set: the SQLite
path never loads psycopg.

Atomicity: the pooled connections run in autocommit mode and every public method is ONE
SQL statement, atomic on its own, whichever connection (or bridge process) runs it.
First-wins claims are `INSERT ... ON CONFLICT DO NOTHING` (PostgreSQL makes a second
inserter wait for the first and then do nothing; CHECK and foreign-key violations still
raise) and first-terminal-wins updates are `UPDATE ... WHERE <not yet decided>` (a second
updater waits on the row lock, then finds the condition false); the caller learns who won
from the row count. Never read-then-write. The only explicit transaction is the migration,
under an advisory lock (postgres_schema.py).

Orders (`seq`) come from identity columns, allocated as rows are inserted: call order
within one bridge, as in SQLite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from psycopg import AsyncConnection
from psycopg.errors import ForeignKeyViolation
from psycopg_pool import AsyncConnectionPool

from bridge.store.port import (
    DEFAULT_RETENTION_SECONDS,
    MESSAGE_TRANSITIONS,
    AsyncLifecycle,
    JournaledMessage,
    MessageState,
    Store,
    StoreClosed,
    TraceEntry,
    TraceRecord,
    Turn,
    TurnOutcome,
    UnknownTurn,
)
from bridge.store.postgres_approvals import PostgresApprovals
from bridge.store.postgres_schema import migrate, schema_version
from bridge.store.sql_choices import ConversationChoices
from bridge.store.sql_cluster import SqlCluster
from bridge.store.sql_schedules import SqlSchedules
from bridge.store.sqlite_schema import (
    MESSAGE_COLUMNS,
    TURN_COLUMNS,
    message_of,
    turn_of,
)

Row = tuple[Any, ...]
Pool = AsyncConnectionPool[AsyncConnection[Row]]


def redact(url: str) -> str:
    """The URL without its password (for repr and errors)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    except ValueError:
        return "postgresql://…"


class PostgresStore(
    ConversationChoices, PostgresApprovals, SqlCluster, SqlSchedules, AsyncLifecycle
):
    """The `Store` on PostgreSQL. Use as `async with PostgresStore(url) as store:`."""

    _MARK = "%s"  # psycopg's parameter mark (the SQL mixins: sql_base.py)
    _GREATEST = "GREATEST"  # ConversationChoices

    def __init__(
        self,
        url: str,
        *,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        pool_size: int = 4,
        connect_timeout: float = 30.0,
    ) -> None:
        self._url = url
        self.retention_seconds = retention_seconds
        self._pool_size = max(1, int(pool_size))
        self._connect_timeout = connect_timeout
        self._pool: Pool | None = None
        self._lifecycle = asyncio.Lock()  # two racing open() calls make one pool

    def __repr__(self) -> str:
        state = "open" if self._pool is not None else "closed"
        return f"PostgresStore({redact(self._url)!r}, {state})"

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        async with self._lifecycle:
            if self._pool is not None:
                return
            pool: Pool = AsyncConnectionPool(
                self._url,
                min_size=1,
                max_size=self._pool_size,
                kwargs={"autocommit": True},
                # A connection the server dropped (a restart, a failover) is replaced before
                # use, not failed on: one round trip per checkout.
                check=AsyncConnectionPool.check_connection,
                open=False,
                name="bridge-store",
            )
            try:
                await pool.open(wait=True, timeout=self._connect_timeout)
                async with pool.connection() as conn:
                    await migrate(conn)
            except BaseException:
                await pool.close()
                raise
            self._pool = pool

    async def close(self) -> None:
        async with self._lifecycle:
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.close()

    async def settings(self) -> dict[str, str | int]:
        """The effective connection settings (for diagnostics and tests)."""
        async with self._conn().connection() as conn:
            cur = await conn.execute("SHOW server_version")
            row = await cur.fetchone()
            return {
                "server_version": "" if row is None else str(row[0]),
                "pool_size": self._pool_size,
                "schema_version": await schema_version(conn),
            }

    def _conn(self) -> Pool:
        if self._pool is None:
            raise StoreClosed(f"{self!r} is not open")
        return self._pool

    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        async with self._conn().connection() as conn:
            cur = await conn.execute(sql, tuple(params))
            return int(cur.rowcount)

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> Row | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        async with self._conn().connection() as conn:
            cur = await conn.execute(sql, tuple(params))
            return await cur.fetchall()

    # -- 1. inbound dedup --------------------------------------------------------------------

    async def claim_event(self, event_id: str, message_id: str | None, now: float) -> bool:
        # Either uniqueness constraint (event id, message id) absorbs a redelivery.
        return (
            await self._write(
                "INSERT INTO seen_events (event_id, message_id, seen_at) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (event_id, message_id, now),
            )
            == 1
        )

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
        return (
            await self._write(
                "INSERT INTO messages (message_id, conversation_key, sender_open_id, chat_id, "
                "text, state, received_at, updated_at, attachments) "
                "VALUES (%s, %s, %s, %s, %s, 'queued', %s, %s, %s) ON CONFLICT DO NOTHING",
                (
                    message_id,
                    conversation_key,
                    sender_open_id,
                    chat_id,
                    text,
                    now,
                    now,
                    attachments,
                ),
            )
            == 1
        )

    async def set_message_state(self, message_id: str, state: MessageState, now: float) -> bool:
        self._conn()
        return await self._write(_STATE_UPDATE, _state_params(message_id, state, now)) == 1

    async def interrupt_running_messages(self, now: float) -> int:
        return await self._write(
            "UPDATE messages SET state = 'interrupted', updated_at = %s WHERE state = 'running'",
            (now,),
        )

    async def message(self, message_id: str) -> JournaledMessage | None:
        row = await self._one(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id = %s", (message_id,)
        )
        return None if row is None else message_of(row)

    async def pending_messages(self, conversation_key: str) -> list[JournaledMessage]:
        rows = await self._all(
            f"SELECT {MESSAGE_COLUMNS} FROM messages "
            "WHERE conversation_key = %s AND state <> 'done' ORDER BY seq",
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
            "INSERT INTO bindings (conversation_key, session_id, bound_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (conversation_key) DO UPDATE SET "
            "session_id = excluded.session_id, bound_at = excluded.bound_at",
            (conversation_key, session_id, now),
        )

    async def session_for(self, conversation_key: str) -> str | None:
        row = await self._one(
            "SELECT session_id FROM bindings WHERE conversation_key = %s", (conversation_key,)
        )
        return None if row is None else str(row[0])

    async def unbind(self, conversation_key: str) -> bool:
        return (
            await self._write(
                "DELETE FROM bindings WHERE conversation_key = %s", (conversation_key,)
            )
            == 1
        )

    # -- 4. turns ----------------------------------------------------------------------------

    async def start_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        return await self._write(_START, (turn_id, conversation_key, message_id, now)) == 1

    async def finish_turn(self, turn_id: str, outcome: TurnOutcome, now: float) -> bool:
        return await self._write(_FINISH, (TurnOutcome(outcome).value, now, turn_id)) == 1

    async def begin_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        params = (turn_id, conversation_key, message_id, now)
        return await self._with_message(_START, params, message_id, MessageState.RUNNING, now)

    async def end_turn(
        self,
        turn_id: str,
        message_id: str,
        outcome: TurnOutcome,
        now: float,
        *,
        sent: tuple[str, Sequence[str]] | None = None,
    ) -> bool:
        if sent is not None:  # first: a crash between the two leaves the mark, as before
            await self.mark_sent(sent[0], sent[1], now)
        params = (TurnOutcome(outcome).value, now, turn_id)
        return await self._with_message(_FINISH, params, message_id, MessageState.DONE, now)

    async def _with_message(
        self, sql: str, params: tuple[Any, ...], message_id: str, state: MessageState, now: float
    ) -> bool:
        """`sql` on a turn and the message moved to `state`, in one statement (data-modifying
        CTEs all run, to completion, atomically); whether `sql` changed the turn."""
        row = await self._one(
            f"WITH changed AS ({sql} RETURNING 1), moved AS ({_STATE_UPDATE} RETURNING 1) "
            "SELECT count(*) FROM changed",
            (*params, *_state_params(message_id, state, now)),
        )
        return row is not None and int(row[0]) == 1

    async def turn(self, turn_id: str) -> Turn | None:
        row = await self._one(f"SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = %s", (turn_id,))
        return None if row is None else turn_of(row)

    async def running_turns(self) -> list[Turn]:
        rows = await self._all(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE outcome IS NULL ORDER BY seq"
        )
        return [turn_of(row) for row in rows]

    # -- 5. trace timeline -------------------------------------------------------------------

    async def trace(self, turn_id: str, kind: str, detail: str, now: float) -> None:
        try:
            await self._write(
                "INSERT INTO trace (turn_id, kind, detail, at) VALUES (%s, %s, %s, %s)",
                (turn_id, kind, detail, now),
            )
        except ForeignKeyViolation:
            raise UnknownTurn(turn_id) from None

    async def trace_many(self, records: Sequence[TraceRecord]) -> None:
        self._conn()
        if not records:
            return
        columns = list(zip(*records, strict=True))
        # One statement; `n` keeps the given order for the identity column.
        sql = (
            "INSERT INTO trace (turn_id, kind, detail, at)"
            " SELECT r.turn_id, r.kind, r.detail, r.at"
            " FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[])"
            " WITH ORDINALITY AS r (turn_id, kind, detail, at, n)"
            " WHERE EXISTS (SELECT 1 FROM turns t WHERE t.turn_id = r.turn_id) ORDER BY r.n"
        )
        params = [list(column) for column in columns]
        try:
            await self._write(sql, params)
        except ForeignKeyViolation:
            # A turn was pruned between the check and the insert (another connection):
            # once more, and the check now skips it.
            await self._write(sql, params)

    async def trace_for(self, turn_id: str) -> list[TraceEntry]:
        rows = await self._all(
            "SELECT seq, turn_id, kind, detail, at FROM trace WHERE turn_id = %s ORDER BY seq",
            (turn_id,),
        )
        return [
            TraceEntry(
                seq=int(r[0]), turn_id=str(r[1]), kind=str(r[2]), detail=str(r[3]), at=float(r[4])
            )
            for r in rows
        ]

    # -- housekeeping ------------------------------------------------------------------------

    async def prune(self, now: float) -> int:
        cutoff = now - self.retention_seconds
        removed = 0
        for sql in (
            "DELETE FROM seen_events WHERE seen_at < %s",
            "DELETE FROM messages WHERE state = 'done' AND updated_at < %s",
            "DELETE FROM approvals WHERE status <> 'open' AND decided_at < %s",
            # Cascades to the turn's trace entries and any approval left on it.
            "DELETE FROM turns WHERE outcome IS NOT NULL AND finished_at < %s",
            "DELETE FROM outbox WHERE sent_at < %s",
            "DELETE FROM sessions WHERE active_at < %s",
            # An instance silent that long is gone (ids with a random suffix pile up).
            "DELETE FROM instances WHERE heartbeat_at < %s",
        ):
            removed += await self._write(sql, (cutoff,))
        return removed


if TYPE_CHECKING:
    _conforms: type[Store] = PostgresStore


_START = (
    "INSERT INTO turns (turn_id, conversation_key, message_id, started_at) "
    "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
# First terminal wins: the WHERE clause makes the check and the set one atomic step.
_FINISH = "UPDATE turns SET outcome = %s, finished_at = %s WHERE turn_id = %s AND outcome IS NULL"

# A message moves to a state only from the states allowed to reach it (none: no row matches).
_STATE_UPDATE = (
    "UPDATE messages SET state = %s, updated_at = %s WHERE message_id = %s AND state = ANY(%s)"
)


def _state_params(message_id: str, state: MessageState, now: float) -> tuple[Any, ...]:
    sources = sorted(MESSAGE_TRANSITIONS[MessageState(state)])
    return (MessageState(state).value, now, message_id, [s.value for s in sources])
