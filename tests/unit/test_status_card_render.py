"""The live status card and its continuations as card JSON (bridge/feishu/cards/status.py):
a continuation carries its page of the answer only, under its own title, and a page that
begins inside a code block opens the block again, so code stays code."""

from __future__ import annotations

import json

from bridge.core.effects import CardPhase, CardView
from bridge.core.state import ToolLine
from bridge.core.status_card import PAGE_CHARS
from bridge.feishu.cards.status import live_card
from bridge.i18n import Translator

T = Translator("zh_CN")
CODE = "".join(f"    value = items[{i}]  # a < b\n" for i in range(170))  # 5,400 characters


def element_ids(card: dict[str, object]) -> list[str]:
    body = card["body"]
    assert isinstance(body, dict)
    return [e["element_id"] for e in body["elements"]]


def test_a_continuation_card_is_its_page_of_the_answer_under_its_own_title() -> None:
    view = CardView(CardPhase.WORKING, elapsed=9.0, tools=(ToolLine("t", "Build", "done"),))
    card = live_card(
        T, CardView(**{**view.__dict__, "text": "more words", "page": 2}), streaming=True
    )
    assert card["header"]["title"]["content"] == T("card.status.continued", page=3)
    assert element_ids(card) == ["answer"]
    assert card["body"]["elements"][0]["content"] == "more words"


def test_a_page_that_begins_inside_a_code_block_shows_it_as_code() -> None:
    page = CardView(
        CardPhase.WORKING, elapsed=9.0, text=CODE + "```\n\nAfter.", page=1, code="```python"
    )
    content = live_card(T, page, streaming=True)["body"]["elements"][0]["content"]
    assert content.startswith("```python\n")
    assert "value = items[7]  # a < b" in content  # code, not escaped prose
    assert "［" not in content
    assert "＜" not in content
    assert content.rstrip().endswith("After.")


def test_a_full_page_of_code_is_drawn_as_markdown_not_as_literal_words() -> None:
    text = "Intro.\n\n```python\n" + CODE + "```"
    assert len(text) <= PAGE_CHARS
    content = live_card(T, CardView(CardPhase.WORKING, 1.0, text=text), streaming=True)
    answer = next(e for e in content["body"]["elements"] if e["element_id"] == "answer")
    assert "［" not in answer["content"]
    assert len(json.dumps(content, ensure_ascii=False).encode()) < 30 * 1024
