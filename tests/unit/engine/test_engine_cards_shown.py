"""The core learns when an approval card is on the chat (`Posted`, fed the moment Feishu
takes it), and learns of every card that never will be (`CardNotShown`): its wait for the
user runs only from the first, so the second must never be missed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bridge.devtools.emulator.codes import INTERNAL_ERROR
from bridge.feishu.delivery import DeliveryPolicy
from bridge.runtime.events import PermissionKind, PermissionOption, PermissionRequested
from bridge.store import MemoryStore
from tests.fakes.feishu import FakeFeishu
from tests.unit.engine.engine_fakes import CHAT, NOW, QUIET, Harness, T, until

OPTIONS = (PermissionOption("allow", "Allow once", PermissionKind.ALLOW_ONCE),)


async def _harness(feishu: FakeFeishu) -> AsyncIterator[Harness]:
    store = MemoryStore()
    await store.open()
    harness = Harness(
        store,
        feishu=feishu,
        timings=QUIET,
        delivery=DeliveryPolicy(first_probe=0.01, max_probe=0.02, give_up_after=60.0),
    )
    yield harness
    await harness.engine.drain(0.1)
    await store.close()


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async for harness in _harness(FakeFeishu()):
        yield harness


@pytest.fixture
async def broken() -> AsyncIterator[Harness]:
    feishu = FakeFeishu()
    feishu.fail("reply_card", RuntimeError("a bug on the way to Feishu"))
    async for harness in _harness(feishu):
        yield harness


async def _ask(harness: Harness) -> None:
    await harness.say("deploy")
    turn = await harness.runtime.turn(1)
    turn.emit(PermissionRequested(turn.session_id, request_id="r1", title="Run", options=OPTIONS))


async def test_the_wait_counts_from_when_feishu_took_the_card(harness: Harness) -> None:
    harness.feishu.hold("reply_card")  # the card waits for its turn
    await _ask(harness)
    await harness.feishu.entered.wait()
    actor = harness.engine.conversations[CHAT]
    assert "approval_timeout" not in dict(actor.conv.timers)  # nobody was asked yet
    harness.clock += 40.0
    harness.feishu.release()
    await harness.idle()
    (approval,) = actor.conv.approvals
    assert approval.shown_at == NOW + 40.0
    assert dict(actor.conv.timers)["approval_timeout"] == NOW + 40.0 + QUIET.approval_timeout


async def test_a_card_feishu_never_took_in_its_window_ends_the_round(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    feishu = harness.feishu
    feishu.fail("reply_card", INTERNAL_ERROR)  # cards fail with a 5xx; texts go through
    await _ask(harness)
    # The card found the API down (once the client's retries of it are spent).
    await asyncio.wait_for(until(lambda: harness.engine.gate.down), 5.0)
    harness.clock += 61.0  # past the window: a retry now could post it twice
    await asyncio.wait_for(harness.idle(), 5.0)

    assert ("answer_permission", "r1", None) in harness.runtime.calls  # nothing ran
    assert T("presence.card_failed") in feishu.texts()
    assert harness.engine.conversations[CHAT].conv.turn is None
    assert "never took a card within its window" in caplog.text  # given up, not refused


async def test_a_card_that_failed_in_any_other_way_ends_the_round_too(broken: Harness) -> None:
    harness = broken
    await _ask(harness)
    await asyncio.wait_for(harness.idle(), 5.0)
    assert ("answer_permission", "r1", None) in harness.runtime.calls
    assert harness.feishu.texts()[-1] == T("presence.card_failed")
