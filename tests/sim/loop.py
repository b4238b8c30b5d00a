"""A virtual-time event loop and the simulator's clock.

`SimLoop` is asyncio's own selector loop with a clock that does not tick: when nothing is
ready, the selector jumps the clock to the next timer instead of sleeping, so a 90-second
turn runs in milliseconds and every interleaving is fixed by the order of the heap, i.e. by
the seed. `SimClock` is the bridge's `Clock` port on that loop; it wakes waiters a little
early or late, as uvloop and a loaded machine do, so code that trusts a wake-up is found out.
"""

from __future__ import annotations

import asyncio
import random
import selectors
from collections.abc import Callable, Mapping
from typing import Any

from bridge.clock import Cancellable

EPOCH = 1_767_225_600.0  # 2026-01-01 00:00 UTC: records read as dates


class WorldAtRest(Exception):
    """Nothing ready and no timer left: whatever was awaited will never come."""


class _VirtualSelector(selectors.BaseSelector):
    def __init__(self, loop: SimLoop) -> None:
        self._real = selectors.DefaultSelector()  # the loop's self-pipe lives here
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:  # callbacks are ready: the next jump of the clock polls first
            return []
        # Polled only when something real may be ready: a write to the loop's self-pipe (a
        # thread's call_soon_threadsafe), or a file of the world's own. Else a system call
        # per jump of the clock for a pipe nothing writes to.
        if self._loop.woken or len(self._real.get_map()) > 1:
            self._loop.woken = False
            ready = self._real.select(0)
            if ready:
                return ready
        if timeout is None:
            raise WorldAtRest
        self._loop.advance(timeout)
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


class SimLoop(asyncio.SelectorEventLoop):
    """`busy`: a loaded loop, whose timers (asyncio.sleep's too) fire a little late: a timer
    is not a promise that nothing else ran first (the world draws it)."""

    def __init__(self) -> None:
        self._virtual = 0.0  # small numbers: a float near 1.7e9 has no microseconds left
        self.busy: random.Random | None = None
        self.woken = False  # its self-pipe was written to since the selector last polled
        super().__init__(_VirtualSelector(self))

    def time(self) -> float:
        return self._virtual

    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        busy = self.busy
        if busy is not None and busy.random() < 0.2:  # a busy loop: up to 50 ms late
            when += busy.uniform(0.0, 0.05)
        return super().call_at(when, callback, *args, context=context)

    def _write_to_self(self) -> None:
        self.woken = True
        super()._write_to_self()

    def exact_at(self, when: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        """A timer without the loop's lateness (the clock draws its own)."""
        return super().call_at(when, callback)

    def advance(self, seconds: float) -> None:
        self._virtual += max(0.0, seconds)


class SimClock:
    """The `Clock` port on a `SimLoop`: `now` is EPOCH + the loop's virtual time."""

    def __init__(self, loop: SimLoop, rng: random.Random, *, jitter: bool = True) -> None:
        self._loop = loop
        self._rng = rng
        self._jitter = jitter

    def now(self) -> float:
        return EPOCH + self._loop.time()

    def wall(self) -> float:
        return self.now()

    def call_at(self, when: float, callback: Callable[[], None]) -> Cancellable:
        at = when - EPOCH
        if self._jitter:
            roll = self._rng.random()
            if roll < 0.3:  # uvloop: a delay rounded down, a cached loop time
                at -= self._rng.uniform(0.0, 0.002)
            elif roll < 0.5:  # a busy loop: late
                at += self._rng.uniform(0.0, 0.05)
        return self._loop.exact_at(max(at, self._loop.time()), callback)
