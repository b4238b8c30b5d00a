"""One fixture, three implementations: every test in this folder runs against SqliteStore
(a file under tmp_path), PostgresStore (a fresh database of a throwaway server, tests/pg.py)
and MemoryStore, so neither the fake nor an adapter can drift from the contract."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bridge.store import MemoryStore, SqliteStore, Store
from tests.pg import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]  # fixtures of tests/pg.py, used here

RETENTION = 1000.0  # seconds; small numbers keep the arithmetic readable

Restart = Callable[[], Awaitable[Store]]


class _Harness:
    def __init__(self, kind: str, path: Path, url: str = "") -> None:
        self.kind = kind
        self.path = path
        self.url = url
        self.store: Store = self._make()

    def _make(self) -> Store:
        if self.kind == "sqlite":
            return SqliteStore(self.path, retention_seconds=RETENTION)
        if self.kind == "postgres":
            from bridge.store.postgres import PostgresStore

            return PostgresStore(self.url, retention_seconds=RETENTION)
        return MemoryStore(retention_seconds=RETENTION)

    async def restart(self) -> Store:
        """Close and open again as a new process would: a new SqliteStore on the same file
        (a new PostgresStore on the same database); the same MemoryStore instance (its data
        lives in the object)."""
        await self.store.close()
        if self.kind != "memory":
            self.store = self._make()
        await self.store.open()
        return self.store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "bridge.sqlite3"  # the parent does not exist yet


@pytest.fixture(params=["sqlite", "postgres", "memory"])
async def _harness(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[_Harness]:
    kind = str(request.param)
    # The server starts only when a postgres case runs (and skips without PostgreSQL).
    url = str(request.getfixturevalue("pg_url")) if kind == "postgres" else ""
    h = _Harness(kind, db_path, url)
    await h.store.open()
    try:
        yield h
    finally:
        await h.store.close()


@pytest.fixture
def store(_harness: _Harness) -> Store:
    """An open store (closed at teardown); parametrised over the three implementations."""
    return _harness.store


@pytest.fixture
def restart(_harness: _Harness) -> Restart:
    """Simulate a bridge restart; returns the reopened store (use it from then on)."""
    return _harness.restart
