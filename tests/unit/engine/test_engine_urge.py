"""The executor performs the core's `Urge`: one urgent_app call per card still waiting when
its turn comes, none for a card answered meanwhile; a refusal for the missing scope makes it
an @-mention line (the core's decision), and every conversation mentions from then on."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from bridge.core.inputs import TimerFired
from bridge.core.presence import APPROVAL_REMINDER
from bridge.core.state import Options, Urgency
from bridge.devtools.emulator.codes import MESSAGE_INVALID_PARAM
from bridge.engine.actor import ConversationActor
from bridge.runtime.events import PermissionKind, PermissionOption, PermissionRequested
from bridge.store import MemoryStore
from tests.fakes.feishu import Call, Refusal
from tests.unit.engine.engine_fakes import ALICE, CHAT, QUIET, Harness, T

OPTIONS = (PermissionOption("allow", "Allow once", PermissionKind.ALLOW_ONCE),)
BOSS = "ou_boss"
TIMINGS = replace(QUIET, approval_timeout=100.0)  # the reminder, and the urge, at 50 s
NO_SCOPE = Refusal(
    400, 99991672, "Access denied. One of the following scopes is required: [im:message.urgent]"
)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    store = MemoryStore()
    await store.open()
    options = Options(urgency=Urgency.APP, approvers=frozenset({BOSS}))
    harness = Harness(store, timings=TIMINGS, options=options)
    yield harness
    await harness.engine.drain(0.1)
    await store.close()


async def waiting(harness: Harness) -> tuple[ConversationActor, str]:
    """An approval card on the chat; the actor and the card's message."""
    await harness.say("deploy")
    turn = await harness.runtime.turn(1)
    turn.emit(PermissionRequested(turn.session_id, request_id="r1", title="Run", options=OPTIONS))
    await harness.idle()
    actor = harness.engine.conversations[CHAT]
    card = actor.conv.approvals[0].message_id
    assert card is not None
    return actor, card


def remind(harness: Harness, actor: ConversationActor) -> None:
    harness.clock += 50.0
    actor.feed(TimerFired(APPROVAL_REMINDER))


def urgent_calls(harness: Harness) -> list[Call]:
    return [c for c in harness.feishu.calls if c.op == "urgent_app"]


async def test_a_card_left_alone_is_urged_once_to_the_requester_and_approvers(
    harness: Harness,
) -> None:
    actor, card = await waiting(harness)
    remind(harness, actor)
    await harness.idle()
    assert urgent_calls(harness) == [Call("urgent_app", card, f"{ALICE},{BOSS}")]
    # The reminder line as always: urged, so the line itself mentions no one.
    left = T("time.seconds", n=50)
    assert harness.feishu.texts()[-1] == T("presence.approval_reminder", remaining=left)


async def test_a_card_answered_before_the_call_is_not_urged(harness: Harness) -> None:
    actor, _ = await waiting(harness)
    card = harness.feishu.cards()[0].card
    assert card is not None
    harness.feishu.hold("reply_text")  # the reminder line holds the shown lane
    remind(harness, actor)
    await harness.feishu.entered.wait()
    await harness.engine.card_action(harness.click(card, "allow"))
    harness.feishu.release()
    await harness.idle()
    assert urgent_calls(harness) == []


async def test_without_the_scope_they_are_mentioned_instead_and_from_then_on(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.feishu.fail("urgent_app", NO_SCOPE)
    actor, _ = await waiting(harness)
    with caplog.at_level(logging.WARNING):
        remind(harness, actor)
        await harness.idle()
    assert len(urgent_calls(harness)) == 1
    # The reminder line went out first; then one line that mentions them.
    left = T("presence.approval_reminder", remaining=T("time.seconds", n=50))
    mentions = f'<at user_id="{ALICE}"></at> <at user_id="{BOSS}"></at> '
    assert harness.feishu.texts()[-2:] == [left, mentions + left]
    assert harness.engine.urgent_mode.scope_missing
    assert actor.conv.options.urgency is Urgency.MENTION
    assert "im:message.urgent" in caplog.text


async def test_any_other_refusal_mentions_them_in_this_chat_only(harness: Harness) -> None:
    harness.feishu.fail("urgent_app", MESSAGE_INVALID_PARAM)
    actor, _ = await waiting(harness)
    remind(harness, actor)
    await harness.idle()
    left = T("presence.approval_reminder", remaining=T("time.seconds", n=50))
    mentions = f'<at user_id="{ALICE}"></at> <at user_id="{BOSS}"></at> '
    assert harness.feishu.texts()[-2:] == [left, mentions + left]
    assert not harness.engine.urgent_mode.scope_missing  # the scope is not what is missing


async def test_the_start_up_probe_finds_the_scope_missing(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.feishu.fail("urgent_app", NO_SCOPE)
    await harness.say("hello")  # a conversation that exists is told too
    await harness.idle()
    with caplog.at_level(logging.WARNING):
        await harness.engine.urgent_mode.probe(harness.client)
    assert harness.engine.urgent_mode.state() == {
        "enabled": True,
        "scope_missing": True,
        "by": "mention",
    }
    assert harness.engine.conversations[CHAT].conv.options.urgency is Urgency.MENTION
    assert [r.getMessage() for r in caplog.records if "im:message.urgent" in r.getMessage()]


async def test_the_probe_taking_another_refusal_means_the_scope_is_there(
    harness: Harness,
) -> None:
    harness.feishu.fail("urgent_app", MESSAGE_INVALID_PARAM)
    await harness.engine.urgent_mode.probe(harness.client)
    assert harness.engine.urgent_mode.state()["by"] == "urgent_app"
