"""One live process per BRIDGE_INSTANCE_ID (bridge/cluster/identity.py), on the memory store
with an injected clock: a live namesake refuses the start, a dead predecessor does not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bridge.cluster.identity import DuplicateInstance, check_alone
from bridge.store import MemoryStore

TTL = 15.0


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    s = MemoryStore()
    await s.open()
    yield s
    await s.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def check(store: MemoryStore, clock: Clock, beat_meanwhile: bool = False) -> None:
    async def sleep(seconds: float) -> None:
        await clock.sleep(seconds)
        if beat_meanwhile:
            await store.heartbeat("bridge-1", "old-epoch", clock.now)

    await check_alone(store, "bridge-1", "new-epoch", ttl=TTL, clock=clock, sleep=sleep)


async def test_a_first_start_and_a_start_after_a_stale_beat_go_ahead(store: MemoryStore) -> None:
    clock = Clock()
    await check(store, clock)
    await store.heartbeat("bridge-1", "old-epoch", clock.now - TTL - 1)
    await check(store, clock)
    assert clock.slept == []  # nothing fresh to wait on


async def test_a_predecessor_that_stopped_beating_is_not_a_namesake(store: MemoryStore) -> None:
    clock = Clock()
    await store.heartbeat("bridge-1", "old-epoch", clock.now - 1)  # crashed a second ago
    await check(store, clock)
    assert clock.slept == [TTL / 2]


async def test_a_live_namesake_refuses_the_start(store: MemoryStore) -> None:
    clock = Clock()
    await store.heartbeat("bridge-1", "old-epoch", clock.now - 1)
    with pytest.raises(DuplicateInstance):
        await check(store, clock, beat_meanwhile=True)


async def test_another_name_beating_is_no_concern(store: MemoryStore) -> None:
    clock = Clock()
    await store.heartbeat("bridge-2", "other", clock.now)
    await check(store, clock)
    assert clock.slept == []
