"""`SqliteStore`: the embedded default `Store`, one SQLite file through aiosqlite.

Connection settings: WAL journal (readers never block the writer), `synchronous=NORMAL`
(durable across a process crash; a power cut may lose the last commits, never corrupt),
foreign keys on, a busy timeout so an operator's `status` read does not fail a write.

Atomicity: the connection runs in autocommit mode and every public method is ONE SQL
statement, so no two coroutines can interleave inside a write. First-wins claims are
`INSERT ... ON CONFLICT DO NOTHING` (only uniqueness conflicts are absorbed; CHECK and
foreign-key violations still raise) and first-terminal-wins updates are
`UPDATE ... WHERE <not yet decided>`; the caller learns who won from the row count.
The explicit transactions are the migrations, applied in `open()` before the store is
shared, and the two steps of a turn that write two tables (`begin_turn`, `end_turn`): each
is one function run on the connection's thread (`_transaction`), so nothing interleaves
and it costs one thread hop, not four. Pruning is one DELETE per table, each atomic on its own.

Schema changes: append a script to `MIGRATIONS` in sqlite_schema.py, never edit a released
one. Each script runs in its own transaction together with its `schema_version` row.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiosqlite

from bridge.store.port import (
    DEFAULT_RETENTION_SECONDS,
    Approval,
    ApprovalStatus,
    AsyncLifecycle,
    JournaledMessage,
    MessageState,
    Store,
    StoreClosed,
    StoreError,
    TraceEntry,
    TraceRecord,
    UnknownTurn,
)
from bridge.store.sql_choices import ConversationChoices
from bridge.store.sql_cluster import SqlCluster
from bridge.store.sql_schedules import SqlSchedules
from bridge.store.sqlite_checkpoint import CHECKPOINT_SECONDS, Checkpointer
from bridge.store.sqlite_schema import (
    APPROVAL_COLUMNS,
    MESSAGE_COLUMNS,
    approval_of,
    connection_settings,
    is_foreign_key_error,
    message_of,
    migrate,
)
from bridge.store.sqlite_turns import TurnRecords, outbox_mark, state_update

_T = TypeVar("_T")


class SqliteStore(TurnRecords, ConversationChoices, SqlCluster, SqlSchedules, AsyncLifecycle):
    """The `Store` over one SQLite file. Use as `async with SqliteStore(path) as store:`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        busy_timeout_ms: int = 5000,
        checkpoint_seconds: float = CHECKPOINT_SECONDS,
    ) -> None:
        self.path = Path(path)
        self.retention_seconds = retention_seconds
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._db: aiosqlite.Connection | None = None
        self._checkpointer = Checkpointer(
            self.path, busy_timeout_ms=self._busy_timeout_ms, interval=checkpoint_seconds
        )
        self._lifecycle = asyncio.Lock()  # two racing open() calls make one connection

    def __repr__(self) -> str:
        state = "open" if self._db is not None else "closed"
        return f"SqliteStore({str(self.path)!r}, {state})"

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        async with self._lifecycle:
            if self._db is not None:
                return
            await asyncio.to_thread(self.path.parent.mkdir, parents=True, exist_ok=True)
            db = await aiosqlite.connect(self.path, isolation_level=None)
            try:
                await self._configure(db)
                await migrate(db)
                await self._checkpointer.start()
            except BaseException:
                await self._checkpointer.stop()
                await db.close()
                raise
            self._db = db

    async def close(self) -> None:
        async with self._lifecycle:
            db, self._db = self._db, None
            await self._checkpointer.stop()
            if db is not None:
                await db.close()

    async def _configure(self, db: aiosqlite.Connection) -> None:
        await db.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        async with db.execute("PRAGMA journal_mode = WAL") as cur:
            row = await cur.fetchone()
        mode = "" if row is None else str(row[0]).lower()
        if mode != "wal":
            raise StoreError(f"SQLite refused WAL mode for {self.path} (got {mode!r})")
        await db.execute("PRAGMA synchronous = NORMAL")
        await db.execute("PRAGMA foreign_keys = ON")
        await db.execute("PRAGMA wal_autocheckpoint = 0")  # `Checkpointer` does it, apart

    async def settings(self) -> dict[str, str | int]:
        """The effective connection settings (for diagnostics and tests)."""
        return await connection_settings(self._conn())

    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreClosed(f"{self!r} is not open")
        return self._db

    # One thread hop per call (aiosqlite runs every call on its worker thread, ~0.1 ms each):
    # a DML statement has finished when `execute` returns, so its cursor holds nothing and
    # is left to the GC, as aiosqlite's own `execute_fetchall` does.

    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        cursor = await self._conn().execute(sql, tuple(params))
        return int(cursor.rowcount)

    async def _transaction(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Several statements as one transaction in ONE hop: `work` runs on aiosqlite's
        worker thread against the sqlite3 connection, through the queue every aiosqlite call
        goes through (`Connection._execute`; version pinned in pyproject.toml). Nothing else
        runs on that connection meanwhile. Keep `work` to a few short statements: no I/O
        and no await happen inside it."""
        conn = self._conn()

        def run() -> _T:
            db = conn._conn
            db.execute("BEGIN IMMEDIATE")
            try:
                result = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        result: _T = await conn._execute(run)  # type: ignore[no-untyped-call]
        return result

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        return list(await self._conn().execute_fetchall(sql, tuple(params)))

    # -- 1. inbound dedup --------------------------------------------------------------------

    async def claim_event(self, event_id: str, message_id: str | None, now: float) -> bool:
        # Either uniqueness constraint (event id, message id) absorbs a redelivery.
        return (
            await self._write(
                "INSERT INTO seen_events (event_id, message_id, seen_at) VALUES (?, ?, ?) "
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
                "VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?) ON CONFLICT DO NOTHING",
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
        update = state_update(message_id, state, now)
        return update is not None and await self._write(*update) == 1

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
            f"SELECT {MESSAGE_COLUMNS} FROM messages "
            "WHERE conversation_key = ? AND state <> 'done' ORDER BY seq",
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
            "INSERT INTO bindings (conversation_key, session_id, bound_at) VALUES (?, ?, ?) "
            "ON CONFLICT (conversation_key) DO UPDATE SET "
            "session_id = excluded.session_id, bound_at = excluded.bound_at",
            (conversation_key, session_id, now),
        )

    async def session_for(self, conversation_key: str) -> str | None:
        row = await self._one(
            "SELECT session_id FROM bindings WHERE conversation_key = ?", (conversation_key,)
        )
        return None if row is None else str(row[0])

    async def unbind(self, conversation_key: str) -> bool:
        return (
            await self._write(
                "DELETE FROM bindings WHERE conversation_key = ?", (conversation_key,)
            )
            == 1
        )

    # -- 5. trace timeline -------------------------------------------------------------------

    async def trace(self, turn_id: str, kind: str, detail: str, now: float) -> None:
        try:
            await self._write(
                "INSERT INTO trace (turn_id, kind, detail, at) VALUES (?, ?, ?, ?)",
                (turn_id, kind, detail, now),
            )
        except sqlite3.IntegrityError as exc:
            if is_foreign_key_error(exc):
                raise UnknownTurn(turn_id) from None
            raise

    async def trace_many(self, records: Sequence[TraceRecord]) -> None:
        rows = [(turn_id, kind, detail, at, turn_id) for turn_id, kind, detail, at in records]
        if not rows:
            return

        def insert(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT INTO trace (turn_id, kind, detail, at) SELECT ?, ?, ?, ?"
                " WHERE EXISTS (SELECT 1 FROM turns WHERE turn_id = ?)",
                rows,
            )

        # One transaction: in autocommit mode each row would be a commit of its own (and
        # its pages written to the WAL again), 27 against 5 us a row here.
        await self._transaction(insert)

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
        try:
            inserted = await self._write(
                "INSERT INTO approvals (request_id, turn_id, conversation_key, card_message_id, "
                "requester_open_id, created_at, title) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (
                    request_id,
                    turn_id,
                    conversation_key,
                    card_message_id,
                    requester_open_id,
                    now,
                    title,
                ),
            )
        except sqlite3.IntegrityError as exc:
            if is_foreign_key_error(exc):
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
        return (
            await self._write(
                "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ? "
                "WHERE request_id = ? AND status = 'open'",
                (status.value, decided_by, now, request_id),
            )
            == 1
        )

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
        return await self._write(*outbox_mark(idempotency_key, message_ids, now)) == 1

    async def sent(self, idempotency_key: str) -> list[str] | None:
        row = await self._one(
            "SELECT message_ids FROM outbox WHERE idempotency_key = ?", (idempotency_key,)
        )
        if row is None:
            return None
        ids: list[Any] = json.loads(str(row[0]))
        return [str(m) for m in ids]

    # -- housekeeping ------------------------------------------------------------------------

    async def prune(self, now: float) -> int:
        cutoff = now - self.retention_seconds
        removed = 0
        for sql in (
            "DELETE FROM seen_events WHERE seen_at < ?",
            "DELETE FROM messages WHERE state = 'done' AND updated_at < ?",
            "DELETE FROM approvals WHERE status <> 'open' AND decided_at < ?",
            # Cascades to the turn's trace entries and any approval left on it.
            "DELETE FROM turns WHERE outcome IS NOT NULL AND finished_at < ?",
            "DELETE FROM outbox WHERE sent_at < ?",
            "DELETE FROM sessions WHERE active_at < ?",
            # An instance silent that long is gone (ids with a random suffix pile up).
            "DELETE FROM instances WHERE heartbeat_at < ?",
        ):
            removed += await self._write(sql, (cutoff,))
        return removed


if TYPE_CHECKING:
    _conforms: type[Store] = SqliteStore
