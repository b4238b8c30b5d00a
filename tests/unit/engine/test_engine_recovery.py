"""Restart recovery, in-process: a new engine on the store an old one left behind tells the
interrupted turn's user, then runs what was queued behind it, on the same agent session."""

from __future__ import annotations

from bridge.store.port import MessageState
from tests.fakes.feishu import Call
from tests.unit.engine.engine_fakes import CHAT, Harness, T


async def test_after_a_restart_the_interrupted_user_is_told_and_the_queue_runs(
    harness: Harness,
) -> None:
    interrupted = await harness.say("a long job")
    await harness.runtime.turn(1)
    queued = await harness.say("the next one")
    await harness.idle()
    assert harness.feishu.texts()[-1] == T("presence.queued", position=1)

    # The process dies here; a new one opens the same store.
    restarted = Harness(harness.store)
    restarted.clock = harness.clock + 5
    await restarted.engine.recover(before=restarted.clock)
    (await restarted.runtime.turn(1)).end()
    await restarted.idle()

    assert restarted.feishu.calls == [
        Call("reply_text", interrupted, T("presence.unrecoverable")),
        Call("reply_text", queued, T("recovery.resumed")),
        Call("reply_text", queued, T("presence.ended_empty")),
    ]
    assert restarted.runtime.calls == [
        ("open_session", CHAT, "sess_1"),
        ("prompt", "sess_1", "the next one"),
    ]
    for message_id in (interrupted, queued):
        journaled = await restarted.store.message(message_id)
        assert journaled is not None
        assert journaled.state is MessageState.DONE


async def test_recovery_leaves_what_the_new_process_already_took(harness: Harness) -> None:
    await harness.engine.recover(before=harness.clock - 1)  # everything is newer
    mid = await harness.say("fresh")
    (await harness.runtime.turn(1)).end()
    await harness.idle()
    await harness.engine.recover(before=harness.clock - 1)
    await harness.idle()
    assert [c.target for c in harness.feishu.calls] == [mid, mid]
    assert [c[0] for c in harness.runtime.calls] == ["open_session", "prompt"]
