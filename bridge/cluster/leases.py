"""`LeaseKeeper`: the conversations this instance holds, kept alive in the store.

One keeper per bridge process. `acquire(key)` claims a conversation's lease before the
instance runs anything of it; `owns(key)` says whether it may act on it *now*; `run()`
renews every lease every `ttl / 3` in one statement, and a lease the renewal no longer
returns (another instance took it over after it expired) is reported once through
`on_lost` and forgotten.

A renewal that fails (the database is restarting, unreachable) loses nothing by itself.
Past the confirmed expiry the lease is *unconfirmed*: `owns` is False, so nothing new
starts on it (`confirmed(key)` waits for the answer), but what runs goes on and the
conversation stays here. The next renewal that reaches the store decides: still ours
(nobody took it; the others hold off their takeover for a while after an outage, see
`steady`) and the conversation carries on without a word, or taken, and it is lost as
above. Renewing an expired lease is safe: `renew_leases` extends only the caller's own.

Time is injected: `clock` (seconds since the epoch: the store compares it with the other
instances' clocks) and `sleep`, so tests run the loop without waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

logger = logging.getLogger(__name__)

LossReason = Literal["taken"]
OnLost = Callable[[str, LossReason], None]


class LeaseStore(Protocol):
    """What the keeper needs of the `Store`."""

    async def claim_lease(
        self,
        conversation_key: str,
        owner: str,
        now: float,
        ttl: float,
        *,
        take_expired: bool = True,
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
        clock: Callable[[], float],
        on_lost: OnLost = _ignore,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        renew_every: float | None = None,
        takeover_grace: float | None = None,
    ) -> None:
        if ttl <= 0:
            raise ValueError("the lease time must be positive")
        self.store = store
        self.instance_id = instance_id
        self.ttl = ttl
        self.renew_every = ttl / 3 if renew_every is None else renew_every
        # After its own renewals failed (the store was away), how long this instance leaves
        # the others' expired leases to them: twice the lease time covers their renewal
        # period and their connection pool coming back later than this one's.
        self.takeover_grace = 2 * ttl if takeover_grace is None else takeover_grace
        self._on_lost = on_lost
        self._clock = clock
        self._sleep = sleep
        self._held: dict[str, _Held] = {}
        self._acquiring: set[str] = set()
        self._stamps = 0
        self._stopping = asyncio.Event()
        # Each renewal's outcome, for those waiting on an unconfirmed lease (`confirmed`).
        self._renewed = asyncio.Condition()
        # Since when renewals succeed without a break (None: the last one failed); before
        # the first failure, since ever.
        self._steady_since: float | None = float("-inf")
        self._renewing_since: float | None = None  # when the renewal in flight was asked

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

    def holds(self, key: str) -> bool:
        """Whether the lease is held here, confirmed or not."""
        return key in self._held

    def held(self) -> list[str]:
        """Every lease held here, confirmed or not."""
        return sorted(self._held)

    async def confirmed(self, key: str) -> bool:
        """Whether this instance holds the lease now: at once while it is confirmed (or not
        held at all); while unconfirmed (the store was away past its expiry), at the next
        renewal that reaches the store: True if it was still ours, False if taken."""
        if key not in self._held or self.owns(key):
            return self.owns(key)
        async with self._renewed:
            while key in self._held and not self.owns(key):
                await self._renewed.wait()
            return self.owns(key)

    def steady(self, grace: float) -> bool:
        """The store has answered every renewal, each within a renewal period, for at least
        `grace` seconds. After an outage, an instance whose own renewals failed (or waited
        it out) gives the others this long to renew theirs before it claims their expired
        leases (`acquire`): they were cut off as it was, and most likely live on."""
        now, asked = self._clock(), self._renewing_since
        if asked is not None and now - asked > self.renew_every:
            return False  # a renewal is waiting for the store right now: it is away
        since = self._steady_since
        return since is not None and now - since >= grace

    async def acquire(self, key: str) -> int | None:
        """Claim (or confirm) the lease; its fence when this instance holds it now, None while
        another instance does."""
        if self.owns(key):
            return self._held[key].fence
        self._acquiring.add(key)
        try:
            now = self._clock()
            take_expired = self.steady(self.takeover_grace)
            fence = await self.store.claim_lease(
                key, self.instance_id, now, self.ttl, take_expired=take_expired
            )
        finally:
            self._acquiring.discard(key)
        before = self._held.pop(key, None)
        if before is not None and fence != before.fence:
            self._lose(key, "taken")  # held by another meanwhile (the fence grew)
        if fence is None:
            return None
        self._stamps += 1
        self._held[key] = _Held(fence, now + self.ttl, self._stamps)
        await self._tell()
        return fence

    async def release(self, keys: Sequence[str] | None = None) -> None:
        """Give up some leases (all when `keys` is None), here first, then in the store."""
        chosen = list(self._held) if keys is None else [k for k in keys if k in self._held]
        for key in chosen:
            del self._held[key]
        await self._tell()
        if chosen:
            await self.store.release_leases(self.instance_id, chosen)

    # -- the renewal loop ---------------------------------------------------------------------

    async def start(self) -> None:
        """Before the first acquire: a previous process under the same instance id may have
        left leases; they are released, so the takeover path handles their work."""
        released = await self.store.release_leases(self.instance_id)
        # Steady from now, not since ever: a process started just as the store came back
        # (its supervisor restarting it through an outage) cannot tell the others were cut
        # off too, so their expired leases are left to them for the grace as after an
        # outage of its own (several such worlds of the simulator ran a round twice).
        self._steady_since = self._clock()
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
                self._steady_since = None
                unconfirmed = self._unconfirmed()
                logger.warning(
                    "lease renewal failed (%s); %d leases unconfirmed",
                    type(exc).__name__,
                    len(unconfirmed),
                )

    def stop(self) -> None:
        self._stopping.set()

    async def close(self) -> None:
        """Stop the loop and release every lease (a clean shutdown: others take over at once)."""
        self.stop()
        await self.release()

    async def renew(self) -> list[str]:
        """One renewal; returns the keys reported lost."""
        before = {key: held.stamp for key, held in self._held.items()}
        now = self._renewing_since = self._clock()
        try:
            kept = set(await self.store.renew_leases(self.instance_id, now, self.ttl))
        finally:
            self._renewing_since = None
        answered = self._clock()
        if answered - now > self.renew_every:
            # Answered, but a renewal's period late: the store was away while the call
            # waited for a connection (a restart the pool rode out). The others waited as
            # this one did, and their leases expired meanwhile as ours did: steadiness
            # starts now, so none of theirs is taken before they could renew (seed 892).
            self._steady_since = answered
        elif self._steady_since is None:
            self._steady_since = now
        lost: list[str] = []
        for key, stamp in before.items():
            held = self._held.get(key)
            if held is None or held.stamp != stamp:
                continue  # released or acquired again meanwhile: not this renewal's to judge
            if key in kept:
                if held.deadline <= now:
                    logger.info("lease reclaimed after the store was away: %s", key)
                self._held[key] = _Held(held.fence, now + self.ttl, stamp)
            else:
                del self._held[key]
                lost.append(key)
        strays = sorted(kept - self._held.keys() - self._acquiring)
        if strays:
            # Ours in the store but not here (an earlier process's, or released meanwhile).
            await self.store.release_leases(self.instance_id, strays)
        for key in lost:
            self._lose(key, "taken")
        await self._tell()
        return lost

    def _unconfirmed(self) -> list[str]:
        now = self._clock()
        return sorted(key for key, held in self._held.items() if held.deadline <= now)

    async def _tell(self) -> None:
        async with self._renewed:
            self._renewed.notify_all()

    def _lose(self, key: str, reason: LossReason) -> None:
        logger.warning("lease lost (%s): %s", reason, key)
        try:
            self._on_lost(key, reason)
        except Exception:
            logger.exception("the lost-lease callback failed for %s", key)
