"""Which card is which: the cards a conversation posted, and how each looks once closed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.core.effects import (
    CardStatus,
    PostApprovalCard,
    PostQuestion,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.feishu.cards import (
    Choice,
    approval_card,
    approval_closed_card,
    question_card,
    question_closed_card,
)
from bridge.i18n import Translator
from bridge.runtime.events import PermissionKind, PermissionOption
from bridge.store.port import ApprovalStatus

_CLOSED_KEYS = {
    CardStatus.EXPIRED: "expired",
    CardStatus.CANCELLED: "cancelled",
    CardStatus.DECIDED: "decided",
    CardStatus.ANSWERED: "answered",
}


def mention(open_id: str | None) -> str:
    return f"<at id={open_id}></at>" if open_id else ""


@dataclass
class _Posted:
    request: PostApprovalCard | PostQuestion
    message_id: str
    closed_by_callback: bool = False


class CardBook:
    def __init__(self, translator: Translator) -> None:
        self._t = translator
        self._cards: dict[str, _Posted] = {}

    def open_card(self, work: PostApprovalCard | PostQuestion) -> dict[str, Any]:
        if isinstance(work, PostApprovalCard):
            choices = [
                Choice(o.option_id, self._option_label(o), o.kind.value) for o in work.options
            ]
            return approval_card(
                self._t,
                request_id=work.request_id,
                title=work.title,
                detail=work.detail,
                choices=choices,
            )
        choices = [Choice(o.value, o.label) for o in work.options]
        return question_card(self._t, request_id=work.request_id, text=work.text, choices=choices)

    def remember(self, work: PostApprovalCard | PostQuestion, message_id: str) -> None:
        self._cards[work.card_key] = _Posted(work, message_id)

    def message_id(self, card_key: str) -> str | None:
        posted = self._cards.get(card_key)
        return posted.message_id if posted else None

    def mark_closed_by_callback(self, card_key: str) -> None:
        posted = self._cards.get(card_key)
        if posted is not None:
            posted.closed_by_callback = True

    def shown_by_callback(self, work: UpdateApprovalCard | UpdateQuestionCard) -> bool:
        posted = self._cards.get(work.card_key)
        return posted is not None and posted.closed_by_callback

    def closed_card(self, work: UpdateApprovalCard | UpdateQuestionCard) -> dict[str, Any]:
        posted = self._cards.get(work.card_key)
        outcome = _CLOSED_KEYS[work.status]
        if isinstance(work, UpdateApprovalCard):
            request = posted.request if posted else None
            title = request.title if isinstance(request, PostApprovalCard) else ""
            detail = request.detail if isinstance(request, PostApprovalCard) else None
            return approval_closed_card(
                self._t,
                title=title,
                detail=detail,
                outcome_key=f"card.approval.{outcome}",
                rejected=self.approval_status(work) is ApprovalStatus.REJECTED,
                option=self._decided_label(work),
                by=mention(work.by),
            )
        request = posted.request if posted else None
        text = request.text if isinstance(request, PostQuestion) else ""
        answer = ", ".join(work.answers.values())
        return question_closed_card(
            self._t,
            text=text,
            outcome_key=f"card.question.{outcome}",
            answer=answer,
            by=mention(work.by),
        )

    def _option_label(self, option: PermissionOption) -> str:
        # Buttons in the user's language by what they do; the agent's own wording varies.
        return self._t(f"card.approval.option.{option.kind.value}")

    def _chosen(self, work: UpdateApprovalCard) -> PermissionOption | None:
        posted = self._cards.get(work.card_key)
        if posted is None or not isinstance(posted.request, PostApprovalCard):
            return None
        return next((o for o in posted.request.options if o.option_id == work.option_id), None)

    def _decided_label(self, work: UpdateApprovalCard) -> str:
        option = self._chosen(work)
        if option is not None:
            return self._option_label(option)
        return work.option_name or work.option_id or ""

    def expired_after_restart(self, title: str = "") -> dict[str, Any]:
        return approval_closed_card(
            self._t, title=title, detail=None, outcome_key="card.approval.expired_restart"
        )

    def approval_status(self, work: UpdateApprovalCard) -> ApprovalStatus:
        if work.status is CardStatus.EXPIRED:
            return ApprovalStatus.EXPIRED
        if work.status is CardStatus.CANCELLED:
            return ApprovalStatus.CANCELLED
        option = self._chosen(work)
        kind = option.kind if option is not None else None
        if kind is PermissionKind.ALLOW_ALWAYS:
            return ApprovalStatus.ALLOWED_ALWAYS
        if kind is PermissionKind.ALLOW_ONCE:
            return ApprovalStatus.ALLOWED_ONCE
        return ApprovalStatus.REJECTED
