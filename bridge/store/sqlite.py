"""`SqliteStore`: the embedded default `Store`, one SQLite file through aiosqlite. Its
statements are `SqlStore`'s, shared with `PostgresStore` (sql_store.py); this module is the
driver (`SqliteDriver`).

Connection settings: WAL journal (readers never block the writer), `synchronous=NORMAL`
(durable across a process crash; a power cut may lose the last commits, never corrupt),
foreign keys on, a busy timeout so an operator's `status` read does not fail a write.

Atomicity: the connection runs in autocommit mode, so a single statement (most calls) is
atomic on its own and no two coroutines interleave inside it. The explicit transactions
are the migrations, applied in `open()` before the store is shared, the port's calls that
write several tables (`atomically`: `begin_turn`, `end_turn`) and `trace_many`: each is
one function run on the connection's thread (`_transaction`), so nothing interleaves and
it costs one thread hop, not one per statement.

WAL checkpoints (`Checkpointer`), off the store's write path. With SQLite's default, the
commit that grows the WAL past 1,000 pages runs the checkpoint itself: it copies the WAL
into the database file and syncs both to disk (10-20 ms on an ordinary disk), on the store's
one connection, so every store call queued behind it waits too. In bench/relay_bench.py at
150 messages/s that came every fraction of a second and was the bridge's slowest acks (p99
15 ms where p50 was 2). Here the store's connection never checkpoints
(`wal_autocheckpoint = 0`); a second connection, on its own thread, runs a PASSIVE
checkpoint every `interval` seconds. A passive checkpoint takes no lock a writer needs, so
commits go on meanwhile; durability is the same (WAL, synchronous=NORMAL: a commit is in the
WAL before it returns).

Schema changes: append a script to `MIGRATIONS` in sqlite_schema.py (and the same version
to postgres_schema.py), never edit a released one. Each script runs in its own
transaction together with its `schema_version` row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiosqlite

from bridge.store.port import (
    DEFAULT_RETENTION_SECONDS,
    Store,
    StoreClosed,
    StoreError,
    TraceRecord,
)
from bridge.store.sql_store import SqlDriver, SqlStore, Statement
from bridge.store.sqlite_schema import connection_settings, migrate

_T = TypeVar("_T")

log = logging.getLogger(__name__)

CHECKPOINT_SECONDS = 1.0  # the WAL grows by at most this long's writes between checkpoints


class SqliteStore(SqlStore):
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
        driver = SqliteDriver(
            self.path, busy_timeout_ms=busy_timeout_ms, checkpoint_seconds=checkpoint_seconds
        )
        self.checkpointer = driver.checkpointer  # for tests and diagnostics
        super().__init__(driver, retention_seconds=retention_seconds)


class SqliteDriver:
    """`SqlStore`'s driver on one SQLite file: one aiosqlite connection (and the
    checkpointer's, apart)."""

    mark = "?"
    greatest = "MAX"  # SQLite's two-argument MAX

    def __init__(self, path: Path, *, busy_timeout_ms: int, checkpoint_seconds: float) -> None:
        self.path = path
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._db: aiosqlite.Connection | None = None
        self.checkpointer = Checkpointer(
            self.path, busy_timeout_ms=self._busy_timeout_ms, interval=checkpoint_seconds
        )
        self._lifecycle = asyncio.Lock()  # two racing open() calls make one connection

    def __repr__(self) -> str:
        state = "open" if self._db is not None else "closed"
        return f"SqliteDriver({self.where!r}, {state})"

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    def is_open(self) -> bool:
        return self._db is not None

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
                await self.checkpointer.start()
            except BaseException:
                await self.checkpointer.stop()
                await db.close()
                raise
            self._db = db

    async def close(self) -> None:
        async with self._lifecycle:
            db, self._db = self._db, None
            await self.checkpointer.stop()
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

    def check_open(self) -> None:
        self._conn()

    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreClosed(f"{self!r} is not open")
        return self._db

    # One thread hop per call (aiosqlite runs every call on its worker thread, ~0.1 ms each):
    # a DML statement has finished when `execute` returns, so its cursor holds nothing and
    # is left to the GC, as aiosqlite's own `execute_fetchall` does.

    async def write(self, sql: str, params: Iterable[Any] = ()) -> int:
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

    async def atomically(self, statements: Sequence[Statement]) -> list[int]:
        def run(db: sqlite3.Connection) -> list[int]:
            return [int(db.execute(sql, params).rowcount) for sql, params in statements]

        return await self._transaction(run)

    async def all(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        return list(await self._conn().execute_fetchall(sql, tuple(params)))

    def unknown_row(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "FOREIGN KEY" in str(exc).upper()

    # -- what differs by dialect -------------------------------------------------------------

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


class Checkpointer:
    """A PASSIVE WAL checkpoint every `interval` seconds, on a connection of its own."""

    def __init__(
        self, path: Path, *, busy_timeout_ms: int, interval: float = CHECKPOINT_SECONDS
    ) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._interval = interval
        self._db: aiosqlite.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self.checkpoints = 0  # completed calls (for tests and diagnostics)

    async def start(self) -> None:
        self._db = await aiosqlite.connect(self._path, isolation_level=None)
        await self._db.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
        self._task = asyncio.create_task(self._run(), name="sqlite-checkpoint")

    async def checkpoint(self) -> None:
        if self._db is None:
            return
        try:
            await self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            self.checkpoints += 1
        except sqlite3.Error as exc:  # retried at the next interval; the WAL keeps the data
            log.warning("WAL checkpoint failed: %s", exc)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.checkpoint()

    async def stop(self) -> None:
        """Stopped before the store's own connection closes, so that closing, the last
        connection, checkpoints whatever is left and removes the WAL."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        db, self._db = self._db, None
        if db is not None:
            await db.close()


if TYPE_CHECKING:
    _conforms: type[Store] = SqliteStore
    _drives: type[SqlDriver] = SqliteDriver
