"""What /schedules and the schedule lines say: a listing's entries, "every 1h" or "at
09:30", and times in the conversation's zone (the operator's BRIDGE_TIMEZONE, else the
host's)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, tzinfo

from bridge.core.inputs import ScheduleResult
from bridge.core.schedules import excerpt, format_interval
from bridge.feishu.text import neutralize_mentions
from bridge.i18n import Translator
from bridge.store.port import Schedule


class ScheduleTexts:
    def __init__(
        self, translator: Translator, zone: tzinfo | None, wall: Callable[[], float]
    ) -> None:
        """`wall`: the wall clock, whose present moment picks the host zone's offset (summer
        time or not) when no zone is set."""
        self._t = translator
        self._zone_setting = zone
        self._wall = wall

    def listing(
        self, schedules: list[Schedule], now: float
    ) -> tuple[ScheduleResult, dict[str, str | int]]:
        if not schedules:
            return ScheduleResult.EMPTY, {}
        lines = [self.entry(s, now) for s in schedules]
        return ScheduleResult.LISTED, {"entries": "\n".join(lines)}

    def entry(self, s: Schedule, now: float) -> str:
        last = ""
        if s.last_run_at is not None:
            last += self._t("schedule.last_run", at=self.time(s.last_run_at))
        if s.last_skip_at is not None and (s.last_run_at is None or s.last_skip_at > s.last_run_at):
            reason = self._t(f"schedule.reason.{s.last_skip_reason}")
            last += self._t("schedule.last_skip", at=self.time(s.last_skip_at), reason=reason)
        upcoming = self._t("schedule.due_now") if s.next_due_at <= now else self.time(s.next_due_at)
        return self._t(
            "schedule.entry",
            number=s.schedule_id,
            when=self.when(s),
            prompt=neutralize_mentions(excerpt(s.prompt)),
            next=upcoming,
            by=self._t("schedule.by_operator") if s.config_key else "",
            last=last,
        )

    def when(self, s: Schedule) -> str:
        if s.every_seconds is not None:
            return self._t("schedule.when_every", interval=format_interval(s.every_seconds))
        return self._t("schedule.when_at", at=self.time(s.next_due_at))

    def zone(self) -> tzinfo:
        zone = self._zone_setting
        if zone is not None:
            return zone
        return datetime.fromtimestamp(self._wall(), UTC).astimezone().tzinfo or UTC

    def zone_name(self) -> str:
        return str(self.zone())

    def time(self, at: float) -> str:
        return datetime.fromtimestamp(at, self.zone()).strftime("%Y-%m-%d %H:%M")
