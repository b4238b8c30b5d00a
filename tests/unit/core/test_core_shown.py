"""A deadline the user is given starts when they are shown it: an approval's or a question's
reminder and timeout count from the moment Feishu took its card (`Posted`), not from the
agent's request; a card still waiting for its turn (the call budget, an outage) is never
timed out unseen, and one Feishu never took ends the round saying so."""

from __future__ import annotations

from dataclasses import replace

from bridge.core.effects import (
    AnswerPermission,
    AnswerQuestion,
    CancelTurn,
    CardStatus,
    Dropped,
    PostApprovalCard,
    PostQuestion,
    PostText,
    RecordTerminal,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.core.inputs import CardNotShown, Command, CommandName, CoreEvent, Posted
from bridge.core.snapshot import snapshot
from bridge.core.state import Ending, ExecState, Outcome
from bridge.core.text import Text
from bridge.runtime.events import PermissionRequested
from tests.unit.core.core_driver import ALICE, SID, Driver, T, keys, of_type
from tests.unit.core.test_core_waiting import ASK, OPTIONS, QUESTION

TIMINGS = replace(T, approval_timeout=30.0)


def asked(event: CoreEvent = ASK) -> tuple[Driver, PostApprovalCard | PostQuestion]:
    """The agent asks at 0 s; the card waits for its turn to be posted."""
    d = Driver(timings=TIMINGS)
    d.start()
    out = d.feed(event, at=0.0)
    return d, next(e for e in out if isinstance(e, PostApprovalCard | PostQuestion))


def test_the_timeout_counts_from_the_card_shown_not_from_the_request() -> None:
    d, card = asked()
    assert keys(d.advance(39.9)) == []  # unseen: neither a reminder nor a timeout
    assert d.conv.state is ExecState.WAITING_APPROVAL
    d.shown([card], at=40.0)
    assert keys(d.advance(69.9)) == ["presence.approval_reminder"]  # at 55 s, see below
    out = d.advance(70.0)
    assert [(p.key, p.params) for p in of_type(out, PostText)] == [
        ("presence.approval_timed_out", {"waited": Text("time.seconds", {"n": 30})})
    ]
    assert of_type(out, UpdateApprovalCard)[0].status is CardStatus.EXPIRED
    assert of_type(out, AnswerPermission) == [AnswerPermission("r1", None)]
    assert of_type(out, RecordTerminal)[0].ending is Ending.APPROVAL_TIMEOUT


def test_the_reminder_comes_at_half_the_timeout_from_the_card_shown() -> None:
    d, card = asked()
    d.shown([card], at=40.0)
    assert keys(d.advance(54.9)) == []
    out = d.advance(55.0)
    assert [(p.key, p.params) for p in of_type(out, PostText)] == [
        ("presence.approval_reminder", {"remaining": Text("time.seconds", {"n": 15})})
    ]


def test_a_question_waits_from_its_card_shown_too() -> None:
    d, card = asked(QUESTION)
    assert keys(d.advance(100.0)) == []
    d.shown([card], at=100.0)
    out = d.advance(115.0)
    assert [(p.key, p.params) for p in of_type(out, PostText)] == [
        ("presence.reply_reminder", {"remaining": Text("time.seconds", {"n": 15})})
    ]
    assert keys(d.advance(129.9)) == []
    out = d.advance(130.0)
    assert [(p.key, p.params) for p in of_type(out, PostText)] == [
        ("presence.reply_timed_out", {"waited": Text("time.seconds", {"n": 30})})
    ]
    assert of_type(out, AnswerQuestion) == [AnswerQuestion("q1", None)]


def test_a_card_never_shown_is_never_timed_out() -> None:
    d, _ = asked()
    assert keys(d.advance(10 * TIMINGS.approval_timeout)) == []
    assert d.conv.state is ExecState.WAITING_APPROVAL
    assert dict(d.conv.timers) == {}  # nothing runs for a card nobody saw


def test_a_card_feishu_never_took_ends_the_round_saying_it_could_not_be_shown() -> None:
    d, _ = asked()
    d.advance(3600.0)  # Feishu away for its whole de-duplication window
    out = d.feed(CardNotShown("m1", "r1", given_up=True), at=3600.0)
    assert of_type(out, AnswerPermission) == [AnswerPermission("r1", None)]  # nothing runs
    assert of_type(out, CancelTurn) == [CancelTurn("m1", SID)]
    assert of_type(out, UpdateApprovalCard)[0].status is CardStatus.CANCELLED
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [("presence.card_failed", True)]
    (terminal,) = of_type(out, RecordTerminal)
    assert (terminal.outcome, terminal.ending, terminal.detail) == (
        Outcome.FAILED,
        Ending.FEISHU_REFUSED,
        "Feishu never took the card",
    )


def test_a_typed_reply_before_the_question_card_is_shown_answers_it() -> None:
    d, card = asked(QUESTION)
    out = d.message("m2", "release-1.2", at=5.0)
    assert of_type(out, AnswerQuestion) == [AnswerQuestion("q1", {"answer": "release-1.2"})]
    closed = of_type(out, UpdateQuestionCard)
    assert [(c.status, c.message_id) for c in closed] == [(CardStatus.ANSWERED, None)]
    assert d.conv.state is ExecState.STREAMING
    late = d.feed(Posted(card.idempotency_key, "m1", ("om_q",)), at=6.0)
    assert [e.reason for e in of_type(late, Dropped)] == ["card no longer open"]
    assert "reply_timeout" not in dict(d.conv.timers)  # its wait was over before it began


def test_a_stop_before_the_card_is_shown_ends_the_round_as_always() -> None:
    d, _ = asked()
    out = d.feed(Command(CommandName.STOP, "s1", ALICE, "/stop"), at=20.0)
    assert of_type(out, AnswerPermission) == [AnswerPermission("r1", None)]
    assert of_type(out, UpdateApprovalCard)[0].status is CardStatus.CANCELLED
    assert of_type(out, CancelTurn) == [CancelTurn("m1", SID)]


def test_a_second_card_still_waiting_does_not_move_the_first_ones_timeout() -> None:
    d, first = asked()
    d.shown([first], at=10.0)
    second = PermissionRequested(SID, "r2", "Write file", OPTIONS)
    d.feed(second, at=12.0)  # its card waits behind the budget
    assert keys(d.advance(39.9)) == ["presence.approval_reminder"]
    assert keys(d.advance(40.0)) == ["presence.approval_timed_out"]


def test_a_second_card_shown_later_is_reminded_from_its_own_showing() -> None:
    d, first = asked()
    d.shown([first], at=10.0)
    (second,) = of_type(
        d.feed(PermissionRequested(SID, "r2", "Write file", OPTIONS), at=12.0), PostApprovalCard
    )
    d.shown([second], at=24.0)
    assert keys(d.advance(25.0)) == ["presence.approval_reminder"]  # the first, at 25 s
    assert [a.reminder_sent for a in d.conv.approvals] == [True, False]
    assert keys(d.advance(38.9)) == []
    assert keys(d.advance(39.0)) == ["presence.approval_reminder"]  # the second, at 39 s


def test_a_question_card_never_shown_says_the_question_could_not_be_shown() -> None:
    d, _ = asked(QUESTION)
    out = d.feed(CardNotShown("m1", "q1", given_up=True), at=3600.0)
    assert of_type(out, AnswerQuestion) == [AnswerQuestion("q1", None)]
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [
        ("presence.question_card_failed", True)
    ]


def test_the_operator_sees_whether_the_card_is_shown_yet() -> None:
    d, card = asked()
    assert _shown_at(d) is None
    d.shown([card], at=40.0)
    assert _shown_at(d) == 40.0


def _shown_at(d: Driver) -> object:
    pending = snapshot(d.conv)["pending_approval"]
    assert isinstance(pending, dict)
    return pending["shown_at"]
