"""The engine, in-process over recording fakes: what a message, a card click and a /stop
turn into, as Feishu calls and agent calls, in order."""

from __future__ import annotations

import asyncio

from bridge.runtime.events import (
    MessageChunk,
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    ToolCallStarted,
)
from bridge.store.port import MessageState, SessionRecord
from tests.fakes.feishu import Call
from tests.unit.engine.engine_fakes import ACK, CHAT, Harness, T

OPTIONS = (
    PermissionOption("allow-once", "Allow once", PermissionKind.ALLOW_ONCE),
    PermissionOption("reject-once", "Reject", PermissionKind.REJECT_ONCE),
)


async def test_a_message_is_acked_prompted_and_answered(harness: Harness) -> None:
    mid = await harness.say("hello")
    turn = await harness.runtime.turn(1)
    turn.emit(MessageChunk(turn.session_id, "hi "))
    turn.emit(MessageChunk(turn.session_id, "there"))
    turn.end()
    await harness.idle()

    assert harness.feishu.calls == [
        Call("add_reaction", mid, ACK),
        Call("reply_text", mid, "hi there"),
    ]
    assert harness.runtime.calls == [("open_session", CHAT, None), ("prompt", "sess_1", "hello")]
    journaled = await harness.store.message(mid)
    assert journaled is not None
    assert journaled.state is MessageState.DONE


async def test_the_next_message_reuses_the_conversation_s_session(harness: Harness) -> None:
    await harness.say("one")
    (await harness.runtime.turn(1)).end()
    await harness.idle()
    await harness.say("two")
    (await harness.runtime.turn(2)).end()
    await harness.idle()
    prompts = [c for c in harness.runtime.calls if c[0] == "prompt"]
    assert prompts == [("prompt", "sess_1", "one"), ("prompt", "sess_1", "two")]
    assert [c for c in harness.runtime.calls if c[0] == "open_session"] == [
        ("open_session", CHAT, None)
    ]


async def test_an_ack_jumps_ahead_of_replies_still_queued(harness: Harness) -> None:
    first = await harness.say("one")
    turn = await harness.runtime.turn(1)
    harness.feishu.hold("reply_text")  # Feishu is slow with the first text
    turn.emit(MessageChunk(turn.session_id, "let me look"))
    turn.emit(ToolCallStarted(turn.session_id, tool_call_id="t1", title="Read a.py"))
    await harness.feishu.entered.wait()  # the commentary is in flight
    turn.emit(MessageChunk(turn.session_id, "answer one"))
    turn.end()  # the answer queues behind it
    await asyncio.sleep(0)
    second = await harness.say("two")
    harness.feishu.release()
    await harness.runtime.turn(2)
    await harness.idle()

    assert [(c.op, c.target, c.text) for c in harness.feishu.calls[:4]] == [
        ("add_reaction", first, ACK),
        ("reply_text", first, "let me look"),
        ("add_reaction", second, ACK),  # straight after the call in flight
        ("reply_text", first, "answer one"),
    ]


async def test_a_card_click_is_answered_with_the_closed_card_and_reaches_the_agent(
    harness: Harness,
) -> None:
    mid = await harness.say("clean up")
    turn = await harness.runtime.turn(1)
    turn.emit(
        PermissionRequested(
            turn.session_id, request_id="r1", title="Run ls", options=OPTIONS, detail="ls -la"
        )
    )
    await harness.idle()
    (posted,) = harness.feishu.cards()
    assert posted.target == mid
    assert harness.feishu.texts() == [T("presence.waiting_approval")]
    assert posted.card is not None

    reply = await harness.engine.card_action(harness.click(posted.card, "allow-once"))
    await harness.idle()

    assert reply.toast_type == "success"
    assert reply.card is not None
    assert reply.card != posted.card
    assert ("answer_permission", "r1", "allow-once") in harness.runtime.calls
    # The callback's answer replaced the card: no second path PATCHes it too.
    assert [c for c in harness.feishu.calls if c.op == "update_card"] == []
    again = await harness.engine.card_action(harness.click(posted.card, "allow-once"))
    assert again.toast_text == T("card.already_handled")
    assert again.card is None


async def test_stop_while_the_session_opens_never_sends_the_prompt(harness: Harness) -> None:
    harness.runtime.opening = asyncio.Event()  # the agent is slow to start
    mid = await harness.say("a long job")
    await harness.idle()
    stop = await harness.say("/stop")
    await harness.idle()
    harness.runtime.opening.set()
    await harness.idle()

    assert [c[0] for c in harness.runtime.calls] == ["open_session"]
    assert harness.feishu.calls == [
        Call("add_reaction", mid, ACK),
        Call("add_reaction", stop, ACK),
        Call("reply_text", mid, T("presence.stopped")),  # the round's end, on its message
    ]
    journaled = await harness.store.message(mid)
    assert journaled is not None
    assert journaled.state is MessageState.DONE


async def test_past_the_running_turns_limit_a_turn_is_told_at_once(harness: Harness) -> None:
    harness.engine = harness.build(max_running_turns=1)
    await harness.say("one", chat="oc_a")
    await harness.runtime.turn(1)
    other = await harness.say("two", chat="oc_b")
    await harness.idle()
    assert ("reply_text", other) in harness.feishu.ops()
    assert harness.feishu.texts() == [T("presence.runtime_busy")]
    assert [c[2] for c in harness.runtime.calls if c[0] == "prompt"] == ["one"]


async def test_a_sessions_activity_is_written_once_a_minute_not_once_a_turn(
    harness: Harness,
) -> None:
    writes: list[float] = []
    note = harness.store.note_session

    async def counted(record: SessionRecord) -> None:
        writes.append(record.active_at)
        await note(record)

    harness.store.note_session = counted  # type: ignore[method-assign]
    for number, text in enumerate(("one", "two", "three"), start=1):
        await harness.say(text)
        (await harness.runtime.turn(number)).end()
        await harness.idle()
    assert len(writes) == 1  # opened; the next two turns within the minute write nothing
    harness.clock += 61
    await harness.say("four")
    (await harness.runtime.turn(4)).end()
    await harness.idle()
    assert len(writes) == 2
    (listed,) = await harness.store.sessions_of(CHAT)
    assert listed.active_at == harness.clock


async def test_a_round_ending_in_the_shutdown_grace_is_answered_and_the_queue_waits(
    harness: Harness,
) -> None:
    first = await harness.say("one")
    turn = await harness.runtime.turn(1)
    second = await harness.say("two")  # queued behind the running round
    await harness.idle()
    draining = asyncio.create_task(harness.engine.drain(5.0))
    await asyncio.sleep(0)  # the shutdown has begun; the round is still running
    turn.emit(MessageChunk(turn.session_id, "done"))
    turn.end()
    await draining

    assert Call("reply_text", first, "done") in harness.feishu.calls
    finished, waiting = await harness.store.message(first), await harness.store.message(second)
    assert finished is not None
    assert finished.state is MessageState.DONE
    assert waiting is not None
    assert waiting.state is MessageState.QUEUED  # it runs after the restart, not now
    assert [c[0] for c in harness.runtime.calls].count("prompt") == 1


async def test_a_round_not_started_in_the_shutdown_is_let_go_silently_and_stays_journaled(
    harness: Harness,
) -> None:
    await harness.say("one")
    turn = await harness.runtime.turn(1)
    second = await harness.say("two")  # queued behind the running round
    await harness.idle()
    said = len(harness.feishu.calls)
    draining = asyncio.create_task(harness.engine.drain(5.0))
    await asyncio.sleep(0)
    turn.end()  # the round ends in the grace; the queued one would start now
    await draining

    actor = harness.engine.conversations[CHAT]
    assert actor.conv.turn is None  # the core knows it never ran: no hint speaks for it
    assert actor.conv.timers == ()
    assert len(harness.feishu.calls) == said + 1  # the first round's end, nothing for two
    waiting = await harness.store.message(second)
    assert waiting is not None
    assert waiting.state is MessageState.QUEUED  # the next start runs it
    assert [c[0] for c in harness.runtime.calls].count("prompt") == 1


async def _card_closed_by_stop(harness: Harness, *, feishu_slow: bool) -> None:
    mid = await harness.say("deploy")
    turn = await harness.runtime.turn(1)
    if feishu_slow:
        harness.feishu.hold("reply_card")
    turn.emit(PermissionRequested(turn.session_id, request_id="r1", title="Run", options=OPTIONS))
    if feishu_slow:
        await harness.feishu.entered.wait()  # the card is in flight: the core has no message
    else:
        await harness.idle()
    await harness.say("/stop")
    await asyncio.sleep(0)
    harness.feishu.release()
    await harness.idle()
    card_message = await harness.store.sent(f"{mid}:card:r1")
    assert card_message is not None, harness.feishu.calls
    closed = [c.target for c in harness.feishu.calls if c.op == "update_card"]
    assert closed == card_message  # the card itself, closed as cancelled


async def test_a_card_closed_after_feishu_took_it_is_patched_by_the_message_the_core_kept(
    harness: Harness,
) -> None:
    await _card_closed_by_stop(harness, feishu_slow=False)


async def test_a_card_closed_while_its_post_was_in_flight_is_still_patched(
    harness: Harness,
) -> None:
    await _card_closed_by_stop(harness, feishu_slow=True)
