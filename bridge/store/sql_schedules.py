"""Schedules in SQL (`schedules`, schema version 6), mixed into `SqliteStore` and
`PostgresStore`: the statements are the same in both but for the parameter mark, so one
mixin serves both (`_MARK`). Each method is one statement, like the rest of the store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bridge.store.port import Schedule, ScheduleKind
from bridge.store.sql_base import SqlStatements

_COLUMNS = (
    "schedule_id, conversation_key, chat_id, creator_open_id, kind, every_seconds, prompt,"
    " next_due_at, created_at, anchor_message_id, config_key, last_run_at, last_skip_at,"
    " last_skip_reason"
)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def schedule_of(row: Sequence[Any]) -> Schedule:
    return Schedule(
        schedule_id=int(row[0]),
        conversation_key=str(row[1]),
        chat_id=str(row[2]),
        creator_open_id=str(row[3]),
        kind=ScheduleKind(row[4]),
        every_seconds=_opt_float(row[5]),
        prompt=str(row[6]),
        next_due_at=float(row[7]),
        created_at=float(row[8]),
        anchor_message_id=str(row[9]),
        config_key=str(row[10]),
        last_run_at=_opt_float(row[11]),
        last_skip_at=_opt_float(row[12]),
        last_skip_reason=str(row[13]),
    )


class SqlSchedules(SqlStatements):
    async def add_schedule(
        self,
        conversation_key: str,
        chat_id: str,
        creator_open_id: str,
        kind: ScheduleKind,
        every_seconds: float | None,
        prompt: str,
        next_due_at: float,
        now: float,
        *,
        anchor_message_id: str = "",
        config_key: str = "",
    ) -> Schedule | None:
        rows = await self._all(
            self._sql(
                "INSERT INTO schedules (conversation_key, chat_id, creator_open_id, kind,"
                " every_seconds, prompt, next_due_at, created_at, anchor_message_id,"
                " config_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                f" ON CONFLICT DO NOTHING RETURNING {_COLUMNS}"
            ),
            (
                conversation_key,
                chat_id,
                creator_open_id,
                ScheduleKind(kind).value,
                every_seconds,
                prompt,
                next_due_at,
                now,
                anchor_message_id,
                config_key,
            ),
        )
        return schedule_of(rows[0]) if rows else None

    async def schedule(self, schedule_id: int) -> Schedule | None:
        rows = await self._all(
            self._sql(f"SELECT {_COLUMNS} FROM schedules WHERE schedule_id = ?"), (schedule_id,)
        )
        return schedule_of(rows[0]) if rows else None

    async def schedules(self, conversation_key: str | None = None) -> list[Schedule]:
        if conversation_key is None:
            rows = await self._all(f"SELECT {_COLUMNS} FROM schedules ORDER BY schedule_id")
        else:
            rows = await self._all(
                self._sql(
                    f"SELECT {_COLUMNS} FROM schedules WHERE conversation_key = ?"
                    " ORDER BY schedule_id"
                ),
                (conversation_key,),
            )
        return [schedule_of(row) for row in rows]

    async def remove_schedule(self, schedule_id: int) -> bool:
        sql = self._sql("DELETE FROM schedules WHERE schedule_id = ?")
        return await self._write(sql, (schedule_id,)) == 1

    async def note_schedule_run(
        self, schedule_id: int, slot: float, ran_at: float, next_due_at: float
    ) -> bool:
        # Conditional on the slot: of two writers of one occurrence, one wins (a float read
        # back from REAL / DOUBLE PRECISION compares equal to itself).
        sql = self._sql(
            "UPDATE schedules SET last_run_at = ?, next_due_at = ?"
            " WHERE schedule_id = ? AND next_due_at = ?"
        )
        return await self._write(sql, (ran_at, next_due_at, schedule_id, slot)) == 1

    async def note_schedule_skip(self, schedule_id: int, reason: str, at: float) -> bool:
        sql = self._sql(
            "UPDATE schedules SET last_skip_at = ?, last_skip_reason = ? WHERE schedule_id = ?"
        )
        return await self._write(sql, (at, reason, schedule_id)) == 1
