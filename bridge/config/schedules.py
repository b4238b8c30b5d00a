"""Scheduled prompts: BRIDGE_SCHEDULES (the operator's), the shortest interval users may ask
for, and the time zone of wall-clock times. Each problem stops the bridge at start with the
entry and what is wrong with it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_settings import NoDecode

from bridge.config.base import Section, clock, why
from bridge.core.schedules import parse_interval

TIMEZONE_HELP = (
    "IANA time zone of wall-clock times (`/at 09:30`, `/schedules`, an `at` without an"
    " offset), e.g. `Asia/Shanghai`; empty: the host's local time zone."
)
MIN_INTERVAL_HELP = (
    "The shortest interval `/every` (and BRIDGE_SCHEDULES) accepts; also how often a skipped"
    " scheduled prompt is looked at again besides the idle moment."
)
SCHEDULES_HELP = (
    "Scheduled prompts set by the operator, a JSON list of"
    ' `{"chat_id": "oc_…", "every": "1h", "prompt": "…"}` or'
    ' `{"chat_id": "oc_…", "at": "2030-06-01T09:30", "prompt": "…"}` (once).'
)


class ScheduleEntry(BaseModel):
    """One operator schedule of BRIDGE_SCHEDULES: `every` (an interval like `1h`) or `at` (an
    ISO date-time, once), never both."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chat_id: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    every: str | None = None
    at: str | None = None

    @model_validator(mode="after")
    def _one_clock(self) -> ScheduleEntry:
        if (self.every is None) == (self.at is None):
            raise ValueError("each schedule needs exactly one of `every` and `at`")
        if self.every is not None and parse_interval(self.every) is None:
            raise ValueError(f"`every` must be an interval like 90s, 30m, 2h, 1d: {self.every!r}")
        if self.at is not None:
            try:
                datetime.fromisoformat(self.at)
            except ValueError:
                raise ValueError(
                    f"`at` must be an ISO date-time like 2030-06-01T09:30: {self.at!r}"
                ) from None
        return self

    @property
    def every_seconds(self) -> float | None:
        return None if self.every is None else parse_interval(self.every)


def check_timezone(value: str) -> str:
    value = value.strip()
    if value:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (e.g. Asia/Shanghai)") from None
    return value


def schedules_from_env(value: Any) -> Any:
    """The variable's JSON text as a list of entries (pydantic checks each one)."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return ()
    try:
        entries = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"must be a JSON list of schedules ({exc.msg})") from None
    if not isinstance(entries, list):
        raise ValueError("must be a JSON list of schedules")
    return tuple(entries)


def check_intervals(entries: Iterable[ScheduleEntry], minimum: float) -> None:
    for entry in entries:
        every = entry.every_seconds
        if every is not None and every < minimum:
            raise ValueError(
                f"BRIDGE_SCHEDULES: every {entry.every} is shorter than"
                " BRIDGE_SCHEDULE_MIN_INTERVAL_SECONDS"
            )


class SchedulesSection(Section):
    """The time zone of wall-clock times, the shortest interval, the operator's schedules."""

    title: ClassVar[str] = "Scheduled prompts"

    bridge_timezone: Annotated[str, AfterValidator(check_timezone)] = Field(
        default="",
        description=TIMEZONE_HELP,
        json_schema_extra=why(
            "When the host's time zone is not the users' (servers often run on UTC)."
        ),
    )
    bridge_schedule_min_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description=MIN_INTERVAL_HELP,
        json_schema_extra=clock(
            "Raise it to keep users from scheduling prompts too often (each run costs model time)."
        ),
    )
    bridge_schedules: Annotated[
        tuple[ScheduleEntry, ...], NoDecode, BeforeValidator(schedules_from_env)
    ] = Field(
        default=(),
        description=SCHEDULES_HELP,
        json_schema_extra=why(
            "For prompts the operator owns, e.g. a daily summary in a team's chat, which users"
            " cannot remove."
        ),
    )

    @model_validator(mode="after")
    def _not_too_often(self) -> SchedulesSection:
        check_intervals(self.bridge_schedules, self.bridge_schedule_min_interval_seconds)
        return self
