"""The engine's reactions: one of the bot's on a message at a time, the old removed before
the newest state asked for is added, never holding the chat that asked."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from bridge.core.state import Reaction
from bridge.devtools.emulator.codes import INTERNAL_ERROR
from bridge.engine.reactions import ReactionEmoji, Reactions
from bridge.feishu.delivery import FeishuGate
from bridge.tasks import TaskTracker
from tests.fakes.feishu import FakeFeishu


def reactions(feishu: FakeFeishu, **kw: Any) -> Reactions:
    gate = FeishuGate(lambda: 0.0, random.Random(0))
    return Reactions(
        feishu=feishu.client(),
        gate=gate,
        emoji=ReactionEmoji(),
        tasks=TaskTracker("test"),
        **kw,
    )


def seen(feishu: FakeFeishu) -> list[tuple[str, str, str]]:
    """Each reaction call in order: add or remove, the message, the emoji added or removed."""
    return [
        ("add", c.target, c.text)
        if c.op == "add_reaction"
        else ("remove", c.target, feishu.emoji[c.text])
        for c in feishu.calls
    ]


async def test_each_state_replaces_the_one_before() -> None:
    feishu = FakeFeishu()
    r = reactions(feishu)
    await r.ack("om_1", "oc")
    r.show("om_1", "oc", Reaction.WAITING)
    await r.wait_idle()
    r.show("om_1", "oc", Reaction.RECEIVED)
    await r.wait_idle()
    r.show("om_1", "oc", Reaction.DONE)
    await r.wait_idle()
    assert seen(feishu) == [
        ("add", "om_1", "OnIt"),
        ("remove", "om_1", "OnIt"),
        ("add", "om_1", "Alarm"),
        ("remove", "om_1", "Alarm"),
        ("add", "om_1", "OnIt"),
        ("remove", "om_1", "OnIt"),
        ("add", "om_1", "DONE"),
    ]
    assert feishu.shown("om_1") == ["DONE"]
    assert len(r) == 0  # its round is over: forgotten


async def test_a_state_superseded_before_its_turn_is_never_shown() -> None:
    feishu = FakeFeishu()
    r = reactions(feishu)
    feishu.hold("add_reaction")
    feishu.hold("remove_reaction")
    ack = asyncio.ensure_future(r.ack("om_1", "oc"))
    await feishu.entered.wait()  # the ack is on its way
    r.show("om_1", "oc", Reaction.WAITING)  # handed over at once, made in turn
    r.show("om_1", "oc", Reaction.RECEIVED)
    r.show("om_1", "oc", Reaction.STOPPED)
    feishu.release()
    await ack
    await r.wait_idle()
    assert seen(feishu) == [
        ("add", "om_1", "OnIt"),
        ("remove", "om_1", "OnIt"),
        ("add", "om_1", "CrossMark"),
    ]


async def test_a_remove_that_fails_adds_nothing_beside_it() -> None:
    feishu = FakeFeishu()
    r = reactions(feishu)
    await r.ack("om_1", "oc")
    feishu.fail("remove_reaction", INTERNAL_ERROR)
    r.show("om_1", "oc", Reaction.FAULT)
    await r.wait_idle()
    assert seen(feishu) == [
        ("add", "om_1", "OnIt"),
        ("remove", "om_1", "OnIt"),
        ("remove", "om_1", "OnIt"),  # the client tries a best-effort call once more on a 5xx
    ]
    assert feishu.shown("om_1") == ["OnIt"]


async def test_a_message_this_process_did_not_ack_is_left_alone() -> None:
    feishu = FakeFeishu()
    r = reactions(feishu)
    r.show("om_before_restart", "oc", Reaction.FAULT)
    await r.wait_idle()
    assert seen(feishu) == []


async def test_messages_change_side_by_side() -> None:
    feishu = FakeFeishu()
    r = reactions(feishu)
    await r.ack("om_1", "oc")
    await r.ack("om_2", "oc")
    r.show("om_1", "oc", Reaction.DONE)
    r.show("om_2", "oc", Reaction.WAITING)
    await r.wait_idle()
    assert feishu.shown("om_1") == ["DONE"]
    assert feishu.shown("om_2") == ["Alarm"]
    assert len(r) == 1  # om_2's round is still on


async def test_memory_is_bounded() -> None:
    feishu = FakeFeishu()
    r = reactions(feishu, kept=3)
    for n in range(10):
        await r.ack(f"om_{n}", "oc")
    await r.wait_idle()
    assert len(r) <= 4


async def test_a_change_with_no_room_for_it_leaves_the_reaction_as_it_is() -> None:
    """A bridge busier than the reaction APIs allow: a change that finds no token within
    its patience is given up before it removes anything (the ack stays, never none)."""
    from bridge.core.delivery import Lane
    from bridge.engine.reactions import _ADD_API
    from bridge.feishu.budget import CallBudget

    feishu, now = FakeFeishu(), [0.0]
    budget = CallBudget(now=lambda: now[0])  # time stands still: nothing refills
    r = reactions(feishu, budget=budget, patience=0.01)
    await r.ack("om_1", "oc")
    while budget.try_take(Lane.HINT, _ADD_API):  # the adds' minute spent
        pass
    r.show("om_1", "oc", Reaction.DONE)
    await r.wait_idle()
    assert seen(feishu) == [("add", "om_1", "OnIt")]
    assert feishu.shown("om_1") == ["OnIt"]
    now[0] += 60.0  # the next change finds room, and goes
    r.show("om_2", "oc", Reaction.DONE)  # (a message this process never acked: left alone)
    await r.ack("om_3", "oc")
    r.show("om_3", "oc", Reaction.DONE)
    await r.wait_idle()
    assert feishu.shown("om_3") == ["DONE"]
