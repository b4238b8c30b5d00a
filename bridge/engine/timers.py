"""Named one-shot timers on the event loop, measured by an injected clock.

The core says "fire `heartbeat` at t"; this turns that into `loop.call_later(t - now())`.
Setting a timer that already exists replaces it, so the core never has to clear first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Timers:
    def __init__(self, clock: Callable[[], float], fire: Callable[[str], None]) -> None:
        self._clock = clock
        self._fire = fire
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def set(self, name: str, at: float) -> None:
        self.clear(name)
        delay = max(0.0, at - self._clock())
        loop = asyncio.get_running_loop()
        self._handles[name] = loop.call_later(delay, self._expire, name)

    def clear(self, name: str) -> None:
        handle = self._handles.pop(name, None)
        if handle is not None:
            handle.cancel()

    def clear_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def _expire(self, name: str) -> None:
        self._handles.pop(name, None)
        self._fire(name)
