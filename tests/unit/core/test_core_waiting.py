"""Waiting for the user: approval cards, questions, reminders, timeouts."""

from __future__ import annotations

from bridge.core.delivery import Supersede
from bridge.core.effects import (
    AnswerCallback,
    AnswerPermission,
    AnswerQuestion,
    CancelTurn,
    CardStatus,
    PostApprovalCard,
    PostQuestion,
    PostText,
    RecordTerminal,
    RelayAgentText,
    StartTurn,
    Toast,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.core.inputs import ApprovalClicked, QuestionAnswered, UserMessage
from bridge.core.state import Conversation, Ending, ExecState, Options, Outcome
from bridge.core.text import Text
from bridge.runtime.events import (
    AnswerRewound,
    MessageChunk,
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    QuestionAsked,
    QuestionKind,
    QuestionOption,
    StopReason,
    ToolCallStarted,
    TurnEnded,
)
from tests.unit.core.core_driver import ALICE, SID, Driver, T, keys, of_type, posts

OPTIONS = (
    PermissionOption("allow", "Allow once", PermissionKind.ALLOW_ONCE),
    PermissionOption("always", "Always allow", PermissionKind.ALLOW_ALWAYS),
    PermissionOption("reject", "Reject", PermissionKind.REJECT_ONCE),
)
ASK = PermissionRequested(SID, "r1", "Run `rm -rf build`", OPTIONS, detail="rm -rf build")
QUESTION = QuestionAsked(
    SID, "q1", QuestionKind.ELICITATION, "Which branch?", (QuestionOption("main", "main"),)
)


def approval_pending(conv: Conversation | None = None) -> Driver:
    d = Driver(conv)
    d.start()
    d.ask(ASK, at=10.0)  # its card shown at once
    return d


def test_approval_shows_the_card_and_the_pause_line() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "I need to clean the build."), at=8.0)
    out = d.feed(ASK, at=10.0)
    kinds = [type(e).__name__ for e in out if type(e).__name__ not in {"SetTimer", "ClearTimer"}]
    assert kinds == ["RelayAgentText", "PostApprovalCard", "PostText"]
    card = of_type(out, PostApprovalCard)[0]
    assert (card.request_id, card.requester, card.reply_to, card.options) == (
        "r1",
        ALICE,
        "m1",
        OPTIONS,
    )
    assert of_type(out, PostText)[0].key == "presence.waiting_approval"
    assert of_type(out, RelayAgentText)[0].final is False
    assert d.conv.state is ExecState.WAITING_APPROVAL


def test_no_running_hint_or_heartbeat_while_waiting_for_approval() -> None:
    d = Driver()
    d.start()
    d.feed(ASK, at=1.0)  # before the first hint is due
    out = d.advance(899.0)
    assert keys(out) == []


def test_the_requester_decides_the_card_updates_and_the_turn_moves_on() -> None:
    d = approval_pending()
    out = d.feed(ApprovalClicked("r1", "allow", ALICE), at=20.0)
    assert of_type(out, AnswerPermission) == [AnswerPermission("r1", "allow")]
    decided = UpdateApprovalCard(
        "m1",
        "m1:card:r1",
        "r1",
        CardStatus.DECIDED,
        ASK.title,
        ASK.detail,
        by=ALICE,
        option=OPTIONS[0],
        patch=False,  # the callback answer shows the closed card
    )
    assert of_type(out, UpdateApprovalCard) == [decided]
    assert of_type(out, AnswerCallback) == [
        AnswerCallback("r1", ALICE, Toast.SUCCESS, "card.click.recorded", decided)
    ]
    assert d.conv.state is ExecState.STREAMING
    assert d.conv.approvals == ()
    # Silence is counted from the decision: the heartbeat comes a full window later.
    assert keys(d.advance(79.9)) == []
    assert keys(d.advance(80.0)) == ["presence.heartbeat"]


def test_a_configured_approver_may_decide() -> None:
    d = approval_pending(Conversation(options=Options(approvers=frozenset({"ou_boss"}))))
    out = d.feed(ApprovalClicked("r1", "reject", "ou_boss"), at=20.0)
    assert of_type(out, AnswerPermission) == [AnswerPermission("r1", "reject")]


def test_anyone_else_is_refused_and_nothing_changes() -> None:
    d = approval_pending()
    before = d.conv
    out = d.feed(ApprovalClicked("r1", "allow", "ou_mallory"), at=20.0)
    assert out == [AnswerCallback("r1", "ou_mallory", Toast.WARNING, "card.not_allowed")]
    assert d.conv == before


def test_a_click_on_a_handled_card_is_refused() -> None:
    d = approval_pending()
    d.feed(ApprovalClicked("r1", "allow", ALICE), at=20.0)
    out = d.feed(ApprovalClicked("r1", "reject", ALICE), at=21.0)
    assert out == [AnswerCallback("r1", ALICE, Toast.WARNING, "card.already_handled")]


def test_one_reminder_at_half_the_approval_timeout() -> None:
    d = approval_pending()
    assert keys(d.advance(909.9)) == []
    out = d.advance(910.0)
    assert [(p.key, p.params) for p in of_type(out, PostText)] == [
        ("presence.approval_reminder", {"remaining": Text("time.minutes", {"n": 15})})
    ]
    assert keys(d.advance(1809.9)) == []


def test_approval_timeout_expires_the_card_cancels_the_turn_and_tells_the_user() -> None:
    d = approval_pending()
    d.advance(1000.0)
    out = d.advance(1810.0)
    body = [e for e in out if type(e).__name__ not in {"SetTimer", "ClearTimer"}]
    assert body == [
        UpdateApprovalCard("m1", "m1:card:r1", "r1", CardStatus.EXPIRED, ASK.title, ASK.detail),
        AnswerPermission("r1", None),
        CancelTurn("m1", SID),
        PostText(
            "presence.approval_timed_out",
            {"waited": Text("time.minutes", {"n": 30})},
            "m1",
            "m1:end",
            final=True,
            turn_id="m1",
        ),
        RecordTerminal("m1", Outcome.TIMED_OUT, Ending.APPROVAL_TIMEOUT, "approval timed out"),
        Supersede(("m1:presence",)),
    ]
    # The runtime's cancelled ending lands later: logged, never posted.
    late = d.feed(TurnEnded(SID, StopReason.CANCELLED), at=1811.0)
    assert posts(late) == []
    assert d.conv.state is ExecState.IDLE


def test_a_message_during_approval_is_queued_with_a_pointer_to_the_card() -> None:
    d = approval_pending()
    out = d.message("m2", "go on", at=20.0)
    assert [(p.key, p.params, p.reply_to) for p in of_type(out, PostText)] == [
        ("presence.queued_approval", {"position": 1}, "m2")
    ]
    assert of_type(out, StartTurn) == []
    assert d.conv.state is ExecState.WAITING_APPROVAL


def test_a_second_request_gets_its_own_card_but_no_second_pause_line() -> None:
    d = approval_pending()
    out = d.feed(PermissionRequested(SID, "r2", "Write file", OPTIONS), at=11.0)
    assert len(of_type(out, PostApprovalCard)) == 1
    assert keys(out) == []
    d.feed(ApprovalClicked("r1", "allow", ALICE), at=12.0)
    assert d.conv.state is ExecState.WAITING_APPROVAL
    d.feed(ApprovalClicked("r2", "allow", ALICE), at=13.0)
    assert d.conv.state is ExecState.STREAMING


def question_pending() -> Driver:
    d = Driver()
    d.start()
    d.ask(QUESTION, at=10.0)
    return d


def test_a_question_shows_the_text_with_buttons_and_the_pause_line() -> None:
    d = Driver()
    d.start()
    out = d.feed(QUESTION, at=10.0)
    assert of_type(out, PostQuestion) == [
        PostQuestion(
            "m1",
            "m1:question:q1",
            "q1",
            "Which branch?",
            QUESTION.options,
            ALICE,
            "m1",
            "m1:question:q1",
        )
    ]
    assert keys(out) == ["presence.waiting_reply"]
    assert d.conv.state is ExecState.WAITING_REPLY
    assert keys(d.advance(899.0)) == []  # no heartbeat while waiting for the user


def test_the_requesters_next_message_is_the_answer_not_a_new_turn() -> None:
    d = question_pending()
    out = d.message("m2", "release-1.2", at=20.0)
    assert of_type(out, AnswerQuestion) == [AnswerQuestion("q1", {"answer": "release-1.2"})]
    assert of_type(out, UpdateQuestionCard)[0].status is CardStatus.ANSWERED
    assert of_type(out, StartTurn) == []
    assert posts(out) == []
    assert d.conv.state is ExecState.STREAMING
    assert d.conv.queue == ()


def test_someone_elses_message_while_waiting_for_a_reply_is_queued() -> None:
    d = question_pending()
    out = d.feed(UserMessage("m2", "ou_bob", "hi"), at=20.0)
    assert keys(out) == ["presence.queued"]
    assert d.conv.state is ExecState.WAITING_REPLY


def test_a_button_answers_the_question() -> None:
    d = question_pending()
    out = d.feed(QuestionAnswered("q1", "main", ALICE), at=20.0)
    assert of_type(out, AnswerQuestion) == [AnswerQuestion("q1", {"answer": "main"})]
    assert d.conv.state is ExecState.STREAMING
    d.feed(ToolCallStarted(SID, "t1", "checkout"), at=21.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=22.0)
    assert [p.key for p in of_type(out, PostText)] == ["presence.ended_empty"]


def test_an_unanswered_question_is_reminded_once_then_times_out() -> None:
    d = question_pending()
    assert keys(d.advance(910.0)) == ["presence.reply_reminder"]
    out = d.advance(1810.0)
    assert of_type(out, AnswerQuestion) == [AnswerQuestion("q1", None)]
    assert of_type(out, UpdateQuestionCard)[0].status is CardStatus.EXPIRED
    assert of_type(out, CancelTurn) == [CancelTurn("m1", SID)]
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [
        ("presence.reply_timed_out", True)
    ]


def test_a_command_too_long_for_the_card_follows_in_full_as_a_message() -> None:
    from bridge.core.presence import CARD_DETAIL_LIMIT

    command = "python - <<EOF\n" + "print(1)\n" * CARD_DETAIL_LIMIT
    d = Driver()
    d.start()
    out = d.feed(PermissionRequested(SID, "r1", "Run a script", OPTIONS, detail=command), at=1.0)
    assert len(of_type(out, PostApprovalCard)) == 1
    full = [p for p in of_type(out, PostText) if p.key == "card.approval.full_command"]
    assert [p.params for p in full] == [{"length": len(command), "command": command}]
    assert keys(out) == ["card.approval.full_command", "presence.waiting_approval"]


def test_a_card_feishu_refused_cancels_the_request_and_ends_the_round() -> None:
    from bridge.core.inputs import CardNotShown

    d = approval_pending()
    out = d.feed(CardNotShown("m1", "r1"), at=20.0)
    assert of_type(out, AnswerPermission) == [AnswerPermission("r1", None)]
    assert of_type(out, CancelTurn) == [CancelTurn("m1", SID)]
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [("presence.card_failed", True)]
    assert of_type(out, RecordTerminal)[0].outcome is Outcome.FAILED
    assert d.conv.approvals == ()


# --- a refused step that ends the round ---------------------------------------------------------


def test_a_round_the_agent_ends_after_a_refusal_says_so() -> None:
    """Found with the real agents: Codex answers a refused file change by ending the round
    `cancelled` (it has no "refuse and go on" for a write), Qwen Code by an empty end_turn.
    Neither is a /stop, nor a round that simply had nothing to say."""
    d = approval_pending()
    d.feed(ApprovalClicked("r1", "reject", ALICE), at=20.0)
    out = d.feed(TurnEnded(SID, StopReason.CANCELLED), at=21.0)
    assert keys(out) == ["presence.ended_rejected"]
    assert d.conv.last_terminal is not None
    assert d.conv.last_terminal.outcome is Outcome.CANCELLED
    assert d.conv.last_terminal.ending is Ending.REFUSED  # its typed ending, for operators

    d = approval_pending()
    d.feed(ApprovalClicked("r1", "reject", ALICE), at=20.0)
    assert keys(d.feed(TurnEnded(SID, StopReason.END_TURN), at=21.0)) == ["presence.ended_rejected"]


def test_after_a_refusal_an_answer_or_a_stop_is_what_the_user_sees() -> None:
    d = approval_pending()
    d.feed(ApprovalClicked("r1", "reject", ALICE), at=20.0)
    d.feed(MessageChunk(SID, "Understood, I left the build alone."), at=21.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=22.0)
    assert keys(out) == ["<reply>"]  # the agent's answer ends the round
    assert [str(p.text) for p in of_type(out, RelayAgentText)] == [
        "Understood, I left the build alone."
    ]

    d = approval_pending()
    d.feed(ApprovalClicked("r1", "allow", ALICE), at=20.0)
    assert keys(d.feed(TurnEnded(SID, StopReason.CANCELLED), at=21.0)) == ["presence.stopped"]
    # Nobody stopped it and nothing was refused: the agent gave the prompt up on its own.
    assert d.conv.last_terminal is not None
    assert d.conv.last_terminal.ending is Ending.AGENT_ERROR


def test_a_run_sent_again_withdraws_what_the_first_run_asked_and_runs_on() -> None:
    """Seed 143241: the first run of a prompt (answered by a cancelled turn's leftover,
    then sent again on a restarted agent) had asked an approval; its agent is gone, so its
    card says the round began again, no answer is sent for it, and no timeout runs for it:
    the run sent again asks anew, and only that card waits."""
    d = Driver()
    d.start()
    d.ask(PermissionRequested(SID, "r1", "Deploy", OPTIONS), at=1.0)
    assert d.conv.state is ExecState.WAITING_APPROVAL
    out = d.feed(AnswerRewound(SID), at=1.5)
    (closed,) = of_type(out, UpdateApprovalCard)
    assert (closed.request_id, closed.status) == ("r1", CardStatus.WITHDRAWN)
    assert of_type(out, AnswerPermission) == []
    assert d.conv.approvals == ()
    assert d.conv.state is ExecState.STREAMING
    d.ask(PermissionRequested(SID, "r2", "Deploy", OPTIONS), at=2.0)
    assert [a.request_id for a in d.conv.approvals] == ["r2"]
    out = d.advance(1.5 + T.approval_timeout)  # r1's timeout, had it run
    assert of_type(out, UpdateApprovalCard) == []
    out = d.advance(2.0 + T.approval_timeout)
    assert [(c.request_id, c.status) for c in of_type(out, UpdateApprovalCard)] == [
        ("r2", CardStatus.EXPIRED)
    ]
