"""A small circuit breaker for best-effort calls (reactions).

When Feishu rate-limits a reaction, the breaker opens: for a cool-down window reactions
are skipped rather than retried, so the quota goes to replies. After the window one
probe call is let through (half-open); its outcome closes or reopens the breaker.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

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
        now: Callable[[], float] = time.monotonic,
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
