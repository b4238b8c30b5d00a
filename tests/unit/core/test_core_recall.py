"""A recalled message in the core: dropped from the queue with its line edited, the running
round stopped with one line, an answered one left alone."""

from __future__ import annotations

from bridge.core.effects import (
    CancelTurn,
    Dropped,
    EditText,
    MarkMessageDone,
    PostText,
    StartTurn,
)
from bridge.core.inputs import MessageRecalled
from bridge.core.state import ExecState
from bridge.runtime.events import MessageChunk, StopReason, TurnEnded
from tests.unit.core.core_driver import SID, Driver, of_type


def test_a_recalled_queued_message_leaves_the_queue_and_its_line_is_edited() -> None:
    d = Driver()
    d.start("m1")
    d.message("m2")
    d.message("m3")
    out = d.feed(MessageRecalled("m2"))
    assert out == [
        EditText("m2:queued", "presence.recalled_queued", {}),
        MarkMessageDone("m2"),
    ]
    assert [q.message_id for q in d.conv.queue] == ["m3"]
    d.feed(MessageChunk(SID, "done"))
    after = d.feed(TurnEnded(SID, StopReason.END_TURN))
    assert [s.turn_id for s in of_type(after, StartTurn)] == ["m3"]  # m2 never runs


def test_recalling_the_running_rounds_message_stops_it_with_its_own_line() -> None:
    d = Driver()
    d.start("m1")
    out = d.feed(MessageRecalled("m1"))
    assert of_type(out, CancelTurn) == [CancelTurn("m1", SID)]
    ends = [p for p in of_type(out, PostText) if p.final]
    assert [(p.key, p.reply_to) for p in ends] == [("presence.recalled", "m1")]
    assert d.conv.turn is None or d.conv.turn.terminal


def test_recalling_an_answered_or_unknown_message_changes_nothing() -> None:
    d = Driver()
    d.start("m1")
    d.feed(MessageChunk(SID, "done"))
    d.feed(TurnEnded(SID, StopReason.END_TURN))
    before = d.conv
    for mid in ("m1", "nope"):
        out = d.feed(MessageRecalled(mid))
        assert [e for e in out if not isinstance(e, Dropped)] == []
        assert d.conv.state is ExecState.IDLE
    assert d.conv.queue == before.queue
