"""A turn's record in SQLite (`turns`), and the two steps that move its message with it.
Mixed into `SqliteStore`: single statements, except `begin_turn` and `end_turn`, which write
two tables in one transaction (`SqliteStore._transaction`, one thread hop)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from bridge.store.port import MESSAGE_TRANSITIONS, MessageState, Turn, TurnOutcome
from bridge.store.sqlite_schema import TURN_COLUMNS, turn_of

_T = TypeVar("_T")
RUNNING, DONE = MessageState.RUNNING, MessageState.DONE

_START = (
    "INSERT INTO turns (turn_id, conversation_key, message_id, started_at) "
    "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# First terminal wins: the WHERE clause makes the check and the set one atomic step.
_FINISH = "UPDATE turns SET outcome = ?, finished_at = ? WHERE turn_id = ? AND outcome IS NULL"


class TurnRecords:
    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        raise NotImplementedError  # pragma: no cover - SqliteStore's

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        raise NotImplementedError  # pragma: no cover - SqliteStore's

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError  # pragma: no cover - SqliteStore's

    async def _transaction(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        raise NotImplementedError  # pragma: no cover - SqliteStore's

    async def start_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        return await self._write(_START, (turn_id, conversation_key, message_id, now)) == 1

    async def finish_turn(self, turn_id: str, outcome: TurnOutcome, now: float) -> bool:
        return await self._write(_FINISH, (TurnOutcome(outcome).value, now, turn_id)) == 1

    async def begin_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        running = state_update(message_id, MessageState.RUNNING, now)
        return await self._with_message(
            _START, (turn_id, conversation_key, message_id, now), running
        )

    async def end_turn(
        self,
        turn_id: str,
        message_id: str,
        outcome: TurnOutcome,
        now: float,
        *,
        sent: tuple[str, Sequence[str]] | None = None,
    ) -> bool:
        params = (TurnOutcome(outcome).value, now, turn_id)
        mark = None if sent is None else outbox_mark(sent[0], sent[1], now)
        return await self._with_message(_FINISH, params, state_update(message_id, DONE, now), mark)

    async def _with_message(
        self,
        sql: str,
        params: tuple[Any, ...],
        message: tuple[str, tuple[Any, ...]] | None,
        mark: tuple[str, tuple[Any, ...]] | None = None,
    ) -> bool:
        """`sql` on a turn, the statement moving its message, and an outbox `mark`, as one
        transaction in one hop; whether `sql` changed the turn."""

        def run(db: sqlite3.Connection) -> bool:
            changed = db.execute(sql, params).rowcount
            if message is not None:
                db.execute(*message)
            if mark is not None:
                db.execute(*mark)
            return changed == 1

        return await self._transaction(run)

    async def turn(self, turn_id: str) -> Turn | None:
        row = await self._one(f"SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = ?", (turn_id,))
        return None if row is None else turn_of(row)

    async def running_turns(self) -> list[Turn]:
        rows = await self._all(
            f"SELECT {TURN_COLUMNS} FROM turns WHERE outcome IS NULL ORDER BY seq"
        )
        return [turn_of(row) for row in rows]


def outbox_mark(
    idempotency_key: str, message_ids: Sequence[str], now: float
) -> tuple[str, tuple[Any, ...]]:
    """The statement of `mark_sent` (first mark wins)."""
    return (
        "INSERT INTO outbox (idempotency_key, message_ids, sent_at) VALUES (?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        (idempotency_key, json.dumps([str(m) for m in message_ids]), now),
    )


def state_update(
    message_id: str, state: MessageState, now: float
) -> tuple[str, tuple[Any, ...]] | None:
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
