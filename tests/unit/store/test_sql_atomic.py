"""The port's several-table calls are ONE atomic step on both SQL stores (issue 35: on
PostgreSQL `end_turn` wrote the outbox mark in a statement of its own, so a failure after it
left a turn half ended). A trigger makes one of the later statements fail; the turn, its
message and the mark must then be as they were, and the store still usable."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from bridge.store import MessageState, SqliteStore, Store, TurnOutcome

T0 = 1_700_000_000.0

# Fails an UPDATE of a message to `state` (messages), or any outbox insert (outbox).
_SQLITE_TRIGGER = {
    "messages": "CREATE TRIGGER injected BEFORE UPDATE OF state ON messages"
    " WHEN NEW.state = '{state}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
    "outbox": "CREATE TRIGGER injected BEFORE INSERT ON outbox"
    " BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
}
_PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION injected() RETURNS trigger LANGUAGE plpgsql"
    " AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"
)
_PG_TRIGGER = {
    "messages": "CREATE TRIGGER injected BEFORE UPDATE ON messages FOR EACH ROW"
    " WHEN (NEW.state = '{state}') EXECUTE FUNCTION injected()",
    "outbox": "CREATE TRIGGER injected BEFORE INSERT ON outbox FOR EACH ROW"
    " EXECUTE FUNCTION injected()",
}


class _Sql:
    """A store and a side connection to its database that can break it."""

    def __init__(self, kind: str, store: Store, target: str) -> None:
        self.kind, self.store, self.target = kind, store, target

    def fail(self, table: str, state: str = "") -> None:
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.target)) as db:
                db.execute(_SQLITE_TRIGGER[table].format(state=state))
                db.commit()
        else:
            with psycopg.connect(self.target, autocommit=True) as conn:
                conn.execute(_PG_FUNCTION)
                conn.execute(_PG_TRIGGER[table].format(state=state).encode())

    def heal(self, table: str) -> None:
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.target)) as db:
                db.execute("DROP TRIGGER injected")
                db.commit()
        else:
            with psycopg.connect(self.target, autocommit=True) as conn:
                conn.execute(f"DROP TRIGGER injected ON {table}".encode())


@pytest.fixture(params=["sqlite", "postgres"])
async def sql(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[_Sql]:
    kind = str(request.param)
    if kind == "sqlite":
        store: Store = SqliteStore(db_path)
        target = str(db_path)
    else:
        from bridge.store.postgres import PostgresStore

        target = str(request.getfixturevalue("pg_url"))
        store = PostgresStore(target, pool_size=1)  # the failed connection is reused
    async with store:
        yield _Sql(kind, store, target)


_FAILED = (sqlite3.Error, psycopg.Error)


async def _running_turn(store: Store) -> None:
    assert await store.journal_message("A", "m1", "ou", "oc", "hi", T0)
    assert await store.begin_turn("t1", "A", "m1", T0)


async def _state(store: Store) -> tuple[TurnOutcome | None, MessageState | None, object]:
    turn, message = await store.turn("t1"), await store.message("m1")
    return (
        None if turn is None else turn.outcome,
        None if message is None else message.state,
        await store.sent("k"),
    )


@pytest.mark.parametrize("failing", ["messages", "outbox"])
async def test_end_turn_ends_the_turn_fully_or_not_at_all(sql: _Sql, failing: str) -> None:
    store = sql.store
    await _running_turn(store)
    sql.fail(failing, state="done")
    with pytest.raises(_FAILED, match="injected failure"):
        await store.end_turn("t1", "m1", TurnOutcome.COMPLETED, T0 + 1, sent=("k", ["om_9"]))
    assert await _state(store) == (None, MessageState.RUNNING, None)  # not at all
    assert [t.turn_id for t in await store.running_turns()] == ["t1"]

    sql.heal(failing)
    assert await store.end_turn("t1", "m1", TurnOutcome.FAILED, T0 + 2, sent=("k", ["om_8"]))
    assert await _state(store) == (TurnOutcome.FAILED, MessageState.DONE, ["om_8"])  # fully


async def test_begin_turn_starts_the_turn_fully_or_not_at_all(sql: _Sql) -> None:
    store = sql.store
    assert await store.journal_message("A", "m1", "ou", "oc", "hi", T0)
    sql.fail("messages", state="running")
    with pytest.raises(_FAILED, match="injected failure"):
        await store.begin_turn("t1", "A", "m1", T0)
    assert await _state(store) == (None, MessageState.QUEUED, None)
    assert await store.turn("t1") is None

    sql.heal("messages")
    assert await store.begin_turn("t1", "A", "m1", T0 + 1)
    assert await _state(store) == (None, MessageState.RUNNING, None)
    assert [t.turn_id for t in await store.running_turns()] == ["t1"]
