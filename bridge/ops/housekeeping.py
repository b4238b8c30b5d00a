"""What the service does in the background on a clock: retention pruning of the store, the
heartbeat that puts this instance in the database's `instances` table, which
`feishu-bridge status --all` reads (one view across every instance on one database), and
the record of what the call budget spent of Feishu's minutes (feishu/budget_record.py)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bridge.store.port import Store

log = logging.getLogger(__name__)


@dataclass
class Housekeeping:
    store: Store
    clock: Callable[[], float]
    instance_id: str
    epoch: str  # this process's projection epoch: new at every start
    ops_url: str
    facts: Callable[[], dict[str, Any]]  # small counts for the heartbeat (never any text)
    prune_every: float = 3600.0
    beat_every: float = 5.0  # a third of BRIDGE_LEASE_SECONDS
    record_spending: Callable[[], None] | None = None
    record_every: float = 1.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        # Retention: journaled prompts, seen events and finished turns older than 7 days go.
        await self.prune()
        await self.beat()
        self._tasks = [
            asyncio.create_task(self._every(self.prune_every, self.prune)),
            asyncio.create_task(self._every(self.beat_every, self.beat)),
        ]
        if self.record_spending is not None:
            self._tasks.append(asyncio.create_task(self._every(self.record_every, self.record)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def prune(self) -> None:
        try:
            removed = await self.store.prune(self.clock())
        except Exception:
            log.exception("pruning the store failed")
            return
        if removed:
            log.info("pruned %d old records from the store", removed)

    async def beat(self) -> None:
        try:
            await self.store.heartbeat(
                self.instance_id, self.epoch, self.clock(), self.ops_url, self.facts()
            )
        except Exception as exc:  # the next beat tries again; the store says why
            log.warning("heartbeat failed: %s", type(exc).__name__)

    async def record(self) -> None:
        if self.record_spending is not None:
            self.record_spending()  # (it logs what it cannot write)

    async def _every(self, seconds: float, work: Callable[[], Awaitable[None]]) -> None:
        while True:
            await self.sleep(seconds)
            await work()


def reachable_url(host: str, port: int) -> str:
    """The operator API as another machine reaches it: a wildcard bind is this host's name."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"
