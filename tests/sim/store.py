"""The world's database: the in-memory store behind a server that can go away.

`DownStore` wraps a `MemoryStore` and, in its outage (a window of world seconds: a
PostgreSQL restart, a failover), answers each call as `PostgresStore` does when its server
is gone: `StoreUnavailable` after the pool's wait for a connection (bridge/store/postgres.py
`wait_seconds`: 5 s by default, or shorter), unless the server is back within that wait.
(Never at once: the pool replaces a dropped connection before use, and waits for a new one.
A store refusing at once would have a due schedule try again at once, for ever: its
conversation idle, the scheduler tries what is due.) A call either takes effect whole or
not at all: the inner store's own calls (a composite write calling its parts) never meet
the outage.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.store import MemoryStore
from bridge.store.port import StoreUnavailable

# Not the server's: the store's own life, which the world opens and closes itself.
_LIFECYCLE = frozenset({"open", "close", "__aenter__", "__aexit__"})
_LATENCIES = (0.0005, 0.001, 0.002, 0.004)  # seconds a call takes, with `latency`
# The calls `latency` slows: a message's hand-over (journaled, its conversation claimed and
# read). The periodic ones (renewals, sweeps, heartbeats) run hundreds of times a world.
_HANDOVER = frozenset({"journal_message", "claim_lease", "pending_messages"})


@dataclass(frozen=True)
class DbOutage:
    """The database away from..until (world seconds); a call meanwhile fails after `wait`."""

    start: float
    end: float
    wait: float  # how long a call waits for a connection, then fails

    def down(self, at: float) -> bool:
        return self.start <= at < self.end


def draw_db_outage(seed: int) -> DbOutage | None:
    """Whether the seed's world loses its database, when and for how long (a stream of its
    own: the worlds drawn before database outages were stay as they were). Shorter than the
    turn's store retries (bridge/store/steady.py, about a minute): the product's promise is
    for a restart or a failover, not a database gone for good."""
    draw = random.Random(f"db:{seed}")
    if draw.random() >= 0.25:
        return None
    start = draw.uniform(0.0, 40.0)
    return DbOutage(
        start, start + draw.choice((0.5, 2.0, 5.0, 15.0, 40.0)), draw.choice((0.5, 5.0))
    )


class DownStore:
    """A `MemoryStore` whose every call meets the world's database outage (see the module)."""

    def __init__(
        self,
        inner: MemoryStore,
        now: Callable[[], float],
        outage: DbOutage,
        latency: random.Random | None = None,
        after_journals: int = 0,
    ) -> None:
        """`latency`: each hand-over call takes a few milliseconds drawn from it (None: no
        time).
        `after_journals`: the outage (its length and wait as drawn) begins instead just as
        that many messages have been journaled: in the middle of a hand-over, the message
        taken and its conversation not claimed yet (the cluster database-restart test's
        moment)."""
        self._inner = inner
        self._now = now  # world seconds
        self._latency = latency
        self._trigger = after_journals
        self._drawn = outage
        self._outage = outage if not after_journals else _NEVER
        self.refused = 0  # calls answered StoreUnavailable

    @property
    def outage(self) -> DbOutage | None:
        """The outage as it happened (None: its trigger never came)."""
        return None if self._outage is _NEVER else self._outage

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name in _LIFECYCLE or not asyncio.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self._latency is not None and name in _HANDOVER:
                await asyncio.sleep(self._latency.choice(_LATENCIES))
            outage = self._outage
            if outage.down(self._now()):  # the pool waits for a connection: back meanwhile?
                await asyncio.sleep(min(outage.wait, outage.end - self._now()))
                if outage.down(self._now()):
                    self.refused += 1
                    raise StoreUnavailable("OperationalError")
            result = await attr(*args, **kwargs)
            if name == "journal_message" and self._trigger:
                self._trigger -= 1
                if not self._trigger:
                    drawn, start = self._drawn, self._now()
                    self._outage = DbOutage(start, start + drawn.end - drawn.start, drawn.wait)
            return result

        self.__dict__[name] = call  # found by plain lookup from now on: made once per name
        return call


_NEVER = DbOutage(math.inf, math.inf, 0.0)
