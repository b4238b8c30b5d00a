"""Which message an approval or question card is: told by `Posted`, kept on the request,
and carried on the effect that closes the card (the executor keeps nothing of it)."""

from __future__ import annotations

from bridge.core.effects import (
    Dropped,
    PostApprovalCard,
    PostQuestion,
    SetTimer,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.core.inputs import Command, CommandName, Posted, UserMessage
from bridge.runtime.events import (
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    QuestionAsked,
    QuestionKind,
    QuestionOption,
)
from tests.unit.core.core_driver import ALICE, SID, Driver, of_type

OPTIONS = (PermissionOption("allow", "Allow once", PermissionKind.ALLOW_ONCE),)
ASK = PermissionRequested(SID, "r1", "Deploy", OPTIONS)
QUESTION = QuestionAsked(
    SID, "q1", QuestionKind.ELICITATION, "Which branch?", (QuestionOption("main", "main"),)
)
STOP = Command(CommandName.STOP, "s1", ALICE, "/stop")


def test_an_approval_card_closed_after_feishu_took_it_carries_its_message() -> None:
    d = Driver()
    d.start()
    (card,) = of_type(d.feed(ASK, at=1.0), PostApprovalCard)
    posted = d.feed(Posted(card.idempotency_key, "m1", ("om_card",)), at=1.5)
    assert [type(e) for e in posted] == [SetTimer, SetTimer]  # its wait starts: nothing else
    (closed,) = of_type(d.feed(STOP, at=2.0), UpdateApprovalCard)
    assert closed.message_id == "om_card"


def test_a_card_closed_before_feishu_took_it_carries_none_and_its_late_post_is_dropped() -> None:
    d = Driver()
    d.start()
    (card,) = of_type(d.feed(ASK, at=1.0), PostApprovalCard)
    (closed,) = of_type(d.feed(STOP, at=2.0), UpdateApprovalCard)
    assert closed.message_id is None  # the executor finds it under the card's key
    late = d.feed(Posted(card.idempotency_key, "m1", ("om_card",)), at=3.0)
    assert [e.reason for e in of_type(late, Dropped)] == ["card no longer open"]


def test_a_question_answered_by_a_typed_reply_closes_its_card_by_its_message() -> None:
    d = Driver()
    d.start()
    (card,) = of_type(d.feed(QUESTION, at=1.0), PostQuestion)
    d.feed(Posted(card.idempotency_key, "m1", ("om_q",)), at=1.5)
    (closed,) = of_type(d.feed(UserMessage("m2", ALICE, "main"), at=2.0), UpdateQuestionCard)
    assert closed.message_id == "om_q"
