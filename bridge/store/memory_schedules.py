"""Schedules in `MemoryStore` (mixed in): the same contract as the SQL stores'."""

from __future__ import annotations

from dataclasses import replace

from bridge.store.port import Schedule, ScheduleKind


class MemorySchedules:
    def __init__(self) -> None:
        self._schedules: dict[int, Schedule] = {}
        self._schedule_seq = 0

    def _check(self) -> None:
        raise NotImplementedError  # pragma: no cover - MemoryStore's

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
        self._check()
        if config_key and any(s.config_key == config_key for s in self._schedules.values()):
            return None
        self._schedule_seq += 1
        record = Schedule(
            schedule_id=self._schedule_seq,
            conversation_key=conversation_key,
            chat_id=chat_id,
            creator_open_id=creator_open_id,
            kind=ScheduleKind(kind),
            every_seconds=every_seconds,
            prompt=prompt,
            next_due_at=next_due_at,
            created_at=now,
            anchor_message_id=anchor_message_id,
            config_key=config_key,
        )
        self._schedules[record.schedule_id] = record
        return record

    async def schedule(self, schedule_id: int) -> Schedule | None:
        self._check()
        return self._schedules.get(schedule_id)

    async def schedules(self, conversation_key: str | None = None) -> list[Schedule]:
        self._check()
        return sorted(
            (
                s
                for s in self._schedules.values()
                if conversation_key is None or s.conversation_key == conversation_key
            ),
            key=lambda s: s.schedule_id,
        )

    async def remove_schedule(self, schedule_id: int) -> bool:
        self._check()
        return self._schedules.pop(schedule_id, None) is not None

    async def note_schedule_run(
        self, schedule_id: int, slot: float, ran_at: float, next_due_at: float
    ) -> bool:
        self._check()
        known = self._schedules.get(schedule_id)
        if known is None or known.next_due_at != slot:
            return False
        self._schedules[schedule_id] = replace(known, last_run_at=ran_at, next_due_at=next_due_at)
        return True

    async def note_schedule_skip(self, schedule_id: int, reason: str, at: float) -> bool:
        self._check()
        known = self._schedules.get(schedule_id)
        if known is None:
            return False
        self._schedules[schedule_id] = replace(known, last_skip_at=at, last_skip_reason=reason)
        return True
