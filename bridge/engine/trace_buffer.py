"""Turn timelines, written behind: entries are kept in memory and written in one statement
when a turn ends (and at shutdown, or when many wait), instead of one store round trip
each. A crash loses at most timeline detail, never a message, a sent marker or an approval;
readers (`GET /turns/{id}`) see the entries not yet written too."""

from __future__ import annotations

import logging
from collections.abc import Callable

from bridge.store.port import Store, TraceEntry, TraceRecord

log = logging.getLogger(__name__)

FLUSH_AT = 256  # entries waiting: written now even if no turn ended


class TraceBuffer:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._waiting: list[TraceRecord] = []

    async def add(self, turn_id: str, kind: str, detail: str, at: float | None = None) -> None:
        self._waiting.append((turn_id, kind, detail, self._clock() if at is None else at))
        if len(self._waiting) >= FLUSH_AT:
            await self.flush()

    async def flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return
        try:
            await self._store.trace_many(waiting)
        except Exception:  # timeline detail only: never worth failing a turn's end over
            log.exception("writing %d timeline entries failed", len(waiting))

    def pending(self, turn_id: str) -> list[TraceEntry]:
        return [
            TraceEntry(seq=0, turn_id=t, kind=kind, detail=detail, at=at)
            for t, kind, detail, at in self._waiting
            if t == turn_id
        ]
