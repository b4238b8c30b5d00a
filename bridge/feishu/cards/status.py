"""The live status card as card JSON 2.0 (what CardKit streams, and the patched fallback).

Agent words (tool titles, plan entries, the answer) are data: `markdown_literal` keeps them
words, with no mention, link, image or tag. The answer sits in its own element, `answer`,
whose text CardKit streams; escaping is per character, so a longer answer keeps the shorter
one as its prefix and Feishu types out only what was added.
"""

from __future__ import annotations

from typing import Any, Final

from bridge.core.effects import CardPhase, CardView
from bridge.core.text import format_elapsed
from bridge.feishu.text import answer_parts, markdown_literal
from bridge.i18n import Translator, render, render_text

ANSWER: Final = "answer"  # the element CardKit streams into

_TITLES: Final = {
    CardPhase.WORKING: "presence.running_hint",
    CardPhase.WAITING_APPROVAL: "presence.waiting_approval",
    CardPhase.WAITING_REPLY: "presence.waiting_reply",
    CardPhase.RECOVERING: "presence.recovering",
    CardPhase.ENDED: "card.status.ended",
}
_COLOURS: Final = {
    CardPhase.WORKING: "blue",
    CardPhase.WAITING_APPROVAL: "orange",
    CardPhase.WAITING_REPLY: "orange",
    CardPhase.RECOVERING: "yellow",
    CardPhase.ENDED: "green",
}
_TOOL_STATES: Final = ("pending", "in_progress", "completed", "failed")


def answer_markdown(text: str, code: str = "") -> str:
    """The answer in the card: its Markdown as card markdown (feishu/text.py), else its words.
    `code`: the fence line of a code block the page begins inside, opened again on top."""
    if code:
        text = f"{code}\n{text}"
    parts = answer_parts(text)
    # Parts are cut for messages; in one element they read as one (the core's page bounds
    # the element's size).
    return "\n\n".join(parts) if parts is not None else markdown_literal(text)


def markdown_element(element_id: str, content: str) -> dict[str, Any]:
    return {"tag": "markdown", "element_id": element_id, "content": content}


def live_card(t: Translator, view: CardView, *, streaming: bool) -> dict[str, Any]:
    if view.page > 0:
        title = t("card.status.continued", page=view.page + 1)
    else:
        title = t(_TITLES[view.phase])
    elements = [markdown_element(element, content) for element, content in elements_of(t, view)]
    if view.cut:
        elements.append(markdown_element("note", t("card.status.cut")))
    if view.footer is not None:
        elements.append(markdown_element("usage", markdown_literal(render_text(t, view.footer))))
    failed = view.phase is CardPhase.ENDED and view.end_key not in (None, "presence.ended_empty")
    return {
        "schema": "2.0",
        "config": {
            "update_multi": True,
            "streaming_mode": streaming,
            "summary": {"content": title},
        },
        "header": {
            "title": {"tag": "plain_text", "content": title},
            "template": "grey" if failed else _COLOURS[view.phase],
        },
        "body": {"elements": elements},
    }


def elements_of(t: Translator, view: CardView) -> list[tuple[str, str]]:
    """The card's changing elements, in order, with their content: the status line, the
    tools and the plan (when there are any), and the answer. Each may be streamed alone. A
    continuation card is its page of the answer only."""
    return [(element, element_content(t, view, element)) for element in element_ids(view)]


def element_ids(view: CardView) -> list[str]:
    """`elements_of`'s ids, without drawing them."""
    if view.page > 0:
        return [ANSWER]
    return ["status", *(["tools"] if view.tools else []), *(["plan"] if view.plan else []), ANSWER]


def element_content(t: Translator, view: CardView, element: str) -> str:
    """One element of `elements_of`, drawn alone (the answer, the longest to draw, only
    when it is the one asked for)."""
    if element == ANSWER:
        return answer_markdown(view.text, view.code if view.page > 0 else "")
    if element == "status":
        return _status(t, view)
    if element == "tools":
        lines = [f"**{t('card.status.tools')}**"]
        for tool in view.tools:
            state = tool.status if tool.status in _TOOL_STATES else "pending"
            lines.append(t(f"card.tool.{state}", title=markdown_literal(tool.title)))
        return "\n".join(lines)
    if element == "plan":
        lines = [f"**{t('card.status.plan')}**"]
        for entry in view.plan:
            state = entry.status if entry.status in _TOOL_STATES else "pending"
            lines.append(t(f"card.plan.{state}", content=markdown_literal(entry.content)))
        return "\n".join(lines)
    raise KeyError(element)


def _status(t: Translator, view: CardView) -> str:
    elapsed = render_text(t, format_elapsed(view.elapsed))
    if view.phase is CardPhase.ENDED:
        line = render(t, view.end_key, view.end_params) if view.end_key else ""
        took = t("card.status.took", elapsed=elapsed) if view.elapsed > 0 else ""
        return "\n".join(part for part in (line, took) if part) or t("card.status.ended")
    if view.phase in (CardPhase.WAITING_APPROVAL, CardPhase.WAITING_REPLY):
        return t("card.status.elapsed_paused", elapsed=elapsed)
    return t("card.status.elapsed", elapsed=elapsed)
