"""Clicks on approval and question cards, and answers to a pending question.

A click is answered in its own callback (Feishu waits at most 3 s): the core returns an
`AnswerCallback` with the toast and, when the click closed the card, the closed card.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from bridge.core.context import StepContext
from bridge.core.effects import (
    AnswerCallback,
    AnswerPermission,
    AnswerQuestion,
    CardStatus,
    Toast,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.core.inputs import (
    ApprovalClicked,
    QuestionAnswered,
)
from bridge.core.lifecycle import resume
from bridge.core.state import Conversation
from bridge.runtime.events import PermissionKind


class Unheard(StrEnum):
    """Why a card click reached no live request of a conversation."""

    NOT_OURS = "not_ours"  # its value is no card of this bridge
    GONE = "gone"  # answered before, or cut by a restart
    UNREACHABLE = "unreachable"  # several instances: the card's owner could not be asked


def unheard_click(why: Unheard) -> tuple[Toast, str]:
    """The toast (kind, text key) for a click no conversation took: nothing was decided."""
    if why is Unheard.UNREACHABLE:
        return Toast.WARNING, "card.try_again"  # maybe the owner: click again
    if why is Unheard.NOT_OURS:
        return Toast.INFO, "card.click.unknown"
    return Toast.INFO, "card.already_handled"


def may_answer(conv: Conversation, operator: str, *, approval: bool = False) -> bool:
    """The round's requester, or a configured approver, may answer for it or stop it; an
    approval card only an approver when the requester may not approve their own requests."""
    if conv.turn is None:
        return False
    if operator in conv.options.approvers:
        return True
    own = operator == conv.turn.requester
    return own and (conv.options.requester_may_approve or not approval)


def _refuse(ctx: StepContext, request_id: str, operator: str, key: str) -> None:
    ctx.emit(AnswerCallback(request_id, operator, Toast.WARNING, key))


def on_approval_clicked(ctx: StepContext, event: ApprovalClicked) -> None:
    conv = ctx.conv
    approval = next((a for a in conv.approvals if a.request_id == event.request_id), None)
    if approval is None:
        _refuse(ctx, event.request_id, event.operator_open_id, "card.already_handled")
        return
    if not may_answer(conv, event.operator_open_id, approval=True):
        if event.operator_open_id == ctx.turn.requester:  # four eyes: name who can
            approvers = ", ".join(sorted(conv.options.approvers))
            ctx.emit(
                AnswerCallback(
                    event.request_id,
                    event.operator_open_id,
                    Toast.WARNING,
                    "card.approvers_only",
                    params={"approvers": approvers},
                )
            )
        else:
            _refuse(ctx, event.request_id, event.operator_open_id, "card.not_allowed")
        return
    option = next((o for o in approval.options if o.option_id == event.option_id), None)
    if option is None:
        _refuse(ctx, event.request_id, event.operator_open_id, "card.already_handled")
        return
    closed = UpdateApprovalCard(
        ctx.turn.turn_id,
        approval.card_key,
        approval.request_id,
        CardStatus.DECIDED,
        approval.title,
        approval.detail,
        by=event.operator_open_id,
        option=option,
        patch=False,
    )
    ctx.emit(
        AnswerCallback(
            approval.request_id,
            event.operator_open_id,
            Toast.SUCCESS,
            "card.click.recorded",
            closed,
        ),
        AnswerPermission(approval.request_id, option.option_id),
        closed,
    )
    rest = tuple(a for a in conv.approvals if a is not approval)
    ctx.update(approvals=rest)
    if option.kind in (PermissionKind.REJECT_ONCE, PermissionKind.REJECT_ALWAYS):
        ctx.update_turn(rejected=True)
    if not rest:
        resume(ctx)


def on_question_answered(ctx: StepContext, event: QuestionAnswered) -> None:
    question = ctx.conv.question
    if question is None or question.request_id != event.request_id:
        _refuse(ctx, event.request_id, event.operator_open_id, "card.already_handled")
        return
    if not may_answer(ctx.conv, event.operator_open_id):
        _refuse(ctx, event.request_id, event.operator_open_id, "card.not_allowed")
        return
    closed = answer_question(
        ctx, {question.answer_key: event.choice}, by=event.operator_open_id, patch=False
    )
    toast = Toast.SUCCESS
    ctx.emit(
        AnswerCallback(
            question.request_id, event.operator_open_id, toast, "card.click.recorded", closed
        )
    )


def answer_question(
    ctx: StepContext, answers: Mapping[str, str], *, by: str, patch: bool = True
) -> UpdateQuestionCard:
    question = ctx.conv.question
    assert question is not None, "caller checks that a question is pending"
    closed = UpdateQuestionCard(
        ctx.turn.turn_id,
        question.card_key,
        question.request_id,
        CardStatus.ANSWERED,
        question.text,
        by,
        dict(answers),
        patch=patch,
        message_id=question.message_id,
    )
    ctx.emit(AnswerQuestion(question.request_id, dict(answers)), closed)
    ctx.update(question=None)
    resume(ctx)
    return closed
