"""`LeaseKeeper` on the memory store, with a fake clock and a fake sleep: no test waits."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bridge.cluster import LeaseKeeper, LossReason
from bridge.store import Lease, MemoryStore

T0 = 1_700_000_000.0
TTL = 15.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Harness:
    def __init__(self, store: MemoryStore, *, ticks: int = 0) -> None:
        self.store = store
        self.clock = Clock()
        self.sleeps: list[float] = []
        self.lost: list[tuple[str, LossReason]] = []
        self.ticks = ticks  # run() stops at the sleep after this many
        self.keeper = LeaseKeeper(
            store,
            "me",
            TTL,
            on_lost=lambda key, reason: self.lost.append((key, reason)),
            clock=self.clock,
            sleep=self.sleep,
        )

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.clock.now += seconds
        if len(self.sleeps) > self.ticks:
            self.keeper.stop()


@pytest.fixture
async def store() -> MemoryStore:
    store = MemoryStore()
    await store.open()
    return store


async def test_renews_every_third_of_the_lease_time(store: MemoryStore) -> None:
    h = Harness(store, ticks=3)
    assert await h.keeper.acquire("A") == 1
    await h.keeper.run()
    assert h.sleeps == [5.0, 5.0, 5.0, 5.0]  # three renewals, stopped at the fourth sleep
    # The last renewal, 15 s in, pushed the expiry to 30 s: alive past the first expiry.
    assert await store.lease_of("A", T0 + 20) == Lease("me", 1, T0 + 30)
    assert h.keeper.owns("A")
    assert h.lost == []


async def test_owns_only_until_the_confirmed_expiry(store: MemoryStore) -> None:
    h = Harness(store)
    assert not h.keeper.owns("A")
    assert await h.keeper.acquire("A") == 1
    assert h.keeper.owns("A")
    assert h.keeper.fence("A") == 1
    h.clock.now = T0 + TTL  # no renewal came through: maybe someone else's by now
    assert not h.keeper.owns("A")
    assert await h.keeper.acquire("A") == 1  # nobody took it: the same holding, renewed
    assert h.keeper.owns("A")


async def test_another_instance_cannot_acquire_a_held_lease(store: MemoryStore) -> None:
    me, other = Harness(store), Harness(store)
    other.keeper = LeaseKeeper(store, "other", TTL, clock=other.clock)
    assert await me.keeper.acquire("A") == 1
    assert await other.keeper.acquire("A") is None
    assert not other.keeper.owns("A")


async def test_a_lease_taken_over_after_expiry_is_reported_lost_once(store: MemoryStore) -> None:
    h = Harness(store)
    assert await h.keeper.acquire("A") == 1
    assert await h.keeper.acquire("B") == 1
    # This instance stalls past the expiry; another takes A over.
    h.clock.now = T0 + TTL + 1
    assert await store.claim_lease("A", "other", h.clock.now, TTL) == 2
    assert await h.keeper.renew() == ["A"]
    assert h.lost == [("A", "taken")]
    assert h.keeper.held() == ["B"]
    assert h.keeper.owns("B")
    assert not h.keeper.owns("A")
    assert await h.keeper.renew() == []
    assert h.lost == [("A", "taken")]
    assert await store.lease_of("A", h.clock.now) == Lease("other", 2, T0 + 2 * TTL + 1)


async def test_a_failed_acquire_of_a_lease_held_before_reports_it_lost(store: MemoryStore) -> None:
    h = Harness(store)
    assert await h.keeper.acquire("A") == 1
    h.clock.now = T0 + TTL
    assert await store.claim_lease("A", "other", h.clock.now, TTL) == 2
    assert await h.keeper.acquire("A") is None
    assert h.lost == [("A", "taken")]


async def test_close_releases_every_lease_for_an_immediate_takeover(store: MemoryStore) -> None:
    h = Harness(store)
    for key in ("A", "B"):
        assert await h.keeper.acquire(key) == 1
    await h.keeper.close()
    assert h.keeper.held() == []
    assert await store.lease_of("A", T0) is None
    assert await store.claim_lease("A", "other", T0, TTL) == 2  # before the old expiry
    assert h.lost == []


async def test_release_some(store: MemoryStore) -> None:
    h = Harness(store)
    for key in ("A", "B"):
        assert await h.keeper.acquire(key) == 1
    await h.keeper.release(["A", "never-held"])
    assert h.keeper.held() == ["B"]
    assert await store.lease_of("A", T0) is None
    assert await store.lease_of("B", T0) == Lease("me", 1, T0 + TTL)


class FlakyStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.released: list[list[str] | None] = []

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]:
        if self.down:
            raise ConnectionError("database unreachable")
        return await super().renew_leases(owner, now, ttl)

    async def release_leases(self, owner: str, keys: Sequence[str] | None = None) -> int:
        self.released.append(None if keys is None else list(keys))
        return await super().release_leases(owner, keys)


async def test_renewals_failing_past_the_expiry_keep_the_lease_unconfirmed_then_reclaim_it() -> (
    None
):
    """Issue 35, a database restart: the store away past the expiry loses nothing here."""
    store = FlakyStore()
    await store.open()
    h = Harness(store, ticks=4)
    assert await h.keeper.acquire("A") == 1
    store.down = True
    await h.keeper.run()  # renewals at +5, +10 fail; at +15 the lease expired; +20 fails
    assert h.lost == []  # nothing cancelled, nobody told
    assert not h.keeper.owns("A")  # but nothing new starts on it
    assert h.keeper.holds("A")
    waiting = asyncio.create_task(h.keeper.confirmed("A"))
    await asyncio.sleep(0)
    assert not waiting.done()  # a turn waits for the answer
    # The database is back and nobody took A: the same lease, the same fence, silently.
    store.down = False
    assert await h.keeper.renew() == []
    assert await waiting is True
    assert h.keeper.owns("A")
    assert h.lost == []
    assert store.released == []
    assert await store.lease_of("A", h.clock.now) == Lease("me", 1, h.clock.now + TTL)


async def test_an_unconfirmed_lease_taken_over_meanwhile_is_lost_once() -> None:
    store = FlakyStore()
    await store.open()
    h = Harness(store, ticks=4)
    assert await h.keeper.acquire("A") == 1
    store.down = True
    await h.keeper.run()
    waiting = asyncio.create_task(h.keeper.confirmed("A"))
    await asyncio.sleep(0)
    assert await store.claim_lease("A", "other", h.clock.now, TTL) == 2  # it expired
    store.down = False
    assert await h.keeper.renew() == ["A"]
    assert await waiting is False
    assert h.lost == [("A", "taken")]
    assert not h.keeper.holds("A")


async def test_an_unconfirmed_lease_acquired_again_with_its_fence_is_not_a_new_holding() -> None:
    store = FlakyStore()
    await store.open()
    h = Harness(store, ticks=4)
    assert await h.keeper.acquire("A") == 1
    store.down = True
    await h.keeper.run()
    store.down = False
    assert await h.keeper.acquire("A") == 1  # a pull reclaims it: no loss, same fence
    assert h.lost == []
    assert await h.keeper.confirmed("A") is True


async def test_after_its_own_outage_it_leaves_the_others_expired_leases_to_them_a_while() -> None:
    """The database is back: the other instance, cut off as this one was, renews its
    leases within the grace; a takeover before then would cut its running turns."""
    store = FlakyStore()
    await store.open()
    h = Harness(store, ticks=4)
    assert await store.claim_lease("B", "other", T0, TTL) == 1
    store.down = True
    await h.keeper.run()  # 20 s of failed renewals: B expired at +15 meanwhile
    store.down = False
    assert not h.keeper.steady(0.0)
    assert await h.keeper.acquire("B") is None  # not even steady yet
    await h.keeper.renew()
    back = h.clock.now
    assert h.keeper.takeover_grace == 2 * TTL
    h.clock.now = back + 2 * TTL - 1
    assert await h.keeper.acquire("B") is None  # its owner may still come back
    h.clock.now = back + 2 * TTL
    assert await h.keeper.acquire("B") == 2  # nobody renewed it: a dead owner's, taken over
    # An instance that never lost the store takes an expired lease at once (as before).
    fresh = Harness(store)
    assert await store.claim_lease("C", "other", T0, TTL) == 1
    fresh.clock.now = T0 + TTL
    assert await fresh.keeper.acquire("C") == 2


class WaitingStore(MemoryStore):
    """A database away while a renewal waits for a connection: the call is answered once
    it is back, `wait` seconds later (the pool rode the restart out: no failure)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.wait = 0.0

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]:
        self.clock.now += self.wait
        return await super().renew_leases(owner, now, ttl)


async def test_a_renewal_answered_only_after_an_outage_counts_as_one() -> None:
    """Seed 892 of the simulator's cluster: both instances' renewals waited out a database
    restart and were answered, late; neither had failed, so each took itself for steady
    and took over the other's expired leases at once, cutting its running turn."""
    clock = Clock()
    store = WaitingStore(clock)
    await store.open()
    h = Harness(store)
    h.clock = clock
    h.keeper = LeaseKeeper(store, "me", TTL, clock=clock, sleep=h.sleep)
    assert await store.claim_lease("B", "other", T0, TTL) == 1
    store.wait = 20.0  # longer than the lease: B expired while this renewal waited
    await h.keeper.renew()
    back = clock.now
    assert not h.keeper.steady(h.keeper.takeover_grace)
    assert await h.keeper.acquire("B") is None  # its owner, cut off too, renews it first
    store.wait = 0.0
    await h.keeper.renew()
    clock.now = back + h.keeper.takeover_grace
    assert await h.keeper.acquire("B") == 2  # nobody renewed it: a dead owner's
    # A renewal answered within its period is no outage: steady as before.
    assert h.keeper.steady(h.keeper.takeover_grace)


class HeldStore(MemoryStore):
    """A renewal waits until the database is back (`back` set)."""

    def __init__(self) -> None:
        super().__init__()
        self.back = asyncio.Event()

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]:
        await self.back.wait()
        return await super().renew_leases(owner, now, ttl)


async def test_a_renewal_waiting_past_its_period_makes_the_keeper_unsteady_meanwhile() -> None:
    """Seed 892 again: the other instance's renewal was still waiting when the database
    came back and this one took its expired lease; steadiness is judged on it already."""
    store = HeldStore()
    await store.open()
    h = Harness(store)
    assert await store.claim_lease("B", "other", T0, TTL) == 1
    renewal = asyncio.create_task(h.keeper.renew())
    await asyncio.sleep(0)
    assert h.keeper.steady(0.0)  # just asked
    h.clock.now = T0 + TTL + 1  # B expired while the renewal waits
    assert not h.keeper.steady(0.0)
    assert await h.keeper.acquire("B") is None
    store.back.set()
    await renewal
    assert not h.keeper.steady(h.keeper.takeover_grace)  # answered late: an outage


async def test_start_releases_leases_an_earlier_process_left(store: MemoryStore) -> None:
    assert await store.claim_lease("A", "me", T0, TTL) == 1
    h = Harness(store)
    await h.keeper.start()
    assert await store.lease_of("A", T0) is None
    assert await h.keeper.acquire("A") == 2  # a new holding: the fence says so


async def test_a_process_just_started_leaves_the_others_expired_leases_to_them_a_while(
    store: MemoryStore,
) -> None:
    """Started as the database came back (its supervisor restarting it through the outage),
    it cannot tell that the others were cut off too: their expired leases wait out the
    grace, as after an outage of its own (else it cut their running rounds)."""
    assert await store.claim_lease("B", "other", T0, TTL) == 1
    h = Harness(store)
    h.clock.now = T0 + TTL  # B has expired: its owner was cut off, or is dead
    await h.keeper.start()
    assert await h.keeper.acquire("B") is None
    assert await h.keeper.acquire("A") == 1  # a free lease is taken at once
    h.clock.now = T0 + TTL + h.keeper.takeover_grace
    assert await h.keeper.acquire("B") == 2  # nobody renewed it: a dead owner's


async def test_a_claim_landing_before_a_renewal_is_not_released_as_a_stray() -> None:
    store = FlakyStore()
    await store.open()
    h = Harness(store)
    gate = asyncio.Event()
    claim = store.claim_lease

    async def slow_claim(
        key: str, owner: str, now: float, ttl: float, *, take_expired: bool = True
    ) -> int | None:
        fence = await claim(key, owner, now, ttl)  # in the store before the renewal runs
        await gate.wait()
        return fence

    store.claim_lease = slow_claim  # type: ignore[method-assign]
    acquiring = asyncio.create_task(h.keeper.acquire("A"))
    await asyncio.sleep(0)
    assert await h.keeper.renew() == []  # finds A in the store, not yet in the keeper
    gate.set()
    assert await acquiring == 1
    assert store.released == []
    assert h.lost == []
    assert h.keeper.owns("A")
    assert await store.lease_of("A", T0) == Lease("me", 1, T0 + TTL)


def test_the_lease_time_must_be_positive(store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="positive"):
        LeaseKeeper(store, "me", 0, clock=lambda: T0)


async def test_a_failing_callback_does_not_stop_the_keeper(store: MemoryStore) -> None:
    def explode(key: str, reason: LossReason) -> None:
        raise RuntimeError("bug in the engine")

    keeper = LeaseKeeper(store, "me", TTL, on_lost=explode, clock=lambda: T0)
    assert await keeper.acquire("A") == 1
    assert await store.release_leases("me") == 1
    assert await store.claim_lease("A", "other", T0, TTL) == 2
    assert await keeper.renew() == ["A"]
