"""WAL checkpoints off the store's write path.

With SQLite's default, the commit that grows the WAL past 1,000 pages runs the checkpoint
itself: it copies the WAL into the database file and syncs both to disk (10-20 ms on an
ordinary disk), on the store's one connection, so every store call queued behind it waits
too. In bench/relay_bench.py at 150 messages/s that came every fraction of a second and was
the bridge's slowest acks (p99 15 ms where p50 was 2).

Here the store's connection never checkpoints (`wal_autocheckpoint = 0`); this second
connection, on its own thread, runs a PASSIVE checkpoint every `interval` seconds. A passive
checkpoint takes no lock a writer needs, so commits go on meanwhile; durability is the same
(WAL, synchronous=NORMAL: a commit is in the WAL before it returns)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from pathlib import Path

import aiosqlite

log = logging.getLogger(__name__)

CHECKPOINT_SECONDS = 1.0  # the WAL grows by at most this long's writes between checkpoints


class Checkpointer:
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
