"""An API outage on command: Feishu's message API answers 503, 429 or nothing, for a while.

Unlike `faults` (the next N matching calls fail), an outage is a state of the whole message
API (every `/open-apis/im/` call, and `/open-apis/cardkit/` when asked): it lasts until it is
changed, or follows a schedule such as "503 for 20 s, then 429 for 20 s, then timeouts for
20 s, then up". The token endpoint stays up, as it does in Feishu's partial incidents. Time
comes from the emulator's injected clock, so tests advance a schedule without sleeping.

Every refused call is recorded (method, path, mode, clock time), so a test can measure how
hard a client hammered the API while it was down. An outage may hit some apps only (their
calls are refused, the others' served): one app's Feishu API down while the others' is up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bridge.devtools.emulator import codes

IM_PREFIX = "/open-apis/im/"
CARDKIT_PREFIX = "/open-apis/cardkit/"
# Feishu's documented rate-limit answer (频控策略): HTTP 429, code 99991400, and the window's
# limit and the seconds until it resets in these headers.
LIMIT_HEADER = "x-ogw-ratelimit-limit"
RESET_HEADER = "x-ogw-ratelimit-reset"
# No documented body exists for a 503 from Feishu's gateway; the generic "internal error" code
# of the server-side error table is what its 5xx answers carry.
UNAVAILABLE = codes.FeishuError(503, 1500, "internal error")


class OutageMode(StrEnum):
    UP = "up"
    UNAVAILABLE = "503"  # HTTP 503 with Feishu's error envelope
    RATE_LIMITED = "429"  # HTTP 429, code 99991400, x-ogw-ratelimit-* headers
    TIMEOUT = "timeout"  # the request is held, never answered, then the connection is closed


@dataclass(frozen=True)
class OutageStep:
    mode: OutageMode
    seconds: float | None = None  # None: until changed (only the last step)


@dataclass(frozen=True)
class RefusedCall:
    method: str
    path: str
    mode: OutageMode
    at: float  # the emulator's clock (monotonic unless injected)
    app_id: str | None = None  # whose token the call carried


@dataclass(frozen=True)
class Refusal:
    """How to answer one refused call; `hold_seconds` is set for a timeout (no answer)."""

    mode: OutageMode
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    hold_seconds: float | None = None


@dataclass(frozen=True)
class OutageState:
    mode: OutageMode
    remaining_seconds: float | None  # of the current step; None: until changed
    next_steps: tuple[OutageStep, ...]  # after the current one; then up
    cardkit: bool
    hold_seconds: float
    refused: int

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "remaining_seconds": self.remaining_seconds,
            "next": [{"mode": s.mode.value, "seconds": s.seconds} for s in self.next_steps],
            "cardkit": self.cardkit,
            "hold_seconds": self.hold_seconds,
            "refused": self.refused,
        }


StepLike = OutageStep | tuple[OutageMode | str, float | None]
Plan = OutageMode | str | Iterable[StepLike]


def parse_plan(plan: Plan) -> tuple[OutageStep, ...]:
    """A mode ("503": until changed) or a schedule of (mode, seconds) steps, then up."""
    if isinstance(plan, str):
        mode = OutageMode(plan)
        return () if mode is OutageMode.UP else (OutageStep(mode),)
    steps = tuple(
        s if isinstance(s, OutageStep) else OutageStep(OutageMode(s[0]), s[1]) for s in plan
    )
    for index, step in enumerate(steps):
        if step.seconds is None and index != len(steps) - 1:
            raise ValueError("only the last step may last until changed")
        if step.seconds is not None and not (step.seconds >= 0 and math.isfinite(step.seconds)):
            raise ValueError(f"step seconds must be finite and >= 0, not {step.seconds!r}")
    return steps


class Outage:
    def __init__(self, *, clock: Callable[[], float], on_change: Callable[[], None]) -> None:
        self._clock = clock
        self._on_change = on_change
        self._steps: tuple[OutageStep, ...] = ()
        self._started = clock()
        self.cardkit = False
        self.hold_seconds = 60.0
        self.reset_seconds: int | None = None
        self.limit = 50
        self.apps: frozenset[str] | None = None  # None: every app's calls
        self.refused: list[RefusedCall] = []

    def set(
        self,
        plan: Plan,
        *,
        cardkit: bool = False,
        hold_seconds: float = 60.0,
        reset_seconds: int | None = None,
        limit: int = 50,
        apps: Iterable[str] | None = None,
    ) -> OutageState:
        """Start `plan` now. `hold_seconds`: how long a timed-out call is held before its
        connection is closed. `reset_seconds`: the 429's reset header (default: the seconds
        left in the 429 step, at least 1; 60 for a 429 that lasts until changed). `apps`:
        the app_ids whose calls it refuses (default: everyone's)."""
        steps = parse_plan(plan)
        if hold_seconds <= 0 or (reset_seconds is not None and reset_seconds < 0) or limit < 1:
            raise ValueError("hold_seconds > 0, reset_seconds >= 0 and limit >= 1 are required")
        self._steps, self._started = steps, self._clock()
        self.cardkit, self.hold_seconds = cardkit, hold_seconds
        self.reset_seconds, self.limit = reset_seconds, limit
        self.apps = None if apps is None else frozenset(apps)
        self._on_change()
        return self.state()

    def state(self) -> OutageState:
        mode, remaining, rest = self._current()
        return OutageState(
            mode, remaining, rest, self.cardkit, self.hold_seconds, len(self.refused)
        )

    def covers(self, path: str) -> bool:
        return path.startswith(IM_PREFIX) or (self.cardkit and path.startswith(CARDKIT_PREFIX))

    def refuse(self, method: str, path: str, app_id: str | None = None) -> Refusal | None:
        """The answer for a call while the API is down (and its record), or None when up."""
        if not self._steps or not self.covers(path):
            return None
        if self.apps is not None and app_id not in self.apps:
            return None
        mode, remaining, _ = self._current()
        if mode is OutageMode.UP:
            return None
        self.refused.append(RefusedCall(method, path, mode, self._clock(), app_id))
        if mode is OutageMode.TIMEOUT:
            return Refusal(mode, 0, {}, hold_seconds=self.hold_seconds)
        if mode is OutageMode.UNAVAILABLE:
            return Refusal(mode, UNAVAILABLE.http_status, UNAVAILABLE.body())
        reset = self.reset_seconds
        if reset is None:
            reset = 60 if remaining is None else max(1, math.ceil(remaining))
        headers = {LIMIT_HEADER: str(self.limit), RESET_HEADER: str(reset)}
        return Refusal(mode, codes.RATE_LIMITED.http_status, codes.RATE_LIMITED.body(), headers)

    def _current(self) -> tuple[OutageMode, float | None, tuple[OutageStep, ...]]:
        elapsed = self._clock() - self._started
        for index, step in enumerate(self._steps):
            if step.seconds is None:
                return step.mode, None, ()
            if elapsed < step.seconds:
                return step.mode, step.seconds - elapsed, self._steps[index + 1 :]
            elapsed -= step.seconds
        return OutageMode.UP, None, ()


def plan_from_json(body: Mapping[str, Any]) -> tuple[Plan, dict[str, Any]]:
    """`{"mode": "503"}` or `{"schedule": [{"mode": "503", "seconds": 20}, …]}`, plus the
    options of `Outage.set` (`apps`: a list of app_ids); raises ValueError (or TypeError)
    on anything else."""
    if ("mode" in body) == ("schedule" in body):
        raise ValueError('give either "mode" or "schedule"')
    plan: Plan
    if "mode" in body:
        plan = OutageMode(str(body["mode"]))
    else:
        schedule = body["schedule"]
        if not isinstance(schedule, list) or not all(isinstance(s, dict) for s in schedule):
            raise ValueError('"schedule" is a list of {"mode": …, "seconds": …}')
        plan = [
            (
                OutageMode(str(s.get("mode"))),
                None if s.get("seconds") is None else float(s["seconds"]),
            )
            for s in schedule
        ]
    cardkit = body.get("cardkit", False)
    if not isinstance(cardkit, bool):
        raise ValueError('"cardkit" is true or false')
    options: dict[str, Any] = {"cardkit": cardkit}
    apps = body.get("apps")
    if apps is not None:
        if not isinstance(apps, list) or not all(isinstance(a, str) for a in apps):
            raise ValueError('"apps" is a list of app_ids')
        options["apps"] = apps
    if body.get("hold_seconds") is not None:
        options["hold_seconds"] = float(body["hold_seconds"])
    if body.get("reset_seconds") is not None:
        options["reset_seconds"] = int(body["reset_seconds"])
    return plan, options
