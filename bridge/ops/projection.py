"""Versioned runtime-state snapshots of every conversation, and their SSE fan-out.

Every change bumps a per-process monotonic `revision` under a `projection_epoch` that is new
at each start, so an observer can drop stale or duplicate snapshots (and notice a restart).
Subscribers get bounded queues: a slow reader loses old frames and is told so by a
`lagged` frame, never slows the bridge down.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TERMINAL = object()  # sentinel closing a subscription


@dataclass(eq=False)  # identity, so subscriptions can live in a set
class Subscription:
    queue: asyncio.Queue[dict[str, Any] | object]
    dropped: int = 0
    client_id: str | None = None  # the observer's X-Bridge-Client-Id, when it sent one


@dataclass
class Projection:
    epoch: str = field(default_factory=lambda: uuid.uuid4().hex)
    queue_size: int = 256
    clock: Callable[[], float] = time.time
    revision: int = 0
    _states: dict[str, dict[str, Any]] = field(default_factory=dict)
    _subscribers: set[Subscription] = field(default_factory=set)

    def publish(self, conversation_key: str, snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
        """Store a conversation's snapshot; unchanged snapshots are not re-published."""
        current = self._states.get(conversation_key)
        if current is not None and current["snapshot"] == snapshot:
            return None
        self.revision += 1
        frame = {
            "type": "runtime_state",
            "projection_epoch": self.epoch,
            "revision": self.revision,
            "conversation": conversation_key,
            "snapshot": dict(snapshot),
        }
        self._states[conversation_key] = frame
        for sub in self._subscribers:
            self._offer(sub, frame)
        return frame

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "projection_epoch": self.epoch,
            "revision": self.revision,
            "conversations": {
                key: {"revision": frame["revision"], **frame["snapshot"], **_ages(frame, now)}
                for key, frame in sorted(self._states.items())
            },
        }

    def get(self, conversation_key: str) -> dict[str, Any] | None:
        frame = self._states.get(conversation_key)
        return None if frame is None else dict(frame["snapshot"])

    def subscribe(self, client_id: str | None = None) -> Subscription:
        sub = Subscription(asyncio.Queue(maxsize=self.queue_size), client_id=client_id)
        self._subscribers.add(sub)
        return sub

    def subscribers(self) -> list[str | None]:
        """Who is watching (their client ids, None for anonymous), for `/status`."""
        return sorted((s.client_id for s in self._subscribers), key=lambda c: c or "")

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    def close(self) -> None:
        """Send every subscriber an explicit terminal frame (shutdown)."""
        for sub in list(self._subscribers):
            self._offer(sub, TERMINAL)
        self._subscribers.clear()

    @staticmethod
    def _offer(sub: Subscription, item: dict[str, Any] | object) -> None:
        try:
            sub.queue.put_nowait(item)
        except asyncio.QueueFull:
            sub.queue.get_nowait()  # drop the oldest; the reader is told it lagged
            sub.dropped += 1
            sub.queue.put_nowait(item)


def _ages(frame: Mapping[str, Any], now: float) -> dict[str, float | None]:
    """Ages derived when read, from the stored timestamps, so they never go stale."""
    snap = frame["snapshot"]
    if "started_at" not in snap:
        return {}
    started, last = snap.get("started_at"), snap.get("last_activity_at")
    return {
        "elapsed": None if started is None else now - started,
        "silent_for": None if last is None else now - last,
    }
