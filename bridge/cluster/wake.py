"""The `Wake` port: tell the instance owning a conversation that something for it landed
on another instance (a message journaled, a card click, a /stop), so it looks at once
instead of at its next scan.

A wake-up carries only the conversation key and a kind, never text: the owner reads what
happened from the store. Delivery is *at most once* and may be lost (a dropped database
connection, a subscriber too slow to keep up); whenever wake-ups may have been lost the
subscriber receives one `RESCAN` wake-up (key ""), after which it must rescan the store
(`unowned_conversations`, `pending_messages` of what it owns). Every instance also hears
its own publishes: a subscriber acts only on the conversations it owns.

Implementations: `LocalWake` (one process: SQLite, memory, tests) and `PgWake`
(wake_pg.py: PostgreSQL LISTEN/NOTIFY, for several instances on one database).
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from types import TracebackType
from typing import NamedTuple, Protocol, Self

from bridge.store.port import AsyncLifecycle

DEFAULT_QUEUE = 1000  # wake-ups a subscriber may lag behind before it gets a RESCAN


class WakeKind(StrEnum):
    MESSAGE = "message"  # a message of the conversation was journaled
    CLICK = "click"  # a card of the conversation was clicked
    STOP = "stop"  # someone asked the conversation's round to stop
    RESCAN = "rescan"  # wake-ups may have been lost: look at the store (key is "")


class Wakeup(NamedTuple):
    conversation_key: str
    kind: WakeKind


class Subscription:
    """The wake-ups published since `Wake.subscribe()`; iterate with `async for`. Ends when
    the wake is closed or `close()` is called. Bounded: past `maxsize` waiting wake-ups they
    are dropped for one RESCAN."""

    def __init__(self, owner: _Fanout, maxsize: int) -> None:
        self._owner = owner
        self._queue: asyncio.Queue[Wakeup | None] = asyncio.Queue(maxsize + 1)
        self._maxsize = maxsize
        self._closed = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Wakeup:
        if self._closed and self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            self._closed = True
            raise StopAsyncIteration
        return item

    def close(self) -> None:
        self._owner._subscriptions.pop(self, None)
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    def _put(self, wakeup: Wakeup) -> None:
        if self._closed:
            return
        if self._queue.qsize() >= self._maxsize:
            while not self._queue.empty():  # too far behind: one RESCAN says it all
                self._queue.get_nowait()
            wakeup = Wakeup("", WakeKind.RESCAN)
        self._queue.put_nowait(wakeup)


class Wake(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None:
        """Stop; every subscription ends."""

    async def publish(self, conversation_key: str, kind: WakeKind) -> None:
        """Wake the owner of the conversation (best effort: see the module's notes)."""

    def subscribe(self) -> Subscription:
        """Wake-ups from now on (all instances' publishes, this one's included)."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class _Fanout(AsyncLifecycle):  # `async with wake:` opens and closes it
    """Subscriptions and delivery, shared by the implementations."""

    def __init__(self, *, queue_size: int = DEFAULT_QUEUE) -> None:
        # In the order they subscribed (a dict, not a set): delivery runs in a fixed order.
        self._subscriptions: dict[Subscription, None] = {}
        self._queue_size = queue_size

    def subscribe(self) -> Subscription:
        subscription = Subscription(self, self._queue_size)
        self._subscriptions[subscription] = None
        return subscription

    def _deliver(self, wakeup: Wakeup) -> None:
        for subscription in list(self._subscriptions):
            subscription._put(wakeup)

    def _end_all(self) -> None:
        for subscription in list(self._subscriptions):
            subscription.close()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        self._end_all()


class LocalWake(_Fanout):
    """One process: a publish reaches this process's subscribers at once, never lost but to
    a subscriber that lags `queue_size` behind."""

    async def publish(self, conversation_key: str, kind: WakeKind) -> None:
        self._deliver(Wakeup(conversation_key, WakeKind(kind)))


def encode(conversation_key: str, kind: WakeKind) -> str:
    """The NOTIFY payload: `<kind>:<key>` (a kind has no colon; a key may)."""
    return f"{WakeKind(kind).value}:{conversation_key}"


def decode(payload: str) -> Wakeup | None:
    kind, _, key = payload.partition(":")
    try:
        return Wakeup(key, WakeKind(kind)) if key else None
    except ValueError:
        return None
