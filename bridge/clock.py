"""Time, randomness and ids: the ports through which the bridge meets the world's clock.

Nothing in the engine, the runtime or the Feishu client reads `time.time`, `loop.time`,
`uuid4` or the global `random` itself; the composition root passes these in, and the
simulator (`tests/sim/`) passes its own, so one seed gives one run.

`Clock.now` is the engine's time line: monotonic, in seconds since the epoch (anchored to
the wall clock when the clock was made), so deadlines never jump with an NTP step yet read
as dates in records. `Clock.wall` is the wall clock itself, for what must name the real
time (a schedule's "09:30").

`call_at` fires *about* at `when`: a real loop may wake early (uvloop rounds delays to whole
milliseconds and measures them from a loop time cached at the start of its iteration), and
the simulator's clock does so on purpose. Whoever waits re-checks `now()` against its
deadline and waits again if it is not due: an early wake-up re-arms, it never forgets.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from typing import Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float: ...

    def wall(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> Cancellable: ...


class Ids(Protocol):
    def __call__(self) -> str:
        """A new id, unique for the life of the store (32 hex digits)."""
        ...


class LoopClock:
    """The real clock: monotonic time anchored to the epoch, timers on the running loop."""

    def __init__(self) -> None:
        self._offset = time.time() - time.monotonic()

    def now(self) -> float:
        return self._offset + time.monotonic()

    def wall(self) -> float:
        return time.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> Cancellable:
        delay = max(0.0, when - self.now())
        return asyncio.get_running_loop().call_later(delay, callback)


def new_id() -> str:
    return uuid.uuid4().hex


def system_random() -> random.Random:
    """The production source of jitter: seeded from the OS, never the global one."""
    return random.Random()


class Alarm:
    """One deadline on a `Clock` that fires `callback` once `now() >= when`, re-arming
    itself when the clock wakes it early (the re-check every waiter owes)."""

    __slots__ = ("_callback", "_clock", "_handle", "when")

    def __init__(self, clock: Clock, when: float, callback: Callable[[], None]) -> None:
        self._clock = clock
        self._callback = callback
        self.when = when
        self._handle: Cancellable | None = clock.call_at(when, self._wake)

    def _wake(self) -> None:
        if self._handle is None:
            return  # cancelled after the loop had already picked the wake-up
        if self._clock.now() < self.when:
            self._handle = self._clock.call_at(self.when, self._wake)
            return
        self._handle = None
        self._callback()

    @property
    def pending(self) -> bool:
        return self._handle is not None

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
