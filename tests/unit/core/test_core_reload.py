"""A session the agent (restarted since) could not reload before the prompt went out: the
core asks once for a session opened anew, and ends the turn if that fails too."""

from __future__ import annotations

from bridge.core.effects import Dropped, OpenSession, RecordTerminal, SendPrompt
from bridge.core.inputs import (
    Command,
    CommandName,
    SessionNotReloaded,
    SessionOpened,
)
from bridge.core.state import ExecState, Outcome
from tests.unit.core.core_driver import ALICE, SID, Driver, finals, keys, of_type


def opened() -> Driver:
    d = Driver()
    d.message("m1", at=0.0)
    assert of_type(d.feed(SessionOpened("m1", SID), at=0.1), SendPrompt)
    return d


def test_a_session_not_reloaded_is_opened_anew_once_and_nothing_is_said() -> None:
    d = opened()
    out = d.feed(SessionNotReloaded("m1", SID, "RuntimeUnavailable"), at=0.2)
    assert of_type(out, OpenSession) == [OpenSession("m1", None)]
    assert keys(out) == []
    assert d.conv.state is ExecState.WAITING_RESPONSE
    out = d.feed(SessionOpened("m1", "s2", fresh=True), at=0.3)
    assert keys(out) == ["session.fresh"]
    assert of_type(out, SendPrompt) == [SendPrompt("m1", "s2")]


def test_a_second_failure_ends_the_turn_as_a_failed_prompt_and_never_loops() -> None:
    d = opened()
    d.feed(SessionNotReloaded("m1", SID, "RuntimeUnavailable"), at=0.2)
    d.feed(SessionOpened("m1", SID), at=0.3)  # resumed the same one: still not loadable
    out = d.feed(SessionNotReloaded("m1", SID, "RuntimeUnavailable"), at=0.4)
    assert of_type(out, OpenSession) == []
    assert [(p.key, p.final) for p in finals(out)] == [("presence.unrecoverable", True)]
    assert of_type(out, RecordTerminal)[0].outcome is Outcome.FAILED
    assert d.conv.state is ExecState.IDLE


def test_a_turn_stopped_meanwhile_is_not_opened_again_and_lets_the_next_one_go() -> None:
    d = opened()
    assert keys(d.feed(Command(CommandName.STOP, "s1", ALICE, "/stop"), at=0.2)) == [
        "presence.stopped"
    ]
    out = d.feed(SessionNotReloaded("m1", SID, "RuntimeUnavailable"), at=0.3)
    assert of_type(out, OpenSession) == []
    assert keys(out) == []  # its one end signal went out already
    assert d.conv.state is ExecState.IDLE


def test_a_report_for_another_turn_is_dropped() -> None:
    d = opened()
    out = d.feed(SessionNotReloaded("m0", SID, "RuntimeUnavailable"), at=0.2)
    assert [e.reason for e in of_type(out, Dropped)] == ["not the current turn"]
    assert d.conv.state is ExecState.WAITING_RESPONSE
