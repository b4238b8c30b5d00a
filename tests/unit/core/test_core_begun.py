"""A turn this process began in the store: its posts need no look in the outbox first, and
its end record says when it began (the executor keeps nothing of it)."""

from __future__ import annotations

from bridge.core.effects import Dropped, PostText, RecordTerminal
from bridge.core.inputs import TurnBegun, TurnInterruptedByRestart
from bridge.runtime.events import MessageChunk, PromptSent, StopReason, TurnEnded
from tests.unit.core.core_driver import ALICE, SID, Driver, of_type, posts


def test_posts_of_a_turn_begun_here_are_fresh_and_its_end_says_when_it_began() -> None:
    d = Driver()
    d.message("m1", at=2.0)
    d.feed(TurnBegun("m1"), at=2.1)
    d.feed(PromptSent(SID), at=2.2)
    d.feed(MessageChunk(SID, "done"), at=3.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=4.0)
    assert [p.fresh for p in posts(out)] == [True]
    (end,) = of_type(out, RecordTerminal)
    assert end.started_at == 2.0


def test_posts_before_it_was_begun_or_of_a_turn_an_earlier_process_began_read_the_store() -> None:
    d = Driver()
    out = d.feed(TurnInterruptedByRestart("m0", "m0", ALICE), at=1.0)
    assert [p.fresh for p in of_type(out, PostText)] == [False]
    assert of_type(out, RecordTerminal)[0].started_at is None
    d.message("m1", at=2.0)
    d.feed(PromptSent(SID), at=2.2)  # never told it was begun here (an earlier process did)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=4.0)
    assert [p.fresh for p in posts(out)] == [False]
    assert of_type(out, RecordTerminal)[0].started_at is None


def test_a_late_report_for_another_turn_is_dropped() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    out = d.feed(TurnBegun("m0"), at=0.1)
    assert [e.reason for e in of_type(out, Dropped)] == ["not the current turn"]
    assert d.conv.turn is not None
    assert not d.conv.turn.begun_here
