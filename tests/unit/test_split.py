"""split_text: nothing lost, every part within limits, natural boundaries, safe cuts."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.feishu.text import (
    DEFAULT_MAX_BYTES,
    FEISHU_TEXT_BODY_LIMIT,
    _char_cost,
    encoded_size,
    split_text,
)
from bridge.utf8 import utf8_safe

CARD_BODY_LIMIT = 30 * 1024  # Feishu's, for a card message's request body

ALPHABET = [
    *'abcdefghij  ..,!?\n\n\t"\\',
    *"你好世界。！？；",
    "😀",
    "👍🏽",
    "🇨🇳",
    "e\u0301",
    "👨\u200d👩\u200d👧",
    "\x01",
]


def random_text(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(size))


def body_bytes(part: str) -> int:
    """What Feishu measures: the part inside content, inside the body."""
    content = json.dumps({"text": part}, ensure_ascii=False)
    return len(json.dumps({"content": content}, ensure_ascii=False).encode("utf-8"))


def test_short_text_is_one_part() -> None:
    assert split_text("hello") == ["hello"]
    assert split_text("") == []


@pytest.mark.parametrize("seed", range(40))
def test_random_texts_round_trip_within_limits(seed: int) -> None:
    rng = random.Random(seed)
    text = random_text(rng, rng.randint(1, 3000))
    max_chars = rng.randint(16, 400)
    max_bytes = rng.randint(64, 1200)

    parts = split_text(text, max_chars=max_chars, max_bytes=max_bytes, balance_fences=False)

    assert "".join(parts) == text
    assert all(part for part in parts)
    for part in parts:
        assert len(part) <= max_chars
        assert encoded_size(part) <= max_bytes
        part.encode("utf-8")  # valid UTF-8 on its own


def test_encoded_size_matches_the_real_body() -> None:
    sample = 'say "hi"\n\\ 你好 😀 \x01\t'
    overhead = body_bytes("")
    assert encoded_size(sample) == body_bytes(sample) - overhead


@given(st.text())
def test_encoded_size_is_the_sum_of_each_characters_cost(text: str) -> None:
    # The splitter bisects on per-character costs and takes its shortcut on encoded_size:
    # the two must agree for any text, escapes and surrogates included.
    safe = utf8_safe(text)
    assert encoded_size(text) == sum(_char_cost(ch) for ch in safe)


def test_prefers_paragraph_then_line_then_sentence() -> None:
    para = "Alpha beta gamma.\n\nDelta epsilon zeta eta theta iota kappa."
    assert split_text(para, max_chars=40)[0] == "Alpha beta gamma.\n\n"

    lines = "one two three four\nfive six seven eight nine ten eleven"
    assert split_text(lines, max_chars=30)[0] == "one two three four\n"

    sentences = "The first sentence ends. The second one is longer than that."
    assert split_text(sentences, max_chars=40)[0] == "The first sentence ends. "

    chinese = "第一句话已经结束了。第二句话更长一些，还在继续说下去，没有停下来的意思。"
    assert split_text(chinese, max_chars=20)[0] == "第一句话已经结束了。"


def test_falls_back_to_spaces_then_hard_cut() -> None:
    words = "word " * 20
    parts = split_text(words, max_chars=23)
    assert all(part.endswith(" ") for part in parts)
    solid = "x" * 100
    assert split_text(solid, max_chars=30, balance_fences=False) == [
        "x" * 30,
        "x" * 30,
        "x" * 30,
        "x" * 10,
    ]


@pytest.mark.parametrize(
    "cluster", ["👍🏽", "🇨🇳", "e\u0301", "👨\u200d👩\u200d👧", "\r\n", "❤\ufe0f"]
)
def test_hard_cut_never_splits_a_grapheme(cluster: str) -> None:
    text = ("y" * 15 + cluster) * 10  # no spaces or newlines to cut on (except CRLF)
    for max_chars in range(16, 32):  # every alignment of the cut against the cluster
        parts = split_text(text, max_chars=max_chars, balance_fences=False)
        assert "".join(parts) == text
        for part in parts:
            assert part.count(cluster) == part.count(cluster[0]), (max_chars, part)


def test_surrogates_are_made_utf8_safe() -> None:
    joined = "\ud83d\ude00"  # a pair written as two code units
    assert utf8_safe(joined) == "😀"
    assert utf8_safe("a\ud800b") == "a\ufffdb"
    parts = split_text("ok \ud800" + "z" * 40, max_chars=20)
    "".join(parts).encode("utf-8")


def test_code_fence_cut_in_two_is_closed_and_reopened() -> None:
    code = "\n".join(f"print({i})" for i in range(30))
    text = f"Here is the code:\n\n```python\n{code}\n```\n\nDone."

    parts = split_text(text, max_chars=120)

    assert len(parts) > 2
    for part in parts:
        fences = [line for line in part.split("\n") if line.strip().startswith("```")]
        assert len(fences) % 2 == 0, part
        assert len(part) <= 120
    # Inner parts reopen with the original info string.
    assert all(part.startswith("```python\n") for part in parts[1:-1])
    # Removing the inserted markers gives the text back (cuts here fall after a newline,
    # so each closer is a bare "```" appended to a part ending in "\n").
    opener = "```python\n"
    pieces = []
    for i, part in enumerate(parts):
        if i > 0 and part.startswith(opener):
            part = part.removeprefix(opener)
        if i + 1 < len(parts) and parts[i + 1].startswith(opener):
            part = part.removesuffix("```")
        pieces.append(part)
    assert "".join(pieces) == text


@pytest.mark.parametrize(
    "big",
    ["段落内容。" * 40_000, '"' * 100_000, "word " * 40_000, "😀" * 30_000],
    ids=["chinese", "quotes", "english", "emoji"],
)
def test_every_part_of_a_long_text_fits_a_card_and_fills_a_message(big: str) -> None:
    """A part fits a card's 30 KB (so a text part could go as one), whatever its characters
    cost, and each part but the last holds nearly a message's worth of bytes."""
    parts = split_text(big)
    assert "".join(parts) == big
    assert all(body_bytes(part) < CARD_BODY_LIMIT for part in parts)
    assert all(encoded_size(part) > DEFAULT_MAX_BYTES * 0.99 for part in parts[:-1])
    assert DEFAULT_MAX_BYTES < CARD_BODY_LIMIT < FEISHU_TEXT_BODY_LIMIT


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        split_text("x", max_chars=1)
