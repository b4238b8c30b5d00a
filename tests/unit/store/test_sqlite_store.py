"""What only the SQLite adapter has: the file, its pragmas and its migrations."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from bridge.store import SchemaTooNew, SqliteStore, StoreClosed, TurnOutcome, sqlite_schema

T0 = 1_700_000_000.0


def _exists(path: Path | str) -> bool:
    return Path(path).exists()


def _size(path: Path | str) -> int:
    return Path(path).stat().st_size


def _read(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as db:
        return list(db.execute(sql).fetchall())


async def test_creates_parent_dir_and_runs_in_wal_mode(db_path: Path) -> None:
    assert not _exists(db_path.parent)
    async with SqliteStore(db_path) as store:
        assert _exists(db_path)
        settings = await store.settings()
        assert settings["journal_mode"] == "wal"
        assert settings["synchronous"] == 1  # NORMAL
        assert settings["foreign_keys"] == 1
        assert settings["busy_timeout"] == 5000
        assert settings["wal_autocheckpoint"] == 0  # checkpoints run apart (Checkpointer)
        assert settings["schema_version"] == len(sqlite_schema.MIGRATIONS)
        await store.claim_event("ev", None, T0)
        # WAL is a property of the file: an independent connection sees it too,
        # and sees the committed write while the store is still open.
        assert _read(db_path, "PRAGMA journal_mode") == [("wal",)]
        assert _read(db_path, "SELECT event_id FROM seen_events") == [("ev",)]
        assert _exists(f"{db_path}-wal")


async def test_reopen_keeps_data_and_does_not_rerun_migrations(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await store.start_turn("t1", "A", "m1", T0)
    async with SqliteStore(db_path) as store:
        assert [t.turn_id for t in await store.running_turns()] == ["t1"]
        assert await store.finish_turn("t1", TurnOutcome.COMPLETED, T0 + 1)
    async with SqliteStore(db_path) as store:
        assert not await store.finish_turn("t1", TurnOutcome.FAILED, T0 + 2)
    versions = _read(db_path, "SELECT version FROM schema_version ORDER BY version")
    assert versions == [(v,) for v in range(1, len(sqlite_schema.MIGRATIONS) + 1)]


async def test_refuses_a_schema_newer_than_the_code(db_path: Path) -> None:
    async with SqliteStore(db_path):
        pass
    with closing(sqlite3.connect(db_path)) as db:
        db.execute("INSERT INTO schema_version (version) VALUES (?)", (99,))
        db.commit()
    store = SqliteStore(db_path)
    with pytest.raises(SchemaTooNew, match="99"):
        await store.open()
    with pytest.raises(StoreClosed):
        await store.sent("k")  # the failed open left nothing half-open


async def test_a_new_migration_is_applied_once_on_open(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(db_path) as store:
        await store.mark_sent("k", ["om_1"], T0)
    latest = len(sqlite_schema.MIGRATIONS) + 1
    v2 = "ALTER TABLE outbox ADD COLUMN note TEXT NOT NULL DEFAULT '';"
    monkeypatch.setattr(sqlite_schema, "MIGRATIONS", (*sqlite_schema.MIGRATIONS, v2))
    async with SqliteStore(db_path) as store:
        assert (await store.settings())["schema_version"] == latest
        assert await store.sent("k") == ["om_1"]
    async with SqliteStore(db_path) as store:  # no second ALTER (it would fail)
        assert (await store.settings())["schema_version"] == latest
    assert _read(db_path, "SELECT note FROM outbox") == [("",)]


async def test_a_failing_migration_rolls_back_entirely(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(db_path):
        pass
    broken = "CREATE TABLE half_done (x INTEGER); INSERT INTO no_such_table VALUES (1);"
    monkeypatch.setattr(sqlite_schema, "MIGRATIONS", (*sqlite_schema.MIGRATIONS, broken))
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        await SqliteStore(db_path).open()
    tables = _read(db_path, "SELECT name FROM sqlite_master WHERE name = 'half_done'")
    assert tables == []
    released = len(sqlite_schema.MIGRATIONS) - 1  # the broken one is not recorded
    assert _read(db_path, "SELECT MAX(version) FROM schema_version") == [(released,)]


async def test_check_constraints_are_not_swallowed_by_first_wins_inserts(
    db_path: Path,
) -> None:
    # ON CONFLICT DO NOTHING absorbs only uniqueness conflicts; bad data still raises.
    async with SqliteStore(db_path) as store:
        with pytest.raises(sqlite3.IntegrityError):
            await store.journal_message("A", "m1", "ou", "oc", None, T0)  # type: ignore[arg-type]
        assert await store.journal_message("A", "m1", "ou", "oc", "ok", T0)


async def test_racing_opens_make_one_connection(db_path: Path) -> None:
    store = SqliteStore(db_path)
    await asyncio.gather(store.open(), store.open(), store.open())
    try:
        assert await store.claim_event("ev", None, T0)
    finally:
        await store.close()


async def test_wal_checkpoints_run_apart_from_the_writes(db_path: Path) -> None:
    """The store's commits never copy the WAL into the database file (no checkpoint, with
    its disk syncs, in the path of a message); the checkpointer's connection does, on its
    interval; closing the store checkpoints the rest and removes the WAL."""
    wal = Path(f"{db_path}-wal")
    async with SqliteStore(db_path, checkpoint_seconds=3600.0) as store:  # never by itself
        base = _size(db_path)
        for i in range(1500):  # several thousand WAL pages: past SQLite's default 1,000
            await store.journal_message("oc_1", f"om_{i}", "ou_1", "oc_1", "x" * 400, T0 + i)
        assert _size(wal) > 1000 * 4096  # grown, never reset by a commit
        assert _size(db_path) == base  # nothing copied in yet
        await store.checkpointer.checkpoint()
        assert _size(db_path) > base  # the pages are in the database file now
        assert _read(db_path, "SELECT COUNT(*) FROM messages") == [(1500,)]
    assert not _exists(wal)


async def test_a_batch_of_trace_entries_is_one_commit(db_path: Path) -> None:
    """The write-behind timeline's batch goes in as one transaction: in autocommit mode
    each row would be a commit of its own, its pages written to the WAL again each time
    (hundreds of KiB for a batch; one transaction writes a few pages)."""
    wal = Path(f"{db_path}-wal")
    async with SqliteStore(db_path, checkpoint_seconds=3600.0) as store:
        await store.journal_message("oc_1", "om_1", "ou_1", "oc_1", "hi", T0)
        await store.start_turn("om_1", "oc_1", "om_1", T0)
        before = _size(wal)
        await store.trace_many([("om_1", "tool", f"step {i}", T0 + i) for i in range(200)])
        assert _size(wal) - before < 20 * 4096
        assert _read(db_path, "SELECT COUNT(*) FROM trace") == [(200,)]


async def test_the_checkpointer_runs_on_its_interval(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(db_path, checkpoint_seconds=0.0) as store:
        checkpointer = store.checkpointer
        twice = asyncio.Event()
        real = checkpointer.checkpoint

        async def counted() -> None:
            await real()
            if checkpointer.checkpoints >= 2:
                twice.set()

        monkeypatch.setattr(checkpointer, "checkpoint", counted)
        await store.journal_message("oc_1", "om_1", "ou_1", "oc_1", "hello", T0)
        async with asyncio.timeout(10):
            await twice.wait()
        assert _read(db_path, "SELECT message_id FROM messages") == [("om_1",)]
