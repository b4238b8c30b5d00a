"""Turn timelines, written behind: entries are kept in memory and written in one statement
a second after the first of them (or when many wait, or at shutdown), whichever turns they
belong to, instead of one store round trip each or one per turn. A crash loses at most a
second of timeline detail, never a message, a sent marker or an approval; readers
(`GET /turns/{id}`) see the entries not yet written too."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from bridge.store.port import Store, TraceEntry, TraceRecord

log = logging.getLogger(__name__)

FLUSH_AT = 256  # entries waiting: written now
FLUSH_AFTER = 1.0  # seconds after the first waiting entry: written then


class Cancellable(Protocol):
    def cancel(self) -> None: ...


Later = Callable[[float, Callable[[], None]], Cancellable]  # loop.call_later's shape


def _call_later(delay: float, callback: Callable[[], None]) -> Cancellable:
    return asyncio.get_running_loop().call_later(delay, callback)


class TraceBuffer:
    def __init__(
        self,
        store: Store,
        clock: Callable[[], float],
        *,
        flush_after: float = FLUSH_AFTER,
        later: Later | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._flush_after = flush_after
        self._later = later or _call_later
        self._waiting: list[TraceRecord] = []
        self._timer: Cancellable | None = None
        self._flushing: set[asyncio.Task[None]] = set()

    async def add(self, turn_id: str, kind: str, detail: str, at: float | None = None) -> None:
        self._waiting.append((turn_id, kind, detail, self._clock() if at is None else at))
        if len(self._waiting) >= FLUSH_AT:
            await self.flush()
        elif self._timer is None:
            self._timer = self._later(self._flush_after, self._due)

    def _due(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return
        try:
            await self._store.trace_many(waiting)
        except Exception:  # timeline detail only: never worth failing a turn's end over
            log.exception("writing %d timeline entries failed", len(waiting))

    async def close(self) -> None:
        """Write what waits (shutdown); a flush already under way finishes first."""
        await asyncio.gather(*self._flushing)
        await self.flush()

    def pending(self, turn_id: str) -> list[TraceEntry]:
        return [
            TraceEntry(seq=0, turn_id=t, kind=kind, detail=detail, at=at)
            for t, kind, detail, at in self._waiting
            if t == turn_id
        ]
