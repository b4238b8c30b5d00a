"""Issues 34 and 35, "No turn falls through": a message whose turn fails before its prompt
reaches the agent still gets its one end signal, at once — never silence until the stale
notice. One test per place it can fail: the attachments, opening the session, reloading it
(then a new session goes on), sending the prompt, and a failure told before `PromptSent`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from bridge.feishu.events import AttachmentRef
from bridge.runtime.events import MessageChunk
from bridge.store import MemoryStore
from bridge.store.port import MessageState, TurnOutcome
from tests.fakes.feishu import Call
from tests.unit.engine.engine_fakes import ACK, CHAT, QUIET, Harness, T, until

RESEND = T("presence.unrecoverable")
STOPPED = T("presence.stopped")
IMAGE = AttachmentRef(kind="image", key="img_1", resource_type="image")


async def _answered(harness: Harness, number: int, text: str) -> None:
    async with asyncio.timeout(5):  # a guard: a prompt that never comes fails, not hangs
        turn = await harness.runtime.turn(number)
    turn.emit(MessageChunk(turn.session_id, text))
    turn.end()
    await harness.idle()


async def _after_one_round(harness: Harness) -> str:
    """A first round on sess_1, answered; the conversation is bound to it."""
    first = await harness.say("one")
    await _answered(harness, 1, "answer one")
    assert harness.feishu.calls == [
        Call("add_reaction", first, ACK),
        Call("reply_text", first, "answer one"),
    ]
    harness.feishu.calls.clear()
    return first


async def _ended(harness: Harness, message_id: str, outcome: TurnOutcome) -> None:
    """The turn is journaled with its one outcome, its message done."""
    turn = await harness.store.turn(message_id)
    assert turn is not None
    assert turn.outcome is outcome
    journaled = await harness.store.message(message_id)
    assert journaled is not None
    assert journaled.state is MessageState.DONE


@pytest.fixture
async def with_attachments(tmp_path: Path) -> AsyncIterator[Harness]:
    store = MemoryStore()
    await store.open()
    h = Harness(store, attachments_dir=tmp_path / "inbox")
    yield h
    await h.engine.drain(0.1)
    await store.close()


async def test_attachments_that_cannot_be_fetched_at_all_end_the_turn_with_the_resend_line(
    with_attachments: Harness,
) -> None:
    harness = with_attachments
    # Not one file refused by Feishu (that is `attachment.failed`, and the turn goes on): the
    # download itself breaks (here a malformed Content-Length), so nothing can go to the agent.
    harness.feishu.fail("download_resource", ValueError("invalid literal for int()"))
    mid = await harness.say("what is in this picture?", attachments=(IMAGE,))
    await harness.idle()

    assert harness.feishu.calls == [
        Call("add_reaction", mid, ACK),
        Call("download_resource", mid, "img_1"),
        Call("reply_text", mid, RESEND),
    ]
    assert harness.runtime.calls == []  # no session opened, no prompt
    await _ended(harness, mid, TurnOutcome.FAILED)


async def test_a_session_that_cannot_be_opened_ends_the_turn_with_the_unavailable_line(
    harness: Harness,
) -> None:
    harness.runtime.unavailable = "the agent exited while opening a session"
    mid = await harness.say("hello")
    await harness.idle()

    assert harness.feishu.calls == [
        Call("add_reaction", mid, ACK),
        Call("reply_text", mid, T("presence.runtime_unavailable")),
    ]
    assert harness.runtime.calls == [("open_session", CHAT, None)]
    await _ended(harness, mid, TurnOutcome.FAILED)


async def test_a_session_the_restarted_agent_cannot_reload_goes_on_in_a_new_one(
    harness: Harness,
) -> None:
    await _after_one_round(harness)
    # /stop killed the agent; the restarted one answers session/load -32603 (Gemini CLI).
    harness.runtime.lost.add("sess_1")
    mid = await harness.say("two")
    await _answered(harness, 2, "answer two")

    assert harness.feishu.calls == [
        Call("add_reaction", mid, ACK),
        Call("reply_text", mid, T("session.fresh")),
        Call("reply_text", mid, "answer two"),
    ]
    assert harness.runtime.calls[2:] == [
        ("prompt", "sess_1", "two"),
        ("open_session", CHAT, "sess_1"),
        ("prompt", "sess_2", "two"),
    ]
    assert await harness.store.session_for(CHAT) == "sess_2"
    await _ended(harness, mid, TurnOutcome.COMPLETED)
    # The round after it runs on the new session, with nothing more said about it.
    three = await harness.say("three")
    await _answered(harness, 3, "answer three")
    assert harness.runtime.calls[-1] == ("prompt", "sess_2", "three")
    assert harness.feishu.calls[3:] == [
        Call("add_reaction", three, ACK),
        Call("reply_text", three, "answer three"),
    ]


async def test_no_reload_and_no_new_session_ends_the_turn_with_the_unavailable_line(
    harness: Harness,
) -> None:
    await _after_one_round(harness)
    harness.runtime.lost.add("sess_1")
    harness.runtime.unavailable = "the agent refused session/new: -32603"
    mid = await harness.say("two")
    await harness.idle()

    assert harness.feishu.calls == [
        Call("add_reaction", mid, ACK),
        Call("reply_text", mid, T("presence.runtime_unavailable")),
    ]
    assert harness.runtime.calls[2:] == [
        ("prompt", "sess_1", "two"),
        ("open_session", CHAT, "sess_1"),
    ]
    await _ended(harness, mid, TurnOutcome.FAILED)


async def test_a_prompt_that_cannot_be_sent_ends_the_turn_with_the_resend_line(
    harness: Harness,
) -> None:
    await _after_one_round(harness)
    harness.runtime.refuse_prompt = ConnectionError("the agent's stdin is closed")
    mid = await harness.say("two")
    await harness.idle()

    assert harness.feishu.calls == [Call("add_reaction", mid, ACK), Call("reply_text", mid, RESEND)]
    assert harness.runtime.calls[2:] == [("prompt", "sess_1", "two")]  # not tried twice
    await _ended(harness, mid, TurnOutcome.FAILED)
    # Nothing is left running: the next message is answered.
    three = await harness.say("three")
    await _answered(harness, 2, "answer three")
    assert harness.feishu.calls[2:] == [
        Call("add_reaction", three, ACK),
        Call("reply_text", three, "answer three"),
    ]


async def test_a_failure_told_before_prompt_sent_ends_the_turn_with_the_resend_line(
    harness: Harness,
) -> None:
    harness.runtime.fail_unsent = "-32603: No previous sessions found"
    mid = await harness.say("hello")
    await harness.idle()

    assert harness.feishu.calls == [Call("add_reaction", mid, ACK), Call("reply_text", mid, RESEND)]
    await _ended(harness, mid, TurnOutcome.FAILED)
    two = await harness.say("two")
    await _answered(harness, 1, "answer two")
    assert harness.feishu.calls[2:] == [
        Call("add_reaction", two, ACK),
        Call("reply_text", two, "answer two"),
    ]


async def test_a_prompt_that_goes_out_after_its_stop_gave_up_is_cancelled() -> None:
    """A stop before the prompt went out (the agent slow to start) waits for it, then gives
    up (the cancel limit) and ends the round. When the prompt does go out after that, the
    agent is told to stop it: nothing would show what it does, and it would run its whole
    turn unseen (simulator seed 29171, a recalled message's round)."""
    store = MemoryStore()
    await store.open()
    timings = replace(QUIET, finish_grace=0.0, cancel_notice=600, cancel_limit=0.5)
    harness = Harness(store, timings=timings)
    harness.runtime.sending = gate = asyncio.Event()
    hello = await harness.say("hello")
    async with asyncio.timeout(5):
        await until(lambda: any(c[0] == "prompt" for c in harness.runtime.calls))
        await harness.say("/stop")
        await harness.idle()
        harness.clock += 1.0  # past the cancel limit: the stop gives up waiting, the round over
        await until(lambda: harness.engine.conversations[CHAT].conv.turn is None)
    await harness.idle()
    assert ("cancel", "sess_1") not in harness.runtime.calls  # nothing had gone out yet

    gate.set()
    async with asyncio.timeout(5):
        await until(lambda: ("cancel", "sess_1") in harness.runtime.calls)
    await harness.idle()
    replies = [c.text for c in harness.feishu.calls if c.op == "reply_text" and c.target == hello]
    assert replies == [STOPPED]
    await harness.engine.drain(0.1)
    await store.close()
