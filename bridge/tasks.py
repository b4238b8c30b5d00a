"""Tracked background tasks: kept in a set, errors logged, all drained on shutdown.

Never a fire-and-forget `ensure_future`: a task that is not referenced can be garbage
collected mid-flight, and an exception in it would vanish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class TaskTracker:
    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self._draining = False  # drain() has begun: only work that finishes rounds starts
        self._closing = False  # drain() is over: nothing starts

    @property
    def draining(self) -> bool:
        return self._draining

    def spawn(
        self, coro: Coroutine[Any, Any, Any], *, name: str, while_draining: bool = False
    ) -> asyncio.Task[Any]:
        """`while_draining`: the task finishes what running work produced (an actor
        performing a round's answer) and may start during the shutdown grace."""
        if self._closing or (self._draining and not while_draining):
            coro.close()
            raise RuntimeError(f"{self._name} is shutting down")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("task %s failed", task.get_name(), exc_info=exc)

    def cancel(self, names: set[str]) -> None:
        for task in self._tasks:
            if task.get_name() in names:
                task.cancel()

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self, grace: float) -> None:
        """Refuse new tasks (but those started `while_draining`), wait up to `grace` seconds
        for the running ones and any they start, then cancel the rest."""
        self._draining = True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace if grace > 0 else 0.0):
                while self._tasks:
                    await asyncio.wait(set(self._tasks))
        self._closing = True
        pending = set(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
