"""What only the PostgreSQL adapter has: several stores (bridges) on one database, its
migrations under an advisory lock, its setting, and psycopg kept off the SQLite path."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import psycopg
import pytest
from pydantic import SecretStr, ValidationError

from bridge.config import Settings
from bridge.config.checks import load_settings
from bridge.running import _url_secrets
from bridge.store import ApprovalStatus, SchemaTooNew, SqliteStore, StoreClosed, TurnOutcome
from bridge.store.postgres import PostgresStore, redact
from bridge.store.postgres_schema import MIGRATIONS
from bridge.stores import store_for
from tests.pg import PgServer

T0 = 1_700_000_000.0


def _versions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    return [int(r[0]) for r in rows]


async def test_two_stores_on_one_database_share_first_wins_claims(pg_url: str) -> None:
    async with PostgresStore(pg_url) as a, PostgresStore(pg_url) as b:
        stores = [a, b] * 10
        claims = await asyncio.gather(*(s.claim_event("ev", "om", T0) for s in stores))
        assert claims.count(True) == 1
        # The same message under another event id, from the other bridge: a duplicate.
        assert not await b.claim_event("ev-2", "om", T0)

        journals = await asyncio.gather(
            *(s.journal_message("A", "m1", "ou", "oc", "hi", T0) for s in stores)
        )
        assert journals.count(True) == 1
        turns = await asyncio.gather(*(s.start_turn("t1", "A", "m1", T0) for s in stores))
        assert turns.count(True) == 1
        outcomes = [TurnOutcome.COMPLETED, TurnOutcome.FAILED]
        finishes = await asyncio.gather(
            *(s.finish_turn("t1", outcomes[i % 2], T0 + 1) for i, s in enumerate(stores))
        )
        assert finishes.count(True) == 1
        turn = await a.turn("t1")
        assert turn is not None
        assert turn.outcome is outcomes[finishes.index(True) % 2]

        await a.start_turn("t2", "A", "m2", T0)
        assert await b.save_approval("p1", "t2", "A", "om_card", "ou", T0)
        decisions = await asyncio.gather(
            *(s.resolve_approval("p1", ApprovalStatus.REJECTED, "ou", T0) for s in stores)
        )
        assert decisions.count(True) == 1
        marks = await asyncio.gather(*(s.mark_sent("k", ["om_1"], T0) for s in stores))
        assert marks.count(True) == 1
        assert await a.sent("k") == await b.sent("k") == ["om_1"]


async def test_stores_opened_at_once_migrate_once(pg_server: PgServer) -> None:
    # A whole database (its `public` schema), as a deployment has it.
    url = pg_server.create_database()
    stores = [PostgresStore(url) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        assert _versions(url) == list(range(1, len(MIGRATIONS) + 1))
        for store in stores:
            assert (await store.settings())["schema_version"] == len(MIGRATIONS)
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_stores_opened_at_once_in_a_new_schema_create_it_once(pg_server: PgServer) -> None:
    # An app of the config file: its own schema, which two instances starting at once both
    # find missing (CREATE SCHEMA IF NOT EXISTS is not safe against itself: one of two failed
    # on pg_namespace's key about one time in eight).
    url = pg_server.create_database()
    for attempt in range(40):
        schema = f"bridge_app_race{attempt}"
        stores = [PostgresStore(url, schema=schema) for _ in range(2)]
        await asyncio.gather(*(s.open() for s in stores))
        try:
            for store in stores:
                assert (await store.settings())["schema_version"] == len(MIGRATIONS)
        finally:
            await asyncio.gather(*(s.close() for s in stores))


async def test_reopen_keeps_data_and_does_not_rerun_migrations(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.start_turn("t1", "A", "m1", T0)
    async with PostgresStore(pg_url) as store:
        assert [t.turn_id for t in await store.running_turns()] == ["t1"]
    assert _versions(pg_url) == list(range(1, len(MIGRATIONS) + 1))


async def test_refuses_a_schema_newer_than_the_code(pg_url: str) -> None:
    async with PostgresStore(pg_url):
        pass
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (99)")
    store = PostgresStore(pg_url)
    with pytest.raises(SchemaTooNew):
        await store.open()
    with pytest.raises(StoreClosed):
        await store.running_turns()


async def test_trace_many_keeps_order_across_a_batch(pg_url: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.start_turn("t1", "A", "m1", T0)
        await store.trace_many([("t1", f"k{i}", "", T0 - i) for i in range(50)])
        assert [e.kind for e in await store.trace_for("t1")] == [f"k{i}" for i in range(50)]
        await store.trace_many([])


def test_repr_never_shows_the_password() -> None:
    url = "postgresql://bridge:s3cret-pw@db.internal:5432/bridge"
    assert "s3cret-pw" not in repr(PostgresStore(url))
    assert redact(url) == "postgresql://bridge:***@db.internal:5432/bridge"
    assert redact("postgresql://postgres@127.0.0.1/db") == "postgresql://postgres@127.0.0.1/db"


def test_database_url_setting_is_a_validated_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://bridge:s3cret-pw@db.internal/bridge"
    settings = Settings(bridge_database_url=url)  # type: ignore[arg-type]
    assert isinstance(settings.store.bridge_database_url, SecretStr)
    assert settings.store.bridge_database_url.get_secret_value() == url
    assert "s3cret-pw" not in repr(settings)
    assert isinstance(store_for(settings), PostgresStore)
    assert isinstance(store_for(Settings()), SqliteStore)  # the default
    assert "s3cret-pw" in _url_secrets(settings.store.bridge_database_url)  # masked in the logs
    assert Settings(bridge_database_url="  ").store.bridge_database_url is None  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Settings(bridge_database_url="mysql://u:pw@h/db")  # type: ignore[arg-type]
    monkeypatch.setenv("BRIDGE_DATABASE_URL", "mysql://u:s3cret-pw@h/db")
    _, problems = load_settings()
    assert [p.variable for p in problems] == ["BRIDGE_DATABASE_URL"]
    assert "s3cret-pw" not in repr(problems)


def test_the_sqlite_path_never_imports_psycopg() -> None:
    code = (
        "import sys; import bridge.service, bridge.store, bridge.app; "
        "sys.exit(sorted(m for m in sys.modules if m.startswith('psycopg')) != [])"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


async def test_two_stores_racing_for_one_lease_get_one_winner(pg_url: str) -> None:
    async with PostgresStore(pg_url, pool_size=4) as a, PostgresStore(pg_url, pool_size=4) as b:
        for round_, key in enumerate(("A", "B", "C")):
            now = T0 + round_
            claims = [(s, f"{name}{n}") for n in range(6) for s, name in ((a, "a"), (b, "b"))]
            fences = await asyncio.gather(*(s.claim_lease(key, o, now, 15.0) for s, o in claims))
            assert [f for f in fences if f is not None] == [1]
        # Takeover of an expired lease, both bridges at once: one winner, fence 2.
        later = T0 + 100
        takeovers = await asyncio.gather(
            *(s.claim_lease("A", f"t{n}", later, 15.0) for n, s in enumerate([a, b] * 6))
        )
        assert [f for f in takeovers if f is not None] == [2]
        lease = await b.lease_of("A", later)
        assert lease is not None
        assert lease.fence == 2
        assert await a.renew_leases(lease.owner, later + 1, 15.0) == ["A"]
