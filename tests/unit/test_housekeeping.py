"""The service's clockwork: a heartbeat at start and then every interval (what `status
--all` reads), pruning, and a store that fails a beat is logged and tried again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bridge.ops.housekeeping import Housekeeping, reachable_url
from bridge.store import MemoryStore


class Beats:
    """A sleep that lets the test decide when an interval of a given length has passed."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.go: dict[float, asyncio.Queue[None]] = {}
        self._changed = asyncio.Condition()

    async def __call__(self, seconds: float) -> None:
        async with self._changed:
            self.asked.append(seconds)
            self._changed.notify_all()
        await self.go.setdefault(seconds, asyncio.Queue()).get()

    async def asked_times(self, n: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.asked) >= n)

    def pass_(self, seconds: float) -> None:
        self.go.setdefault(seconds, asyncio.Queue()).put_nowait(None)


async def test_the_instance_beats_at_start_and_every_interval() -> None:
    store, sleep, now = MemoryStore(), Beats(), [1000.0]
    await store.open()
    counts = {"conversations": 3, "running": 1}
    keeper = Housekeeping(
        store,
        lambda: now[0],
        instance_id="bridge-a",
        epoch="e1",
        ops_url="http://h:8081",
        facts=lambda: counts,
        beat_every=5.0,
        prune_every=3600.0,
        sleep=sleep,
    )
    await keeper.start()
    [first] = await store.instances(now[0])
    assert (first.instance_id, first.epoch, first.ops_url, first.info) == (
        "bridge-a",
        "e1",
        "http://h:8081",
        counts,
    )
    now[0] += 5
    counts = {"conversations": 4, "running": 0}
    await sleep.asked_times(2)
    assert sorted(sleep.asked) == [5.0, 3600.0]  # the beat's loop and the pruner's
    sleep.pass_(5.0)  # one beat interval passes
    await sleep.asked_times(3)  # the beat loop has beaten and sleeps again
    await keeper.stop()
    [record] = await store.instances(now[0])
    assert (record.heartbeat_at, record.started_at, record.info) == (1005.0, 1000.0, counts)


async def test_a_failed_beat_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()  # never opened: every call fails

    keeper = Housekeeping(
        store, lambda: 0.0, instance_id="a", epoch="e", ops_url="", facts=dict, sleep=Beats()
    )
    with caplog.at_level(logging.WARNING, logger="bridge.ops.housekeeping"):
        await keeper.beat()
    assert "heartbeat failed: StoreClosed" in caplog.text


def test_a_wildcard_bind_is_reached_by_the_host_name() -> None:
    assert reachable_url("127.0.0.1", 8081) == "http://127.0.0.1:8081"
    assert reachable_url("::1", 8081) == "http://[::1]:8081"
    assert not reachable_url("0.0.0.0", 8081).startswith("http://0.0.0.0")
