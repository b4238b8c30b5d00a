"""Interactive cards the bridge sends: approvals and questions (Feishu card JSON 1.0).

Every text comes from the translator; buttons carry a small `value` the callback decodes
(`kind`, the request id, and the choice). `update_multi` makes the card shared, which the
PATCH API requires to update it for everyone in the chat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bridge.core.presence import CARD_DETAIL_LIMIT
from bridge.feishu.text import clip, code_block, markdown_literal, neutralize_mentions
from bridge.i18n import Translator

APPROVAL = "approval"
QUESTION = "question"

# Button order and style per permission kind; unknown kinds fall back to "default".
_BUTTON_STYLE = {
    "allow_once": "primary",
    "allow_always": "default",
    "reject_once": "danger",
    "reject_always": "danger",
}


@dataclass(frozen=True)
class Choice:
    value: str  # option id (approval) or answer value (question)
    label: str
    kind: str = ""  # permission kind, for the button style


# What one card shows of an agent's command; a longer one is cut here, says so, and follows
# in full as a message (the core posts it), so nobody approves a tail they cannot see.
DETAIL_LIMIT = CARD_DETAIL_LIMIT
TITLE_LIMIT = 300


def _text(content: str) -> dict[str, Any]:
    """Card markdown: only for the bridge's own texts (and mentions it makes itself)."""
    return {"tag": "div", "text": {"tag": "lark_md", "content": content}}


def _words(content: str) -> dict[str, Any]:
    """Plain text: no markdown, link or mention is interpreted (the agent's words)."""
    return {"tag": "div", "text": {"tag": "plain_text", "content": neutralize_mentions(content)}}


def _asks(t: Translator, title: str, detail: str | None) -> list[dict[str, Any]]:
    shown_title, title_cut = clip(title, TITLE_LIMIT)
    elements = [_words(t("card.approval.asks", title=shown_title))]
    if title_cut and not detail:
        detail = title  # a long title is the command: shown whole below, never hidden
    # The title often is the command itself: shown once when it fits.
    if detail and (title_cut or detail.strip() != title.strip()):
        head, cut = clip(detail, DETAIL_LIMIT)
        elements.append(_text(code_block(head)))
        if cut:
            note = t("card.approval.truncated", shown=len(head), length=len(detail))
            elements.append({"tag": "note", "elements": [_plain(note)]})
    return elements


def _card(template: str, title: str, elements: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "config": {"wide_screen_mode": True, "update_multi": True},
        "header": {"template": template, "title": {"tag": "plain_text", "content": title}},
        "elements": elements,
    }


def _buttons(kind: str, request_id: str, choices: Sequence[Choice]) -> dict[str, Any]:
    return {
        "tag": "action",
        "actions": [
            {
                "tag": "button",
                "text": {"tag": "plain_text", "content": neutralize_mentions(choice.label)},
                "type": _BUTTON_STYLE.get(choice.kind, "default"),
                "value": {"kind": kind, "request_id": request_id, "choice": choice.value},
            }
            for choice in choices
        ],
    }


def approval_card(
    t: Translator,
    *,
    request_id: str,
    title: str,
    detail: str | None,
    choices: Sequence[Choice],
    who_may_key: str = "card.approval.who_may",
) -> dict[str, Any]:
    elements = _asks(t, title, detail)
    elements.append(_buttons(APPROVAL, request_id, choices))
    elements.append({"tag": "note", "elements": [_plain(t(who_may_key))]})
    return _card("orange", t("card.approval.header"), elements)


def plain_card(
    t: Translator, *, kind: str, request_id: str, header_key: str, choices: Sequence[Choice]
) -> dict[str, Any]:
    """The fallback when Feishu refused the full card: the header and the buttons only."""
    elements = [_buttons(kind, request_id, choices)] if choices else []
    return _card("orange", t(header_key), elements)


def approval_closed_card(
    t: Translator,
    *,
    title: str,
    detail: str | None,
    outcome_key: str,
    rejected: bool = False,
    **params: str,
) -> dict[str, Any]:
    """The same card without buttons, saying who decided (or that it expired). Green for an
    allowed request, red for a rejected one, grey for one nobody decided."""
    elements = _asks(t, title, detail) if title else []
    elements.append(_text(t(outcome_key, **params)))
    decided = outcome_key.endswith(("decided", "answered"))
    template = ("red" if rejected else "green") if decided else "grey"
    return _card(template, t("card.approval.header"), elements)


def question_card(
    t: Translator, *, request_id: str, text: str, choices: Sequence[Choice]
) -> dict[str, Any]:
    elements = [_words(text)]
    if choices:
        elements.append(_buttons(QUESTION, request_id, choices))
    elements.append({"tag": "note", "elements": [_plain(t("card.question.how_to_answer"))]})
    return _card("blue", t("card.question.header"), elements)


def question_closed_card(
    t: Translator, *, text: str, outcome_key: str, **params: str
) -> dict[str, Any]:
    safe = {
        name: value if name == "by" else markdown_literal(value) for name, value in params.items()
    }
    outcome = _text(t(outcome_key, **safe))
    return _card("grey", t("card.question.header"), [_words(text), outcome])


def _plain(content: str) -> dict[str, Any]:
    return {"tag": "plain_text", "content": content}


def decode_action(value: dict[str, Any]) -> tuple[str, str, str] | None:
    """(kind, request_id, choice) from a button's value, or None when it is not ours."""
    kind, request_id, choice = value.get("kind"), value.get("request_id"), value.get("choice")
    if kind in (APPROVAL, QUESTION) and isinstance(request_id, str) and isinstance(choice, str):
        return kind, request_id, choice
    return None
