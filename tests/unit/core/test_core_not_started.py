"""A turn the engine never handed to the agent, without a fault: the bridge is shutting
down, or another instance holds the conversation's lease. Its message stays journaled for
whoever runs the conversation next; nothing is said here, and nothing speaks for it."""

from __future__ import annotations

import pytest

from bridge.core.effects import (
    Dropped,
    MarkMessageDone,
    RecordTerminal,
    SendPrompt,
    StartTurn,
)
from bridge.core.inputs import (
    Command,
    CommandName,
    NotStartedReason,
    SessionOpened,
    TurnNotStarted,
)
from bridge.core.state import Conversation, ExecState, Options
from bridge.runtime.events import PromptSent
from tests.unit.core.core_driver import ALICE, SID, Driver, keys, of_type

REASONS = list(NotStartedReason)


@pytest.mark.parametrize("reason", REASONS)
def test_nothing_is_said_and_no_hint_or_heartbeat_follows(reason: NotStartedReason) -> None:
    d = Driver()
    d.message("m1", at=0.0)
    out = d.feed(TurnNotStarted("m1", reason), at=0.5)
    assert keys(out) == []
    assert of_type(out, RecordTerminal) == []  # no terminal: the next runner runs it
    assert of_type(out, MarkMessageDone) == []  # still journaled
    assert d.conv.state is ExecState.IDLE
    assert d.conv.turn is None
    assert d.conv.timers == ()
    assert keys(d.advance(3600.0)) == []


@pytest.mark.parametrize("reason", REASONS)
def test_the_received_line_stays_the_only_line(reason: NotStartedReason) -> None:
    d = Driver(Conversation(options=Options(received_text=True)))
    out = d.message("m1", at=0.0)
    out += d.feed(TurnNotStarted("m1", reason), at=0.5)
    out += d.advance(3600.0)
    assert keys(out) == ["presence.received"]


def test_the_queue_behind_it_is_let_go_too_and_does_not_start_here() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    d.message("m2", at=0.2)  # queued
    out = d.feed(TurnNotStarted("m1", NotStartedReason.SHUTTING_DOWN), at=0.5)
    assert of_type(out, StartTurn) == []
    assert d.conv.queue == ()
    assert of_type(out, MarkMessageDone) == []


def test_a_round_stopped_before_it_could_start_lets_the_next_one_go() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    assert keys(d.feed(Command(CommandName.STOP, "s1", ALICE, "/stop"), at=0.2)) == [
        "presence.stopped"
    ]
    d.message("m2", at=0.3)
    out = d.feed(TurnNotStarted("m1", NotStartedReason.SHUTTING_DOWN), at=0.5)
    assert keys(out) == []
    assert [s.turn_id for s in of_type(out, StartTurn)] == ["m2"]
    d.feed(TurnNotStarted("m2", NotStartedReason.SHUTTING_DOWN), at=0.6)
    assert d.conv.state is ExecState.IDLE


def test_a_report_for_another_turn_or_a_prompted_one_changes_nothing() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    assert of_type(d.feed(SessionOpened("m1", SID), at=0.1), SendPrompt)
    dropped = d.feed(TurnNotStarted("m0", NotStartedReason.NOT_OWNER), at=0.2)
    assert [e.reason for e in of_type(dropped, Dropped)] == ["not the current turn"]
    d.feed(PromptSent(SID), at=0.3)
    dropped = d.feed(TurnNotStarted("m1", NotStartedReason.NOT_OWNER), at=0.4)
    assert [e.reason for e in of_type(dropped, Dropped)] == ["prompt already sent"]
    assert d.conv.state is ExecState.WAITING_RESPONSE
    assert d.conv.turn is not None
