"""One fixture, two implementations: every test in this folder runs against SqliteStore
(a file under tmp_path) and MemoryStore, so the fake cannot drift from the real thing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bridge.store import MemoryStore, SqliteStore, Store

RETENTION = 1000.0  # seconds; small numbers keep the arithmetic readable

Restart = Callable[[], Awaitable[Store]]


class _Harness:
    def __init__(self, kind: str, path: Path) -> None:
        self.kind = kind
        self.path = path
        self.store: Store = self._make()

    def _make(self) -> Store:
        if self.kind == "sqlite":
            return SqliteStore(self.path, retention_seconds=RETENTION)
        return MemoryStore(retention_seconds=RETENTION)

    async def restart(self) -> Store:
        """Close and open again as a new process would: a new SqliteStore on the same file;
        the same MemoryStore instance (its data lives in the object)."""
        await self.store.close()
        if self.kind == "sqlite":
            self.store = self._make()
        await self.store.open()
        return self.store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "bridge.sqlite3"  # the parent does not exist yet


@pytest.fixture(params=["sqlite", "memory"])
async def _harness(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[_Harness]:
    h = _Harness(str(request.param), db_path)
    await h.store.open()
    try:
        yield h
    finally:
        await h.store.close()


@pytest.fixture
def store(_harness: _Harness) -> Store:
    """An open store (closed at teardown); parametrised over both implementations."""
    return _harness.store


@pytest.fixture
def restart(_harness: _Harness) -> Restart:
    """Simulate a bridge restart; returns the reopened store (use it from then on)."""
    return _harness.restart
