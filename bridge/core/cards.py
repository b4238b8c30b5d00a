"""Clicks on approval and question cards, and answers to a pending question."""

from __future__ import annotations

from collections.abc import Mapping

from bridge.core.context import StepContext
from bridge.core.effects import (
    AnswerPermission,
    AnswerQuestion,
    CardStatus,
    RefuseClick,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.core.inputs import (
    ApprovalClicked,
    QuestionAnswered,
)
from bridge.core.lifecycle import resume
from bridge.core.state import Conversation


def may_answer(conv: Conversation, operator: str) -> bool:
    """The round's requester, or a configured approver, may answer for it or stop it."""
    return conv.turn is not None and (
        operator == conv.turn.requester or operator in conv.options.approvers
    )


def on_approval_clicked(ctx: StepContext, event: ApprovalClicked) -> None:
    conv = ctx.conv
    approval = next((a for a in conv.approvals if a.request_id == event.request_id), None)
    if approval is None:
        ctx.emit(RefuseClick(event.request_id, event.operator_open_id, "card.already_handled"))
        return
    if not may_answer(conv, event.operator_open_id):
        ctx.emit(RefuseClick(event.request_id, event.operator_open_id, "card.not_allowed"))
        return
    option = next((o for o in approval.options if o.option_id == event.option_id), None)
    if option is None:
        ctx.emit(RefuseClick(event.request_id, event.operator_open_id, "card.already_handled"))
        return
    ctx.emit(
        AnswerPermission(approval.request_id, option.option_id),
        UpdateApprovalCard(
            approval.card_key,
            approval.request_id,
            CardStatus.DECIDED,
            event.operator_open_id,
            option.option_id,
            option.name,
        ),
    )
    rest = tuple(a for a in conv.approvals if a is not approval)
    ctx.update(approvals=rest)
    if not rest:
        resume(ctx)


def on_question_answered(ctx: StepContext, event: QuestionAnswered) -> None:
    question = ctx.conv.question
    if question is None or question.request_id != event.request_id:
        ctx.emit(RefuseClick(event.request_id, event.operator_open_id, "card.already_handled"))
        return
    if not may_answer(ctx.conv, event.operator_open_id):
        ctx.emit(RefuseClick(event.request_id, event.operator_open_id, "card.not_allowed"))
        return
    answer_question(ctx, event.answers, by=event.operator_open_id)


def answer_question(ctx: StepContext, answers: Mapping[str, str], *, by: str) -> None:
    question = ctx.conv.question
    assert question is not None, "caller checks that a question is pending"
    ctx.emit(
        AnswerQuestion(question.request_id, dict(answers)),
        UpdateQuestionCard(
            question.card_key, question.request_id, CardStatus.ANSWERED, by, dict(answers)
        ),
    )
    ctx.update(question=None)
    resume(ctx)
