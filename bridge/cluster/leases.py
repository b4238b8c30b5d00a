"""`LeaseKeeper`: the conversations this instance holds, kept alive in the store.

One keeper per bridge process. `acquire(key)` claims a conversation's lease before the
instance runs anything of it; `owns(key)` says whether it may act on it *now*; `run()`
renews every lease every `ttl / 3` in one statement, and a lease the renewal no longer
returns (another instance took it over after it expired) is reported once through
`on_lost` and forgotten. A lease whose renewal has not succeeded by its expiry (the
database was unreachable, the process paused) counts as lost as well, since another
instance may take it from then on; if nobody did, the next renewal still finds it in the
store, and the keeper releases it there so that it is taken over the normal way.

Time is injected: `clock` (seconds since the epoch: the store compares it with the other
instances' clocks) and `sleep`, so tests run the loop without waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

logger = logging.getLogger(__name__)

LossReason = Literal["taken", "expired"]
OnLost = Callable[[str, LossReason], None]


class LeaseStore(Protocol):
    """What the keeper needs of the `Store`."""

    async def claim_lease(
        self, conversation_key: str, owner: str, now: float, ttl: float
    ) -> int | None: ...

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]: ...

    async def release_leases(self, owner: str, keys: Sequence[str] | None = None) -> int: ...


@dataclass(frozen=True)
class _Held:
    fence: int
    deadline: float  # the expiry the store last confirmed (by our clock)
    stamp: int  # which acquire made it: a renewal racing with a re-acquire keeps the new one


def _ignore(key: str, reason: LossReason) -> None:
    return None


class LeaseKeeper:
    def __init__(
        self,
        store: LeaseStore,
        instance_id: str,
        ttl: float,
        *,
        on_lost: OnLost = _ignore,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        renew_every: float | None = None,
    ) -> None:
        if ttl <= 0:
            raise ValueError("the lease time must be positive")
        self.store = store
        self.instance_id = instance_id
        self.ttl = ttl
        self.renew_every = ttl / 3 if renew_every is None else renew_every
        self._on_lost = on_lost
        self._clock = clock
        self._sleep = sleep
        self._held: dict[str, _Held] = {}
        self._acquiring: set[str] = set()
        self._stamps = 0
        self._stopping = asyncio.Event()

    def __repr__(self) -> str:
        return f"LeaseKeeper({self.instance_id!r}, {len(self._held)} held)"

    # -- what the engine asks ----------------------------------------------------------------

    def owns(self, key: str) -> bool:
        """True while this instance holds the lease and its confirmed expiry lies ahead."""
        held = self._held.get(key)
        return held is not None and self._clock() < held.deadline

    def fence(self, key: str) -> int | None:
        """The fence of the lease held on `key` (None when not held)."""
        held = self._held.get(key)
        return None if held is None else held.fence

    def held(self) -> list[str]:
        return sorted(self._held)

    async def acquire(self, key: str) -> int | None:
        """Claim (or confirm) the lease; its fence when this instance holds it now, None while
        another instance does."""
        if self.owns(key):
            return self._held[key].fence
        self._acquiring.add(key)
        try:
            now = self._clock()
            fence = await self.store.claim_lease(key, self.instance_id, now, self.ttl)
        finally:
            self._acquiring.discard(key)
        if fence is None:
            if self._held.pop(key, None) is not None:
                self._lose(key, "taken")
            return None
        self._stamps += 1
        self._held[key] = _Held(fence, now + self.ttl, self._stamps)
        return fence

    async def release(self, keys: Sequence[str] | None = None) -> None:
        """Give up some leases (all when `keys` is None), here first, then in the store."""
        chosen = list(self._held) if keys is None else [k for k in keys if k in self._held]
        for key in chosen:
            del self._held[key]
        if chosen:
            await self.store.release_leases(self.instance_id, chosen)

    # -- the renewal loop ---------------------------------------------------------------------

    async def start(self) -> None:
        """Before the first acquire: a previous process under the same instance id may have
        left leases; they are released, so the takeover path handles their work."""
        released = await self.store.release_leases(self.instance_id)
        if released:
            logger.info("released %d leases left by an earlier %s", released, self.instance_id)

    async def run(self) -> None:
        """Renew every `renew_every` seconds until `stop()`; a failed renewal is logged and
        tried again at the next tick."""
        while not self._stopping.is_set():
            await self._sleep(self.renew_every)
            if self._stopping.is_set():
                return
            try:
                await self.renew()
            except Exception as exc:  # the store is down: try again at the next tick
                logger.warning("lease renewal failed: %s", type(exc).__name__)
                self._expire()

    def stop(self) -> None:
        self._stopping.set()

    async def close(self) -> None:
        """Stop the loop and release every lease (a clean shutdown: others take over at once)."""
        self.stop()
        await self.release()

    async def renew(self) -> list[str]:
        """One renewal; returns the keys reported lost."""
        before = {key: held.stamp for key, held in self._held.items()}
        now = self._clock()
        kept = set(await self.store.renew_leases(self.instance_id, now, self.ttl))
        lost: list[str] = []
        for key, stamp in before.items():
            held = self._held.get(key)
            if held is None or held.stamp != stamp:
                continue  # released or acquired again meanwhile: not this renewal's to judge
            if key in kept:
                self._held[key] = _Held(held.fence, now + self.ttl, stamp)
            else:
                del self._held[key]
                lost.append(key)
        strays = sorted(kept - self._held.keys() - self._acquiring)
        if strays:
            # Ours in the store but not here (expired here, or an earlier process's).
            await self.store.release_leases(self.instance_id, strays)
        for key in lost:
            self._lose(key, "taken")
        return lost + self._expire()

    def _expire(self) -> list[str]:
        now = self._clock()
        gone = sorted(key for key, held in self._held.items() if held.deadline <= now)
        for key in gone:
            del self._held[key]
            self._lose(key, "expired")
        return gone

    def _lose(self, key: str, reason: LossReason) -> None:
        logger.warning("lease lost (%s): %s", reason, key)
        try:
            self._on_lost(key, reason)
        except Exception:
            logger.exception("the lost-lease callback failed for %s", key)
