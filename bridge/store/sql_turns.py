"""Turns and their timelines in SQL, mixed into `SqliteStore` and `PostgresStore`
(sql_store.py): each statement written once, `?` marks (sql_base.py).

Single statements, except `begin_turn` and `end_turn`: they write two or three tables (the
turn, its message, the end signal's outbox mark) and the port promises each as ONE atomic
step, so they run as one transaction (`_atomically`): a crash or an error part way leaves
the turn, its message and the mark as they were. The turn's statement comes first, and its
row count is the result (first terminal wins: the WHERE clause makes the check and the set
one atomic step). Bulk timeline writes (`trace_many`) differ by dialect: the adapters'."""

from __future__ import annotations

import json
from collections.abc import Sequence

from bridge.store.port import MessageState, TraceEntry, Turn, TurnOutcome, UnknownTurn
from bridge.store.sql_base import SqlStatements, Statement
from bridge.store.sql_journal import state_update
from bridge.store.sql_rows import TURN_COLUMNS, turn_of

_START = (
    "INSERT INTO turns (turn_id, conversation_key, message_id, started_at)"
    " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_FINISH = "UPDATE turns SET outcome = ?, finished_at = ? WHERE turn_id = ? AND outcome IS NULL"


def outbox_mark(idempotency_key: str, message_ids: Sequence[str], now: float) -> Statement:
    """The statement of `mark_sent` (first mark wins)."""
    return (
        "INSERT INTO outbox (idempotency_key, message_ids, sent_at) VALUES (?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (idempotency_key, json.dumps([str(m) for m in message_ids]), now),
    )


class SqlTurns(SqlStatements):
    async def start_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        params = (turn_id, conversation_key, message_id, now)
        return await self._write(self._sql(_START), params) == 1

    async def finish_turn(self, turn_id: str, outcome: TurnOutcome, now: float) -> bool:
        params = (TurnOutcome(outcome).value, now, turn_id)
        return await self._write(self._sql(_FINISH), params) == 1

    async def begin_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        start: Statement = (_START, (turn_id, conversation_key, message_id, now))
        return await self._with_turn(start, state_update(message_id, MessageState.RUNNING, now))

    async def end_turn(
        self,
        turn_id: str,
        message_id: str,
        outcome: TurnOutcome,
        now: float,
        *,
        sent: tuple[str, Sequence[str]] | None = None,
    ) -> bool:
        finish: Statement = (_FINISH, (TurnOutcome(outcome).value, now, turn_id))
        done = state_update(message_id, MessageState.DONE, now)
        mark = None if sent is None else outbox_mark(sent[0], sent[1], now)
        return await self._with_turn(finish, done, mark)

    async def mark_prompted(self, turn_id: str, now: float) -> bool:
        sql = "UPDATE turns SET prompted_at = ? WHERE turn_id = ? AND prompted_at IS NULL"
        return await self._write(self._sql(sql), (now, turn_id)) == 1

    async def _with_turn(self, turn: Statement, *more: Statement | None) -> bool:
        """`turn` and the `more` statements as one transaction; whether `turn` changed a row."""
        counts = await self._atomically([turn, *(s for s in more if s is not None)])
        return counts[0] == 1

    async def turn(self, turn_id: str) -> Turn | None:
        row = await self._one(
            self._sql(f"SELECT {TURN_COLUMNS} FROM turns WHERE turn_id = ?"), (turn_id,)
        )
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
                self._sql("INSERT INTO trace (turn_id, kind, detail, at) VALUES (?, ?, ?, ?)"),
                (turn_id, kind, detail, now),
            )
        except Exception as exc:
            if self._unknown_row(exc):
                raise UnknownTurn(turn_id) from None
            raise

    async def trace_for(self, turn_id: str) -> list[TraceEntry]:
        rows = await self._all(
            self._sql(
                "SELECT seq, turn_id, kind, detail, at FROM trace WHERE turn_id = ? ORDER BY seq"
            ),
            (turn_id,),
        )
        return [
            TraceEntry(
                seq=int(r[0]), turn_id=str(r[1]), kind=str(r[2]), detail=str(r[3]), at=float(r[4])
            )
            for r in rows
        ]
