"""Feishu's health as the bridge's calls find it: the outage gate for owed posts, and a
circuit breaker for best-effort calls.

Getting an owed post through an outage: one gate per app, probes instead of a storm.

The Feishu client already retries a failed call a few times within seconds. When it still
fails for a reason that passes (5xx, 429, a timeout), Feishu is taken to be down: the post
stays owed (in the store, see `store/port_owed.py`) and its conversation waits here. While
the API is down, one call at a time goes out as a probe, after a wait that grows from
`first_probe` to `max_probe` seconds with jitter (or Feishu's own `x-ogw-ratelimit-reset`,
if longer); every other owed post waits for the probe's answer instead of trying on its own,
so an outage costs a handful of calls a minute, not a retry per post. A post still owed
`give_up_after` seconds after it was first tried (Feishu's `uuid` de-duplication lasts an
hour: past it a retry could post twice) is given up: `Undeliverable`.

A small circuit breaker for best-effort calls (reactions).

When Feishu rate-limits a reaction, the breaker opens: for a cool-down window reactions
are skipped rather than retried, so the quota goes to replies. After the window one
probe call is let through (half-open); its outcome closes or reopens the breaker.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from bridge.feishu.errors import FeishuError, RateLimited, ServerError, TransportError
from bridge.logs import app_prefix

log = logging.getLogger(__name__)

_T = TypeVar("_T")
PASSING = (ServerError, TransportError, RateLimited)  # failures that an outage explains


# Asked before each try of a post: whether something newer made it moot meanwhile.
Moot = Callable[[], bool]


class Superseded(Exception):
    """The post became moot while it waited (its turn ended during an outage): not sent."""


class Undeliverable(FeishuError):
    """The post could not be delivered within the idempotency window; it is given up (a
    `FeishuError`, so whoever falls back on a refusal falls back on this too)."""

    def __init__(self, reason: str) -> None:
        super().__init__(-1, reason)


@dataclass(frozen=True)
class DeliveryPolicy:
    first_probe: float = 1.0  # seconds from the failure that opened the gate to the first probe
    max_probe: float = 15.0  # the longest wait between two probes (4 a minute, at worst)
    give_up_after: float = 3600.0  # Feishu's uuid window


class FeishuGate:
    """Whether Feishu is up, as the bridge's posts last found it; shared by every chat."""

    def __init__(
        self,
        now: Callable[[], float],
        rng: random.Random,
        policy: DeliveryPolicy | None = None,
        app: str = "",
    ) -> None:
        self._now = now
        self._who = app_prefix(app)  # whose Feishu, in the log lines of a bridge of several apps
        self._rng = rng
        self.policy = policy or DeliveryPolicy()
        self.down_since: float | None = None
        self._next_probe = 0.0
        self._wait = self.policy.first_probe
        self._probing = False
        self._changed = asyncio.Event()
        self.probes = 0  # calls made while down (for /metrics)
        self.failures = 0  # posts that found it down

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def state(self) -> dict[str, float]:
        """For /status and /metrics."""
        since = self.down_since
        return {
            "down": 1.0 if since is not None else 0.0,
            "down_seconds": 0.0 if since is None else round(self._now() - since, 3),
            "probes": float(self.probes),
            "failures": float(self.failures),
        }

    async def attempt(
        self, call: Callable[[], Awaitable[_T]], *, owed_since: float, moot: Moot | None = None
    ) -> _T:
        """`call` once Feishu takes it: at once while up; while down, as a probe in turn.
        Raises `Undeliverable` past the window, `Superseded` when `moot` says so before a
        try, and whatever else `call` raises."""
        while True:
            probe = await self._take_turn(owed_since)
            if moot is not None and moot():
                self._release(probe)
                raise Superseded
            try:
                result = await call()
            except PASSING as exc:
                self._failed(exc, probe)
                if self._now() - owed_since >= self.policy.give_up_after:
                    raise Undeliverable(str(exc)) from exc
                continue
            except BaseException:
                self._release(probe)
                raise
            self._up()
            return result

    async def _take_turn(self, owed_since: float) -> bool:
        """Wait until this caller may call; True when its call is the probe."""
        while self.down:
            if self._now() - owed_since >= self.policy.give_up_after:
                raise Undeliverable("Feishu was down for the whole window")
            if not self._probing and self._now() >= self._next_probe:
                self._probing = True
                self.probes += 1
                return True
            self._changed.clear()
            wait = self._next_probe - self._now() if not self._probing else self.policy.max_probe
            # Until the probe's time (or the probe's answer): then look again.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.001, wait))
        return False

    def _failed(self, exc: FeishuError, probe: bool) -> None:
        self.failures += 1
        now = self._now()
        if self.down_since is None:
            log.warning(
                "%sFeishu looks down (%s); owed posts wait for it", self._who, type(exc).__name__
            )
            self.down_since = now
            self._wait = self.policy.first_probe
        elif probe:
            self._wait = min(self.policy.max_probe, self._wait * 2)
        else:
            return  # a call already on its way when the gate closed: the schedule stands
        reset = exc.reset_after if isinstance(exc, RateLimited) else None
        self._schedule_probe(now, reset)
        self._probing = False
        self._changed.set()

    def _schedule_probe(self, now: float, reset_after: float | None = None) -> None:
        """The next probe after the current wait, jittered; Feishu's reset if that is longer."""
        wait = self._wait * self._rng.uniform(0.8, 1.2)
        self._next_probe = now + max(wait, reset_after or 0.0)

    def probe_due(self) -> bool:
        """Up, or down with a probe due and none under way: a call outside the gate (an
        ack) may go now, and serves as the probe."""
        return not self.down or (not self._probing and self._now() >= self._next_probe)

    async def until_up(self) -> None:
        """Until the bridge's calls find Feishu up: a best-effort call that would only fail
        while it is down waits here (it is never the probe)."""
        while self.down:
            self._changed.clear()
            await self._changed.wait()

    def heard_back(self, ok: bool) -> None:
        """What a call outside the gate (an ack) found: up again, or still down (the next
        probe waits longer, as after a failed probe)."""
        if not self.down:
            return
        if ok:
            self._up()
        else:
            self._wait = min(self.policy.max_probe, self._wait * 2)
            self._schedule_probe(self._now())

    def _release(self, probe: bool) -> None:
        if probe:
            self._probing = False
            self._changed.set()

    def _up(self) -> None:
        if self.down_since is not None:
            log.warning(
                "%sFeishu answers again after %.1f s", self._who, self._now() - self.down_since
            )
        self.down_since = None
        self._probing = False
        self._changed.set()


# -- the breaker for best-effort calls ----------------------------------------------------

DEFAULT_COOLDOWN = 30.0
MIN_COOLDOWN = 1.0
MAX_COOLDOWN = 600.0


class BreakerState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(
        self,
        *,
        cooldown: float = DEFAULT_COOLDOWN,
        now: Callable[[], float],
    ) -> None:
        self._cooldown = cooldown
        self._now = now
        self._opened_until: float | None = None  # None while closed
        self._probe_started: float | None = None  # a half-open probe in flight

    @property
    def state(self) -> BreakerState:
        if self._opened_until is None:
            return BreakerState.CLOSED
        if self._now() < self._opened_until:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def allow(self) -> bool:
        """May a call go ahead now? In half-open, only one probe at a time."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.OPEN:
            return False
        now = self._now()
        # A probe that never reported back (its task was cancelled) expires after a
        # window, so the breaker cannot stay stuck half-open.
        if self._probe_started is not None and now - self._probe_started < self._cooldown:
            return False
        self._probe_started = now
        return True

    def record_ok(self) -> None:
        """The call was not rate limited (it may still have failed otherwise): close.

        Ignored while open: a call that started before the breaker opened says nothing
        about the quota after it."""
        if self.state is BreakerState.OPEN:
            return
        self._opened_until = None
        self._probe_started = None

    def record_rate_limited(self, reset_after: float | None = None) -> float:
        """Open for Feishu's suggested wait (or the default window); returns the window."""
        window = self._cooldown if reset_after is None else reset_after
        window = min(max(window, MIN_COOLDOWN), MAX_COOLDOWN)
        self._opened_until = self._now() + window
        self._probe_started = None
        return window
