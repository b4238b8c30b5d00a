"""The engine's reactions: one of the bot's on a message at a time, the old removed before
the newest state asked for is added, never holding the chat that asked."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from bridge.core.state import Reaction
from bridge.engine.reactions import ReactionEmoji, Reactions
from bridge.feishu.delivery import FeishuGate
from bridge.tasks import TaskTracker


class FakeReactions:
    """add_reaction / remove_reaction of the FeishuApi port, recorded; `hold` keeps the
    next call in flight until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.on: dict[str, tuple[str, str]] = {}  # reaction id -> (message, emoji)
        self.hold: asyncio.Event | None = None
        self.refuse_removes = False
        self.called = asyncio.Event()
        self._n = 0

    async def _wait(self) -> None:
        if self.hold is not None:
            await self.hold.wait()

    async def add_reaction(self, message_id: str, emoji_type: str) -> str | None:
        self.calls.append(("add", message_id, emoji_type))
        self.called.set()
        await self._wait()
        self._n += 1
        self.on[f"re_{self._n}"] = (message_id, emoji_type)
        return f"re_{self._n}"

    async def remove_reaction(self, message_id: str, reaction_id: str) -> bool:
        self.calls.append(("remove", message_id, self.on[reaction_id][1]))
        await self._wait()
        if self.refuse_removes:
            return False
        del self.on[reaction_id]
        return True

    def shown(self, message_id: str) -> list[str]:
        return [emoji for mid, emoji in self.on.values() if mid == message_id]


def reactions(feishu: FakeReactions, **kw: Any) -> Reactions:
    gate = FeishuGate(lambda: 0.0, random.Random(0))
    return Reactions(
        feishu=feishu,  # type: ignore[arg-type]
        gate=gate,
        emoji=ReactionEmoji(),
        tasks=TaskTracker("test"),
        **kw,
    )


async def test_each_state_replaces_the_one_before() -> None:
    feishu = FakeReactions()
    r = reactions(feishu)
    await r.ack("om_1", "oc")
    r.show("om_1", "oc", Reaction.WAITING)
    await r.wait_idle()
    r.show("om_1", "oc", Reaction.RECEIVED)
    await r.wait_idle()
    r.show("om_1", "oc", Reaction.DONE)
    await r.wait_idle()
    assert feishu.calls == [
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
    feishu = FakeReactions()
    r = reactions(feishu)
    feishu.hold = asyncio.Event()
    ack = asyncio.ensure_future(r.ack("om_1", "oc"))
    await feishu.called.wait()  # the ack is on its way
    r.show("om_1", "oc", Reaction.WAITING)  # handed over at once, made in turn
    r.show("om_1", "oc", Reaction.RECEIVED)
    r.show("om_1", "oc", Reaction.STOPPED)
    feishu.hold.set()
    await ack
    await r.wait_idle()
    assert feishu.calls == [
        ("add", "om_1", "OnIt"),
        ("remove", "om_1", "OnIt"),
        ("add", "om_1", "CrossMark"),
    ]


async def test_a_remove_that_fails_adds_nothing_beside_it() -> None:
    feishu = FakeReactions()
    r = reactions(feishu)
    await r.ack("om_1", "oc")
    feishu.refuse_removes = True
    r.show("om_1", "oc", Reaction.FAULT)
    await r.wait_idle()
    assert feishu.calls == [("add", "om_1", "OnIt"), ("remove", "om_1", "OnIt")]
    assert feishu.shown("om_1") == ["OnIt"]


async def test_a_message_this_process_did_not_ack_is_left_alone() -> None:
    feishu = FakeReactions()
    r = reactions(feishu)
    r.show("om_before_restart", "oc", Reaction.FAULT)
    await r.wait_idle()
    assert feishu.calls == []


async def test_messages_change_side_by_side() -> None:
    feishu = FakeReactions()
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
    feishu = FakeReactions()
    r = reactions(feishu, kept=3)
    for n in range(10):
        await r.ack(f"om_{n}", "oc")
    await r.wait_idle()
    assert len(r) <= 4


async def test_a_change_with_no_room_for_it_leaves_the_reaction_as_it_is() -> None:
    """A bridge busier than the reaction APIs allow: a change that finds no token within
    its patience is given up before it removes anything (the ack stays, never none)."""
    from bridge.core.delivery import Lane
    from bridge.engine.reactions import _REMOVE_API
    from bridge.feishu.budget import CallBudget

    feishu, now = FakeReactions(), [0.0]
    budget = CallBudget(now=lambda: now[0])  # time stands still: nothing refills
    r = reactions(feishu, budget=budget, patience=0.01)
    await r.ack("om_1", "oc")
    while budget.try_take(Lane.HINT, _REMOVE_API):  # the removals' minute spent
        pass
    r.show("om_1", "oc", Reaction.DONE)
    await r.wait_idle()
    assert feishu.calls == [("add", "om_1", "OnIt")]
    assert feishu.shown("om_1") == ["OnIt"]
    now[0] += 60.0  # the next change finds room, and goes
    r.show("om_2", "oc", Reaction.DONE)  # (a message this process never acked: left alone)
    await r.ack("om_3", "oc")
    r.show("om_3", "oc", Reaction.DONE)
    await r.wait_idle()
    assert feishu.shown("om_3") == ["DONE"]
