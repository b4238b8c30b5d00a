"""How the core's card effects look as Feishu cards, and which Feishu message each card is.

Everything needed to draw a card, open or closed, travels in the effect itself; the only
thing remembered is the Feishu message id of each posted card, kept until its turn ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from bridge.core.effects import (
    CardStatus,
    PostApprovalCard,
    PostQuestion,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.feishu.cards.requests import (
    APPROVAL,
    QUESTION,
    Choice,
    approval_card,
    approval_closed_card,
    plain_card,
    question_card,
    question_closed_card,
)
from bridge.i18n import Translator
from bridge.runtime.events import PermissionKind, PermissionOption
from bridge.store.port import ApprovalStatus

_CLOSED_KEYS = {
    CardStatus.EXPIRED: "expired",
    CardStatus.CANCELLED: "cancelled",
    CardStatus.WITHDRAWN: "withdrawn",
    CardStatus.DECIDED: "decided",
    CardStatus.ANSWERED: "answered",
}


def mention(open_id: str | None) -> str:
    return f"<at id={open_id}></at>" if open_id else ""


class CardViews:
    """Renders cards in the deployment's language."""

    def __init__(self, translator: Translator, *, requester_may_approve: bool = True) -> None:
        self._t = translator
        # Four eyes: the card's note must not tell the requester they may choose.
        self._who_may = (
            "card.approval.who_may" if requester_may_approve else "card.approval.who_may_approvers"
        )

    def open_card(self, work: PostApprovalCard | PostQuestion) -> dict[str, Any]:
        if isinstance(work, PostApprovalCard):
            choices = self._approval_choices(work.options)
            return approval_card(
                self._t,
                request_id=work.request_id,
                title=work.title,
                detail=work.detail,
                choices=choices,
                who_may_key=self._who_may,
            )
        choices = [Choice(o.value, o.label) for o in work.options]
        return question_card(self._t, request_id=work.request_id, text=work.text, choices=choices)

    def fallback_card(self, work: PostApprovalCard | PostQuestion) -> dict[str, Any]:
        """What is left when Feishu refuses the full card (too large, too many elements)."""
        if isinstance(work, PostApprovalCard):
            kind, header = APPROVAL, "card.approval.header"
            choices = self._approval_choices(work.options)
        else:
            kind, header = QUESTION, "card.question.header"
            choices = [Choice(o.value, o.label) for o in work.options]
        return plain_card(
            self._t, kind=kind, request_id=work.request_id, header_key=header, choices=choices
        )

    def closed_card(self, work: UpdateApprovalCard | UpdateQuestionCard) -> dict[str, Any]:
        outcome = _CLOSED_KEYS[work.status]
        if isinstance(work, UpdateApprovalCard):
            option = work.option
            return approval_closed_card(
                self._t,
                title=work.title,
                detail=work.detail,
                outcome_key=f"card.approval.{outcome}",
                rejected=approval_status(work) is ApprovalStatus.REJECTED,
                option=self._option_label(option) if option else "",
                by=mention(work.by),
            )
        return question_closed_card(
            self._t,
            text=work.text,
            outcome_key=f"card.question.{outcome}",
            answer=", ".join(work.answers.values()),
            by=mention(work.by),
        )

    def expired_after_restart(self, title: str = "") -> dict[str, Any]:
        return approval_closed_card(
            self._t, title=title, detail=None, outcome_key="card.approval.expired_restart"
        )

    def _approval_choices(self, options: Sequence[PermissionOption]) -> list[Choice]:
        kinds = Counter(o.kind for o in options)
        return [
            Choice(o.option_id, self._option_label(o, named=kinds[o.kind] > 1), o.kind.value)
            for o in options
        ]

    def _option_label(self, option: PermissionOption, *, named: bool = False) -> str:
        # Buttons in the user's language by what they do; the agent's own wording varies.
        # Where two options do the same kind of thing (Claude Code's plan exit offers several
        # "always" ones), the agent's words tell them apart.
        label = self._t(f"card.approval.option.{option.kind.value}")
        if named and option.name.strip():
            return self._t("card.approval.option_named", label=label, name=option.name.strip())
        return label


def approval_status(work: UpdateApprovalCard) -> ApprovalStatus:
    if work.status is CardStatus.EXPIRED:
        return ApprovalStatus.EXPIRED
    if work.status in (CardStatus.CANCELLED, CardStatus.WITHDRAWN):
        return ApprovalStatus.CANCELLED
    kind = work.option.kind if work.option is not None else None
    if kind is PermissionKind.ALLOW_ALWAYS:
        return ApprovalStatus.ALLOWED_ALWAYS
    if kind is PermissionKind.ALLOW_ONCE:
        return ApprovalStatus.ALLOWED_ONCE
    return ApprovalStatus.REJECTED
