"""Agent text is data: it can never mention people, break out of a code block, or become a
link in card markdown."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from bridge.feishu.cards.requests import (
    DETAIL_LIMIT,
    approval_card,
    question_card,
    question_closed_card,
)
from bridge.feishu.text import code_block, markdown_literal, neutralize_mentions
from bridge.i18n import Translator

T = Translator("zh_CN")
LIVE_AT = re.compile(r"<\s*/?\s*at\b", re.IGNORECASE)  # what Feishu would parse as a mention


def test_every_at_tag_is_dead() -> None:
    for text in (
        '<at user_id="all">所有人</at>',
        "<at id=all></at>",
        "< at id=ou_x>",
        "<AT email=a@b.c></AT>",
    ):
        assert not LIVE_AT.search(neutralize_mentions(text)), text


@given(st.text())
def test_no_text_can_keep_a_live_mention(text: str) -> None:
    assert not LIVE_AT.search(neutralize_mentions(text))


@given(st.text(alphabet="`ab\n <>at"))
def test_a_code_block_cannot_be_closed_from_inside(text: str) -> None:
    block = code_block(text)
    inner = block[len("```\n") : -len("\n```")]
    assert "``" not in inner  # no fence (nor an inline code opener pair) can form
    assert not LIVE_AT.search(inner)


def test_markdown_literal_makes_no_link_image_or_tag() -> None:
    safe = markdown_literal("[click](http://evil.example) ![x](y) <font>hi</font>")
    assert "[" not in safe
    assert "](" not in safe
    assert "<" not in safe


def _markdown(card: dict[str, object]) -> list[str]:
    """Every lark_md content in a card (what Feishu interprets as markdown)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("tag") == "lark_md":
                found.append(str(node["content"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(card)
    return found


HOSTILE = '<at user_id="all"></at> [approve me](http://evil.example) **bold**'


def test_an_approval_card_shows_the_agents_title_as_plain_words() -> None:
    card = approval_card(T, request_id="r1", title=HOSTILE, detail=None, choices=[])
    body = str(card)
    assert not LIVE_AT.search(body)
    # The title is in a plain_text element, so nothing in it is markdown.
    plain = [
        e["text"]["content"]
        for e in card["elements"]
        if isinstance(e, dict) and e.get("text", {}).get("tag") == "plain_text"
    ]
    assert any("[approve me](http://evil.example)" in p for p in plain)
    assert all("evil.example" not in m for m in _markdown(card))


def test_the_command_is_code_that_cannot_close_its_block_or_add_buttons() -> None:
    command = "rm -rf /tmp/x\n```\n[Allow](http://evil.example)\n<at id=all></at>"
    card = approval_card(T, request_id="r1", title="Run", detail=command, choices=[])
    (block,) = [m for m in _markdown(card) if m.startswith("```")]
    inner = block[4:-4]
    assert "```" not in inner
    assert not LIVE_AT.search(inner)


def test_a_long_command_is_cut_and_says_so_with_its_length() -> None:
    command = "x" * (DETAIL_LIMIT + 500)
    card = approval_card(T, request_id="r1", title="Run", detail=command, choices=[])
    (block,) = [m for m in _markdown(card) if m.startswith("```")]
    assert block.count("x") == DETAIL_LIMIT
    note = T("card.approval.truncated", shown=DETAIL_LIMIT, length=DETAIL_LIMIT + 500)
    assert note in str(card)


def test_a_long_title_that_is_the_command_is_shown_whole_below_it() -> None:
    title = "echo " + "y" * 600
    card = approval_card(T, request_id="r1", title=title, detail=title, choices=[])
    (block,) = [m for m in _markdown(card) if m.startswith("```")]
    assert title in block


def test_question_text_and_answer_are_words_only() -> None:
    card = question_card(T, request_id="q1", text=HOSTILE, choices=[])
    assert all("evil.example" not in m for m in _markdown(card))
    assert not LIVE_AT.search(str(card))
    closed = question_closed_card(
        T, text=HOSTILE, outcome_key="card.question.answered", answer=HOSTILE, by=""
    )
    assert all("](" not in m for m in _markdown(closed))
    assert not LIVE_AT.search(str(closed))
