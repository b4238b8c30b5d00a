"""The reaction on a user's message follows its round (issue 45): received (the ack),
waiting while the round waits on the user, received again once answered, then done,
stopped or fault at its end, after its end signal. Off: the ack alone."""

from __future__ import annotations

from bridge.core.delivery import Lane
from bridge.core.effects import Effect, PostApprovalCard, React, RecordTerminal, SetReaction
from bridge.core.inputs import (
    ApprovalClicked,
    Command,
    CommandName,
    MessageRecalled,
    RuntimeUnavailableAtStart,
    UserMessage,
)
from bridge.core.reactions import end_state
from bridge.core.state import Attachment, Conversation, Ending, Options, Outcome, Reaction
from bridge.runtime.events import (
    MessageChunk,
    PromptSent,
    QuestionAsked,
    QuestionKind,
    RuntimeExited,
    RuntimeFailed,
    StopReason,
    TurnEnded,
)
from tests.unit.core.core_driver import ALICE, SID, Driver, finals, of_type
from tests.unit.core.test_core_waiting import ASK

ON = Conversation(options=Options(state_reactions=True))
R, W, DONE, STOPPED, FAULT = (
    Reaction.RECEIVED,
    Reaction.WAITING,
    Reaction.DONE,
    Reaction.STOPPED,
    Reaction.FAULT,
)


def states(effects: list[Effect]) -> list[tuple[str, Reaction]]:
    return [(e.message_id, e.state) for e in of_type(effects, SetReaction)]


def test_a_round_that_answers_ends_done_after_its_answer() -> None:
    d = Driver(ON)
    out = d.start()
    assert of_type(out, React) == [React("m1")]
    assert states(out) == []
    d.feed(MessageChunk(SID, "Hi."), at=1.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    assert states(out) == [("m1", DONE)]
    # After the answer and the round's end record: the answer never waits for it.
    reaction = of_type(out, SetReaction)[0]
    assert out.index(finals(out)[0]) < out.index(of_type(out, RecordTerminal)[0])
    assert out.index(of_type(out, RecordTerminal)[0]) < out.index(reaction)
    assert reaction.terms is not None
    assert reaction.terms.lane is Lane.REFRESH
    assert states(d.advance(1000.0)) == []


def test_waiting_on_an_approval_then_working_again_then_done() -> None:
    d = Driver(ON)
    d.start()
    out = d.ask(ASK, at=10.0)
    assert states(out) == [("m1", W)]
    card = of_type(out, PostApprovalCard)[0]
    assert out.index(card) < out.index(of_type(out, SetReaction)[0])  # once the card is out
    out = d.feed(ApprovalClicked("r1", "allow", ALICE), at=20.0)
    assert states(out) == [("m1", R)]
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=21.0)
    assert states(out) == [("m1", DONE)]
    assert [s for _, s in states(d.effects)] == [W, R, DONE]


def test_an_approval_never_answered_ends_stopped() -> None:
    d = Driver(ON)
    d.start()
    d.ask(ASK, at=10.0)
    out = d.advance(10.0 + 1800.0)
    assert states(out) == [("m1", STOPPED)]


def test_stop_ends_stopped_when_the_agent_confirms() -> None:
    d = Driver(ON)
    d.start()
    out = d.feed(Command(CommandName.STOP, "m2", ALICE), at=1.0)
    assert of_type(out, React) == [React("m2")]
    assert states(out) == []
    out = d.feed(TurnEnded(SID, StopReason.CANCELLED), at=2.0)
    assert states(out) == [("m1", STOPPED)]  # the /stop itself keeps its ack


def test_a_crash_and_a_failure_end_in_a_fault() -> None:
    d = Driver(ON)
    d.start()
    out = d.feed(RuntimeExited("", returncode=1, restarting=False), at=2.0)
    assert states(out) == [("m1", FAULT)]
    d = Driver(ON)
    d.start()
    assert states(d.feed(RuntimeFailed(SID, "internal error"), at=2.0)) == [("m1", FAULT)]


def test_a_runtime_unavailable_at_start_is_a_fault() -> None:
    d = Driver(ON)
    d.message("m1")
    out = d.feed(RuntimeUnavailableAtStart("m1", "cannot start"), at=1.0)
    assert states(out) == [("m1", FAULT)]


def test_a_queued_message_keeps_its_ack_until_its_own_round_ends() -> None:
    d = Driver(ON)
    d.start()
    assert states(d.message("m2", "next", at=1.0)) == []
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    assert states(out) == [("m1", DONE)]  # m2's round starts now: still received
    d.feed(PromptSent(SID), at=2.5)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=3.0)
    assert states(out) == [("m2", DONE)]


def test_the_typed_reply_to_a_question_is_part_of_its_round() -> None:
    d = Driver(ON)
    d.start()
    ask = QuestionAsked(SID, "q1", QuestionKind.ELICITATION, "Which branch?", ())
    assert states(d.ask(ask, at=1.0)) == [("m1", W)]
    out = d.feed(UserMessage("m2", ALICE, "main"), at=2.0)
    assert of_type(out, React) == [React("m2")]
    assert states(out) == [("m1", R), ("m2", R)]
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=3.0)
    assert states(out) == [("m1", DONE), ("m2", DONE)]


def test_an_image_held_for_the_text_joins_its_round() -> None:
    d = Driver(ON)
    image = Attachment("m0", "image", "img_v3_b", "image")
    assert states(d.feed(UserMessage("m0", ALICE, "", (image,)), at=0.0)) == []  # held
    d.message("m1", "what is this?", at=1.0)
    d.feed(PromptSent(SID), at=1.5)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    assert states(out) == [("m1", DONE), ("m0", DONE)]


def test_a_recalled_message_is_left_alone() -> None:
    d = Driver(ON)
    d.start()
    out = d.feed(MessageRecalled("m1"), at=1.0)
    assert states(out) == []  # the message is gone
    assert states(d.advance(1000.0)) == []


def test_a_non_final_stop_reason_shows_its_end_when_the_grace_ends() -> None:
    d = Driver(ON)
    d.start()
    assert states(d.feed(TurnEnded(SID, StopReason.MAX_TOKENS), at=1.0)) == []
    assert states(d.advance(1.0 + 3.0)) == [("m1", DONE)]


def test_commands_keep_their_ack() -> None:
    d = Driver(ON)
    out = d.feed(Command(CommandName.HELP, "m1", ALICE), at=0.0)
    assert of_type(out, React) == [React("m1")]
    assert states(out) == []


def test_off_by_default_the_ack_alone() -> None:
    d = Driver()
    d.start()
    d.ask(ASK, at=1.0)
    d.feed(ApprovalClicked("r1", "allow", ALICE), at=2.0)
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=3.0)
    assert of_type(d.effects, React) == [React("m1")]
    assert states(d.effects) == []


def test_every_ending_has_its_state() -> None:
    assert end_state(Outcome.COMPLETED, Ending.COMPLETED) is DONE
    assert end_state(Outcome.COMPLETED, Ending.REFUSED) is DONE  # the user chose it so
    for ending in (Ending.USER_STOP, Ending.RECALL, Ending.CLOSED):
        assert end_state(Outcome.CANCELLED, ending) is STOPPED
    # Nobody answered: the round was stopped for want of a person, not by a fault.
    for ending in (Ending.APPROVAL_TIMEOUT, Ending.REPLY_TIMEOUT):
        assert end_state(Outcome.TIMED_OUT, ending) is STOPPED
    # The agent gave the prompt up as cancelled: its line says stopped.
    assert end_state(Outcome.CANCELLED, Ending.AGENT_ERROR) is STOPPED
    assert end_state(Outcome.FAILED, Ending.AGENT_ERROR) is FAULT
    assert end_state(Outcome.TIMED_OUT, Ending.DEADLINE) is FAULT
    faults = (Ending.AGENT_EXIT, Ending.FEISHU_REFUSED, Ending.VOICE)
    for ending in faults:
        assert end_state(Outcome.FAILED, ending) is FAULT
    assert end_state(Outcome.INTERRUPTED, Ending.BRIDGE_SHUTDOWN) is FAULT
