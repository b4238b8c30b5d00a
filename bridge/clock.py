"""Time, randomness and ids: the ports through which the bridge meets the world's clock.

Nothing in the engine, the runtime or the Feishu client reads `time.time`, `loop.time`,
`uuid4` or the global `random` itself; the composition root passes these in, and the
simulator (`tests/sim/`) passes its own, so one seed gives one run.

`Clock.now` is the engine's time line: monotonic, in seconds since the epoch (anchored to
the wall clock when the clock was made), so deadlines never jump with an NTP step yet read
as dates in records. `Clock.wall` is the wall clock itself, for what must name the real
time (a schedule's "09:30").

`call_at` fires *about* at `when`: a real loop may wake early, and the simulator's clock
does so on purpose. Whoever waits re-checks `now()` against its deadline and waits again if
it is not due: an early wake-up re-arms, it never forgets. The real clock pads its timers
so that they do not fire early (`LoopClock.call_at`): a wake-up that only re-arms costs a
waiter's whole check (the call budget's ranking of every waiting call) for nothing.
"""

from __future__ import annotations

import asyncio
import math
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


WAKE_PAD = 0.001  # seconds a real timer waits past its rounded-up delay (`LoopClock.call_at`)


class LoopClock:
    """The real clock: monotonic time anchored to the epoch, timers on the running loop."""

    def __init__(self) -> None:
        self._offset = time.time() - time.monotonic()

    def now(self) -> float:
        return self._offset + time.monotonic()

    def wall(self) -> float:
        return time.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> Cancellable:
        delay = when - self.now()
        if delay > 0.0:
            # uvloop rounds a delay to the nearest millisecond and counts it from a time cut
            # to whole milliseconds, so a timer fires up to 1.5 ms early: rounded up, and a
            # millisecond more, it fires at most 2 ms late instead.
            delay = math.ceil(delay * 1000.0) / 1000.0 + WAKE_PAD
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)


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


class Timers:
    """Named one-shot timers (one conversation's), an `Alarm` each. The core says "fire
    `heartbeat` at t"; setting a name that exists replaces its deadline, so the core never
    clears first. A deadline moved later keeps its alarm: the wake-up comes at the old time
    and re-arms for the new one (the stall and heartbeat deadlines move with every update
    of a streaming turn, and a loop timer cancelled and scheduled each time would cost more
    than the rest of the update's step)."""

    def __init__(self, clock: Clock, fire: Callable[[str], None]) -> None:
        self._clock = clock
        self._fire = fire
        self._alarms: dict[str, Alarm] = {}

    def set(self, name: str, at: float) -> None:
        alarm = self._alarms.get(name)
        if alarm is not None and alarm.pending and alarm.when <= at:
            alarm.when = at  # its wake-up, before `at`, re-arms (Alarm._wake)
            return
        self.clear(name)
        self._alarms[name] = Alarm(self._clock, at, lambda: self._expire(name))

    def clear(self, name: str) -> None:
        alarm = self._alarms.pop(name, None)
        if alarm is not None:
            alarm.cancel()

    def clear_all(self) -> None:
        for alarm in self._alarms.values():
            alarm.cancel()
        self._alarms.clear()

    def _expire(self, name: str) -> None:
        self._alarms.pop(name, None)
        self._fire(name)
