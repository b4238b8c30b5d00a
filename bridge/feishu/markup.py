"""Untrusted text (the agent's words, tool titles, commands) made safe for Feishu: it can
never mention anyone, close a code block, or turn into a link or a button.

Feishu parses `<at user_id="…">` / `<at id=…>` tags in text and card markdown; a zero-width
space after the `<` leaves the text readable and the tag dead.
"""

from __future__ import annotations

import re

_ZWSP = "\u200b"
_AT_TAG = re.compile(r"<(?=\s*/?\s*at\b)", re.IGNORECASE)
_BACKTICK_RUN = re.compile(r"`(?=`)")
# Markdown that could make a link, an image or a fake element in card markdown.
_MARKDOWN_LOOKALIKES = str.maketrans({"[": "［", "]": "］", "<": "＜", ">": "＞"})


def neutralize_mentions(text: str) -> str:
    """No `<at …>` tag in `text` mentions anyone (text messages and card markdown)."""
    return _AT_TAG.sub("<" + _ZWSP, text)


def code_block(text: str) -> str:
    """`text` as a fenced code block it cannot break out of: backtick runs are split, so no
    fence inside can close the block; mentions are neutralized too."""
    safe = _BACKTICK_RUN.sub("`" + _ZWSP, neutralize_mentions(text))
    return f"```\n{safe}\n```"


def markdown_literal(text: str) -> str:
    """`text` inside card markdown as words only: no mention, link, image or tag."""
    return neutralize_mentions(text).translate(_MARKDOWN_LOOKALIKES)


def clip(text: str, limit: int) -> tuple[str, bool]:
    """At most `limit` characters of `text`, and whether anything was cut."""
    if len(text) <= limit:
        return text, False
    return text[:limit], True
