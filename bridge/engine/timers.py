"""Named one-shot timers for one conversation, on the injected `Clock`.

The core says "fire `heartbeat` at t"; this keeps one `Alarm` per name. Setting a timer that
already exists replaces it, so the core never has to clear first. An alarm fires only once
its deadline has passed on the clock the core reads: a wake-up before it (uvloop's rounding,
a stale loop time) re-arms. Firing early used to lose the deadline for the whole turn: the
core found nothing due, and since its own record of the deadline had not changed it never
asked for the timer again (no `正在处理`, no heartbeat).

A deadline moved later keeps its alarm: the wake-up comes at the old time and re-arms for the
new one. The stall and heartbeat deadlines move on with every update of a streaming turn;
cancelling and scheduling a loop timer each time cost more than the rest of the update's step.
"""

from __future__ import annotations

from collections.abc import Callable

from bridge.clock import Alarm, Clock


class Timers:
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
