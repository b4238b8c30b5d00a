"""A presence line whose turn is over is never posted, whatever queue it sat in: here the
Feishu outage's, where the running hint waits for the API while its turn ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bridge.core import Timings
from bridge.devtools.emulator.codes import INTERNAL_ERROR
from bridge.feishu.delivery import DeliveryPolicy
from bridge.runtime.events import MessageChunk
from bridge.store import MemoryStore
from tests.unit.engine.engine_fakes import Harness, until


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    store = MemoryStore()
    await store.open()
    harness = Harness(
        store,
        # The hint is due at once; nothing else of the presence clock fires meanwhile.
        timings=Timings(first_hint=0.001, heartbeat=600, stale=3600, approval_timeout=3600),
        delivery=DeliveryPolicy(first_probe=0.01, max_probe=0.02),
    )
    yield harness
    await harness.engine.drain(0.1)
    await store.close()


async def test_a_hint_waiting_out_an_outage_is_dropped_when_its_turn_ends(harness: Harness) -> None:
    feishu = harness.feishu
    feishu.fail("reply_text", INTERNAL_ERROR)  # text replies fail with a 5xx
    await harness.say("hello")
    turn = await harness.runtime.turn(1)
    harness.clock += 1.0  # past the hint's deadline
    # The hint found the API down (once the client's retries of it are spent).
    await asyncio.wait_for(until(lambda: harness.engine.gate.down), 5.0)

    # The turn ends while its hint still waits for Feishu; then Feishu is back.
    turn.emit(MessageChunk(turn.session_id, "the answer"))
    turn.end()
    await asyncio.sleep(0)
    feishu.mend("reply_text")
    harness.clock += 1.0  # past the next probe's time
    await asyncio.wait_for(harness.idle(), 5.0)

    # The hint was never posted: the answer is the only text the chat got.
    assert feishu.texts() == ["the answer"], feishu.calls
