"""Split a long text into Feishu-sized parts, on the most natural boundary available.

Pure functions, no I/O. Sizes are measured twice: in characters (readability) and in the
bytes the text takes inside the request body, which is how Feishu applies its limit: the
text sits in `{"text": …}`, serialised to the `content` string, serialised again into the
body, so `"` costs 4 bytes, a newline 3, a CJK character 3 (UTF-8).
"""

from __future__ import annotations

import json
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate

from bridge.utf8 import utf8_safe

# Feishu: a text message's request body may be at most 150 KB.
FEISHU_TEXT_BODY_LIMIT = 150 * 1024
# Room for the rest of the body (receive_id, msg_type, uuid, the {"text":…} wrapper).
DEFAULT_MAX_BYTES = FEISHU_TEXT_BODY_LIMIT - 4 * 1024
# Readability: about two desktop screens. 8000 CJK characters are 24 KB, so a part also
# fits a card or post (30 KB) should a caller move it there.
DEFAULT_MAX_CHARS = 8000
# A reply of more messages than this floods the chat (and the rate limit); the rest is cut
# and the last message says so. 10 parts are up to 80,000 characters.
DEFAULT_MAX_PARTS = 10

_FENCE = "```"
_CLOSER = "\n" + _FENCE
_SENTENCE_END = re.compile(r"(?:[.!?;](?=\s)|[。！？；…])[\"'”’)\]」』]*[ \t]*")
_WHITESPACE = re.compile(r"\s+")


def _json_cost(ch: str) -> int:
    inner = json.dumps(ch, ensure_ascii=False)[1:-1]
    return len(json.dumps(inner, ensure_ascii=False)[1:-1].encode("utf-8"))


_ASCII_COST = tuple(_json_cost(chr(i)) for i in range(128))


def _char_cost(ch: str) -> int:
    o = ord(ch)
    if o < 0x80:
        return _ASCII_COST[o]
    return 2 if o < 0x800 else 3 if o < 0x10000 else 4


def encoded_size(text: str) -> int:
    """Bytes `text` occupies in a text message's request body (each character's
    `_char_cost`, summed by the JSON encoder itself)."""
    inner = json.dumps(utf8_safe(text), ensure_ascii=False)[1:-1]
    return len(json.dumps(inner, ensure_ascii=False).encode("utf-8")) - 2


def _is_extender(ch: str) -> bool:
    """Characters that belong to the grapheme before them."""
    o = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Me", "Mc")
        or o == 0x200D  # zero-width joiner
        or 0xFE00 <= o <= 0xFE0F  # variation selectors
        or 0x1F3FB <= o <= 0x1F3FF  # skin tone modifiers
        or 0xE0020 <= o <= 0xE007F  # emoji tag sequences
        or 0xE0100 <= o <= 0xE01EF
    )


def _is_regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _grapheme_safe(text: str, start: int, cut: int) -> int:
    """Move `cut` back so it does not fall inside a grapheme cluster (emoji with
    modifiers, ZWJ sequences, flags, combining accents, CRLF)."""
    original = cut
    while cut > start + 1:
        before, at = text[cut - 1], text[cut]
        if _is_extender(at) or before == "\u200d" or (before == "\r" and at == "\n"):
            cut -= 1
            continue
        if _is_regional(before) and _is_regional(at):
            run = 0
            while cut - 1 - run >= start and _is_regional(text[cut - 1 - run]):
                run += 1
            if run % 2 == 1:  # `before` is the first half of a flag
                cut -= 1
                continue
        return cut
    return original  # one huge cluster: cutting it is the only way forward


def _best_cut(text: str, start: int, end: int) -> int:
    """The last natural boundary in text[start:end], not earlier than halfway."""
    low = start + (end - start) // 2
    for sep in ("\n\n", "\n"):
        at = text.rfind(sep, low, end)
        if at != -1:
            return at + len(sep)
    for pattern in (_SENTENCE_END, _WHITESPACE):
        matches = list(pattern.finditer(text, low, end))
        if matches and matches[-1].end() > start:
            # A whitespace run may end between "\r" and "\n".
            return _grapheme_safe(text, start, matches[-1].end())
    return _grapheme_safe(text, start, end)


def _open_fence(piece: str, opener: str | None) -> str | None:
    """The fence line still open after `piece`, given the one open before it."""
    for line in piece.split("\n"):
        stripped = line.strip()
        if not stripped.startswith(_FENCE):
            continue
        if opener is None:
            opener = stripped
        elif stripped == "`" * len(stripped):  # a closing fence has no info string
            opener = None
    return opener


def split_text(
    text: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    balance_fences: bool = True,
) -> list[str]:
    """Split `text` into parts of at most `max_chars` characters and `max_bytes` encoded
    bytes each. Nothing is dropped: the parts joined give `utf8_safe(text)` back, except
    that with `balance_fences` a code block cut in two is closed with "\\n```" at the end
    of one part and reopened with its fence line at the start of the next."""
    if max_chars < 16 or max_bytes < 64:
        raise ValueError("max_chars must be >= 16 and max_bytes >= 64")
    text = utf8_safe(text)
    n = len(text)
    if n == 0:
        return []
    if n <= max_chars and encoded_size(text) <= max_bytes:
        return [text]  # the common case, without a Python step per character
    prefix = [0, *accumulate(_char_cost(ch) for ch in text)]
    closer_chars, closer_bytes = (len(_CLOSER), encoded_size(_CLOSER)) if balance_fences else (0, 0)

    def window_end(start: int, chars: int, nbytes: int) -> int:
        by_bytes = bisect_right(prefix, prefix[start] + nbytes) - 1
        return min(n, start + chars, by_bytes)

    parts: list[str] = []
    start = 0
    carry: str | None = None  # fence line to reopen at the start of the next part
    while start < n:
        head = carry + "\n" if carry else ""
        if (
            len(head) + closer_chars > max_chars // 2
            or encoded_size(head) + closer_bytes > max_bytes // 2
        ):
            head, carry = "", None  # absurdly long fence line: give up balancing it
        chars, nbytes = max_chars - len(head), max_bytes - encoded_size(head)
        if window_end(start, chars, nbytes) == n:
            parts.append(head + text[start:])
            break
        end = window_end(start, chars - closer_chars, nbytes - closer_bytes)
        cut = _best_cut(text, start, end)
        piece = text[start:cut]
        carry = _open_fence(piece, carry) if balance_fences else None
        tail = ("" if piece.endswith("\n") else "\n") + _FENCE if carry else ""
        parts.append(head + piece + tail)
        start = cut
    return parts


def cap_parts(parts: list[str], max_parts: int, cut_notice: Callable[[int, int], str]) -> list[str]:
    """At most `max_parts` of `parts`; when some are dropped, the last one kept ends with
    `cut_notice(kept, total)` on a line of its own, so the reader knows there was more.
    The notice may take that part a few dozen characters over the split's limits, which
    leave room for it (DEFAULT_MAX_BYTES keeps 4 KB spare)."""
    if max_parts < 1:
        raise ValueError("max_parts must be >= 1")
    if len(parts) <= max_parts:
        return parts
    kept = parts[:max_parts]
    last = kept[-1]
    kept[-1] = last + ("" if last.endswith("\n") else "\n") + cut_notice(max_parts, len(parts))
    return kept
