"""Decisions the core makes about each incoming message: the one ack, what is marked done,
the notices for unsupported, refused and recovered messages, and the prompt's go-ahead."""

from __future__ import annotations

from bridge.core.effects import (
    CancelTurn,
    MarkMessageDone,
    PostText,
    React,
    SendPrompt,
    StartTurn,
)
from bridge.core.inputs import (
    AccessRefused,
    Command,
    CommandName,
    MessageRecovered,
    SessionOpened,
    UnsupportedMessage,
    UserMessage,
)
from bridge.core.state import ExecState
from bridge.runtime.events import MessageChunk, PromptSent, StopReason, TurnEnded
from tests.unit.core.core_driver import ALICE, SID, Driver, keys, of_type

STOP = Command(CommandName.STOP, "c1", ALICE, "/stop")


def test_an_unsupported_message_is_acked_answered_politely_and_marked_done() -> None:
    out = Driver().feed(UnsupportedMessage("stk1", ALICE))
    assert out == [
        React("stk1"),
        PostText("message.unsupported", {}, "stk1", "stk1:unsupported"),
        MarkMessageDone("stk1"),
    ]


def test_a_refused_message_gets_one_line_and_no_ack() -> None:
    out = Driver().feed(AccessRefused("x1"))
    assert out == [PostText("access.refused", {}, "x1", "x1:refused")]


def test_a_text_is_acked_before_its_turn_starts_and_not_marked_done() -> None:
    out = Driver().message("m1", "fix it")
    assert out[0] == React("m1")
    assert of_type(out, StartTurn) == [StartTurn("m1", "fix it", None)]
    assert of_type(out, MarkMessageDone) == []


def test_a_redelivered_text_gets_no_second_ack() -> None:
    d = Driver()
    d.message("m1")
    assert of_type(d.message("m1"), React) == []


def test_a_typed_answer_to_a_question_is_marked_done() -> None:
    from bridge.runtime.events import QuestionAsked, QuestionKind

    d = Driver()
    d.start()
    d.feed(QuestionAsked(SID, "q1", QuestionKind.ELICITATION, "Which?", ()), at=1.0)
    out = d.message("m2", "main", at=2.0)
    assert of_type(out, MarkMessageDone) == [MarkMessageDone("m2")]
    assert of_type(out, StartTurn) == []


def test_a_recovered_message_says_resumed_then_runs_without_a_second_ack() -> None:
    d = Driver()
    out = d.feed(MessageRecovered(UserMessage("m1", ALICE, "again")))
    assert of_type(out, React) == []
    assert keys(out) == ["recovery.resumed"]
    assert of_type(out, StartTurn) == [StartTurn("m1", "again", None)]


def test_a_recovered_message_behind_another_says_it_waits() -> None:
    d = Driver()
    d.feed(MessageRecovered(UserMessage("m1", ALICE, "one")))
    out = d.feed(MessageRecovered(UserMessage("m2", ALICE, "two")))
    assert keys(out)[0] == "recovery.resumed_queued"
    assert [q.message_id for q in d.conv.queue] == ["m2"]


def test_session_opened_gives_the_go_ahead_for_the_current_turn() -> None:
    d = Driver()
    d.message("m1")
    assert d.feed(SessionOpened("m1", SID)) == [SendPrompt("m1", SID)]


def test_stop_before_the_session_opened_means_the_prompt_never_goes_out() -> None:
    d = Driver()
    d.message("m1")
    d.feed(STOP, at=1.0)
    out = d.feed(SessionOpened("m1", SID), at=2.0)
    assert of_type(out, SendPrompt) == []
    assert d.conv.state is ExecState.IDLE
    assert of_type(d.message("m2", at=3.0), StartTurn) == [StartTurn("m2", "hello", None)]


def test_a_stop_racing_the_prompt_onto_the_wire_cancels_it_once_it_is_there() -> None:
    d = Driver()
    d.message("m1")
    d.feed(SessionOpened("m1", SID))
    d.feed(STOP, at=1.0)  # before the runtime reported PromptSent
    out = d.feed(PromptSent(SID), at=1.1)
    assert of_type(out, CancelTurn) == [CancelTurn("m1", SID)]
    d.feed(MessageChunk(SID, "late"), at=1.2)
    d.feed(TurnEnded(SID, StopReason.CANCELLED), at=1.3)
    assert d.conv.state is ExecState.IDLE
