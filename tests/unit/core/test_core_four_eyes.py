"""BRIDGE_REQUESTER_MAY_APPROVE=false: a requester may not approve their own agent's request;
only the configured approvers may, and the requester is told who can."""

from __future__ import annotations

from bridge.core.clicks import may_answer
from bridge.core.effects import AnswerCallback, AnswerPermission, AnswerQuestion, CancelTurn, Toast
from bridge.core.inputs import ApprovalClicked, Command, CommandName, QuestionAnswered
from bridge.core.state import Conversation, Options
from tests.unit.core.core_driver import ALICE, Driver, of_type
from tests.unit.core.test_core_waiting import ASK, QUESTION

FOUR_EYES = Options(approvers=frozenset({"ou_boss", "ou_audit"}), requester_may_approve=False)


def pending(ask: object = ASK, options: Options = FOUR_EYES) -> Driver:
    d = Driver(Conversation(options=options))
    d.start()
    d.feed(ask, at=10.0)
    return d


def test_the_requester_is_refused_and_told_who_may_approve() -> None:
    d = pending()
    before = d.conv
    out = d.feed(ApprovalClicked("r1", "allow", ALICE), at=20.0)
    assert out == [
        AnswerCallback(
            "r1",
            ALICE,
            Toast.WARNING,
            "card.approvers_only",
            params={"approvers": "ou_audit, ou_boss"},
        )
    ]
    assert d.conv == before  # still waiting: nothing was answered


def test_an_approver_still_decides() -> None:
    d = pending()
    out = d.feed(ApprovalClicked("r1", "allow", "ou_audit"), at=20.0)
    assert of_type(out, AnswerPermission) == [AnswerPermission("r1", "allow")]


def test_a_bystander_gets_the_ordinary_refusal() -> None:
    d = pending()
    out = d.feed(ApprovalClicked("r1", "allow", "ou_mallory"), at=20.0)
    assert out == [AnswerCallback("r1", "ou_mallory", Toast.WARNING, "card.not_allowed")]


def test_questions_and_stop_stay_the_requesters() -> None:
    d = pending(QUESTION)
    out = d.feed(QuestionAnswered("q1", "main", ALICE), at=20.0)
    assert of_type(out, AnswerQuestion) == [AnswerQuestion("q1", {"answer": "main"})]
    d = pending()
    out = d.feed(Command(CommandName.STOP, "c1", ALICE), at=20.0)
    assert of_type(out, CancelTurn) != []


def test_may_answer_by_default_admits_the_requester_for_approvals() -> None:
    d = pending(options=Options())
    assert may_answer(d.conv, ALICE, approval=True)
    assert not may_answer(pending().conv, ALICE, approval=True)
    assert may_answer(pending().conv, ALICE)  # stop, questions
