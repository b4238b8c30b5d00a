"""A timer fires only once its deadline has passed on the clock the core reads.

Regression (issue 34, "no 正在处理 at all"): uvloop wakes a `call_later` up to a
millisecond early; the handle was dropped on the early wake, the core found nothing due and,
its own deadline unchanged, never asked again: no hint and no heartbeat for the whole turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bridge.clock import Alarm, Timers


@dataclass
class _Wake:
    when: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class EarlyClock:
    """Wakes every waiter `early` seconds before its deadline, as uvloop may."""

    t: float = 100.0
    early: float = 0.001
    waiting: list[_Wake] = field(default_factory=list)
    woken: set[float] = field(default_factory=set)  # deadlines already woken once, early

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t

    def call_at(self, when: float, callback: Callable[[], None]) -> _Wake:
        wake = _Wake(when, callback)
        self.waiting.append(wake)
        return wake

    def run_until(self, end: float) -> None:
        while live := sorted((w for w in self.waiting if not w.cancelled), key=lambda w: w.when):
            wake = live[0]
            if wake.when > end:
                break
            self.waiting.remove(wake)
            # Early the first time; a wake-up asked for again comes at its deadline.
            early = wake.when not in self.woken
            self.woken.add(wake.when)
            self.t = max(self.t, wake.when - self.early if early else wake.when)
            wake.callback()
        self.t = max(self.t, end)


def test_a_timer_woken_early_waits_for_its_deadline_then_fires_once() -> None:
    clock = EarlyClock()
    fired: list[tuple[str, float]] = []
    timers = Timers(clock, lambda name: fired.append((name, clock.now())))
    timers.set("first_hint", 100.6)
    clock.run_until(100.59)
    assert fired == []
    clock.run_until(101.0)
    assert fired == [("first_hint", 100.6)]


def test_a_cleared_timer_never_fires_even_if_its_wake_up_was_due() -> None:
    clock = EarlyClock()
    fired: list[str] = []
    timers = Timers(clock, fired.append)
    timers.set("heartbeat", 101.0)
    timers.set("heartbeat", 102.0)  # replaced
    timers.clear("heartbeat")
    clock.run_until(110.0)
    assert fired == []


def test_an_alarm_cancelled_while_re_armed_stays_cancelled() -> None:
    clock = EarlyClock()
    fired: list[float] = []
    alarm = Alarm(clock, 100.5, lambda: fired.append(clock.now()))
    clock.run_until(100.4995)  # the early wake-up: re-armed, not fired
    assert alarm.pending
    alarm.cancel()
    clock.run_until(105.0)
    assert fired == []
    assert not alarm.pending


def test_a_deadline_moved_later_fires_at_the_new_time_and_one_moved_sooner_at_its_own() -> None:
    clock = EarlyClock(early=0.0)
    fired: list[tuple[str, float]] = []
    timers = Timers(clock, lambda name: fired.append((name, clock.now())))
    timers.set("stall", 101.0)
    timers.set("stall", 103.0)  # later: the alarm stays, and wakes at 101 only to re-arm
    timers.set("stall", 104.0)
    clock.run_until(103.9)
    assert fired == []
    clock.run_until(110.0)
    assert fired == [("stall", 104.0)]
    timers.set("heartbeat", 120.0)
    timers.set("heartbeat", 112.0)  # sooner: a new wake-up at 112
    clock.run_until(130.0)
    assert fired[1:] == [("heartbeat", 112.0)]
    assert len([w for w in clock.waiting if not w.cancelled]) == 0
