"""What a text becomes on Feishu: untrusted words made inert, a long text split to size, the
agent's Markdown written as card markdown.

**Inert.** Untrusted text (the agent's words, tool titles, commands) can never mention
anyone, close a code block, or turn into a link or a button. Feishu parses
`<at user_id="…">` / `<at id=…>` tags in text and card markdown; a zero-width space after
the `<` leaves the text readable and the tag dead (`neutralize_mentions`,
`markdown_literal`).

**Split to size** (`split_text`), on the most natural boundary available. Sizes are
measured in the bytes the text takes inside the request body, which is how Feishu applies
its limit: the text sits in `{"text": …}` (or a card's markdown element), serialised to the
`content` string, serialised again into the body, so `"` costs 4 bytes, a newline 3, a CJK
character 3 (UTF-8). A caller may cap the characters too.

**Rich.** Headings, lists, emphasis, links, code blocks with their language and tables
become card markdown (card JSON 2.0); an answer with none of that stays a plain text
message. The answer is parsed (markdown-it, CommonMark plus tables and strikethrough) and
written out again from the parse tree, never passed through: the agent's text stays data.
Words cannot become a mention, a tag or a hidden link; a link shows its address next to
its words; an image is its words and address as text. Code keeps its characters, with
mentions neutralized and a fence no backtick run inside can close. Long answers are split
between top-level blocks, never inside a code block or a table; a single block larger than
a part is cut at line ends into blocks of the same kind (a code block refenced with its
language, a table with its header repeated).

Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterable
from itertools import accumulate
from typing import Any, Final

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from bridge.utf8 import utf8_safe

# --- inert: mentions, code fences, links --------------------------------------------------

_ZWSP = "\u200b"
_AT_TAG = re.compile(r"<(?=\s*/?\s*at\b)", re.IGNORECASE)
_BACKTICK_RUN = re.compile(r"`(?=`)")
# Markdown that could make a link, an image or a fake element in card markdown.
_MARKDOWN_LOOKALIKES = str.maketrans({"[": "［", "]": "］", "<": "＜", ">": "＞"})


def neutralize_mentions(text: str) -> str:
    """No `<at …>` tag in `text` mentions anyone (text messages and card markdown)."""
    return _AT_TAG.sub("<" + _ZWSP, text)


_OPEN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def mention_tags(open_ids: Iterable[str]) -> str:
    """The bridge's own @-mentions, to go ahead of a text message it writes: one
    `<at user_id="…"></at>` per open id, each followed by a space; an id that is not plainly
    one (letters, digits, `_`, `-`) is left out, so no markup can come through it."""
    return "".join(f'<at user_id="{i}"></at> ' for i in open_ids if _OPEN_ID.fullmatch(i))


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


# --- split to size ------------------------------------------------------------------------

# Feishu: a text message's request body may be at most 150 KB, a card's 30 KB.
FEISHU_TEXT_BODY_LIMIT = 150 * 1024
# A message's worth, in the bytes it takes in the request body (`encoded_size`): within a
# card's 30 KB with room for the card and the rest of the body around it, so a part fits a
# text message or a card alike. About 27,000 characters of English, 9,300 of Chinese: a
# long answer is a few messages, not a flood of them against the minute's sends.
MESSAGE_BYTES: Final = 28_000
DEFAULT_MAX_BYTES = MESSAGE_BYTES
DEFAULT_MAX_CHARS = MESSAGE_BYTES  # no character takes less than a byte: bytes decide
# A reply of more messages than this floods the chat (and the rate limit); the rest is cut
# and the last message says so.
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
    leave room for it (a part is 28,000 bytes of a message's 30 KB or 150 KB)."""
    if max_parts < 1:
        raise ValueError("max_parts must be >= 1")
    if len(parts) <= max_parts:
        return parts
    kept = parts[:max_parts]
    last = kept[-1]
    kept[-1] = last + ("" if last.endswith("\n") else "\n") + cut_notice(max_parts, len(parts))
    return kept


# --- the agent's Markdown as card markdown ------------------------------------------------

_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
_RICH = frozenset(
    {
        "heading",
        "bullet_list",
        "ordered_list",
        "fence",
        "code_block",
        "table",
        "blockquote",
        "hr",
        "strong",
        "em",
        "s",
        "code_inline",
        "link",
    }
)
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,20}")
_HEADING = {"h1": "##", "h2": "###"}  # the largest sizes look shouting in a chat


# What any rich node needs somewhere in the text: a marker character (headings, lists,
# emphasis, code, fences, tables, quotes, rules, setext underlines, links); an underscore
# that may open or close emphasis (not inside a word: "snake_case" is plain); at a line's
# start, a list's "-", an ordered list's number or an indented code block's indent (a list
# within another list or a quote: that one's marker is found). Lines end at "\n" or a lone
# "\r", as markdown-it reads them. Text with none of them is plain whatever markdown-it
# would say, and is not parsed (most short answers: a parse and its tree cost more than the
# rest of relaying them).
# What Markdown needs to be more than plain text, as four scans, each led by what it looks
# for (a character class, "_", a line's start, "\r"): one alternation of them all tries
# every branch at every character (twice the time on a long answer, which is looked at on
# every refresh of a card).
_MAYBE_RICH = (
    re.compile(r"[#*+=|>`~\[<\t]"),
    re.compile(r"_(?:(?<!\w_)|(?!\w))"),
    re.compile(r"^(?: {0,3}(?:-|\d+[.)])| {4})", re.MULTILINE),
    re.compile(r"\r(?: {0,3}(?:-|\d+[.)])| {4})"),
)


def answer_parts(text: str) -> list[str] | None:
    """The answer as card markdown parts, in order; None when it is plain text."""
    if not any(pattern.search(text) for pattern in _MAYBE_RICH):
        return None
    root = SyntaxTreeNode(_PARSER.parse(text))
    if not any(node.type in _RICH for node in root.walk()):
        return None
    blocks: list[str] = []
    for node in root.children:
        blocks.extend(_pieces(node))
    return _pack([b for b in blocks if b.strip()])


def answer_card(part: str) -> dict[str, Any]:
    """One part as an interactive card (JSON 2.0): a single markdown element."""
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {"elements": [{"tag": "markdown", "content": part}]},
    }


# --- blocks -------------------------------------------------------------------------------


def _pieces(node: SyntaxTreeNode) -> list[str]:
    """One top-level block, cut into pieces of a message's worth where it is that long."""
    if node.type in ("fence", "code_block"):
        return _fences(node.content, _language(node.info) if node.type == "fence" else "")
    if node.type == "table":
        return _tables(node)
    rendered = _block(node, 0)
    if encoded_size(rendered) <= MESSAGE_BYTES:
        return [rendered]
    return _cut_lines(rendered)


def _block(node: SyntaxTreeNode, depth: int) -> str:
    kind = node.type
    if kind == "paragraph":
        return _inline_of(node)
    if kind == "heading":
        marks = _HEADING.get(node.tag, "####")
        return f"{marks} {_inline_of(node)}"
    if kind in ("bullet_list", "ordered_list"):
        return _list(node, depth)
    if kind == "blockquote":
        inner = "\n\n".join(_block(child, depth) for child in node.children)
        return "\n".join(f"> {line}" if line else ">" for line in inner.splitlines())
    if kind in ("fence", "code_block"):
        language = _language(node.info) if kind == "fence" else ""
        return _fence(node.content, language)
    if kind == "table":
        return "\n".join(_table_rows(node))
    if kind == "hr":
        return "---"
    return markdown_literal(node.content)  # anything else: its words only


def _list(node: SyntaxTreeNode, depth: int) -> str:
    start = int(str(node.attrs.get("start", 1)))
    lines: list[str] = []
    indent = "    " * depth
    for number, item in enumerate(node.children, start=start):
        mark = f"{number}." if node.type == "ordered_list" else "-"
        parts = [_block(child, depth + 1) for child in item.children]
        head, *rest = parts or [""]
        lines.append(f"{indent}{mark} {head}")
        for part in rest:  # nested lists carry their own indent; a paragraph needs one
            lines.append(part if part.startswith(" ") else f"{indent}    {part}")
    return "\n".join(lines)


def _fences(code: str, language: str) -> list[str]:
    whole = _fence(code, language)
    if encoded_size(whole) <= MESSAGE_BYTES:
        return [whole]
    # Less what the fences take (a longer one where the code holds backtick runs).
    room = MESSAGE_BYTES - encoded_size(whole) + encoded_size(code.rstrip("\n")) - 16
    return [_fence(chunk, language) for chunk in _cut_lines(code, room)]


def _fence(code: str, language: str) -> str:
    safe = neutralize_mentions(code.rstrip("\n"))
    longest = max((len(run) for run in re.findall(r"`+", safe)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{safe}\n{fence}"


def _language(info: str) -> str:
    word = info.strip().split(maxsplit=1)[0] if info.strip() else ""
    return word if _LANGUAGE.fullmatch(word) else ""


def _tables(node: SyntaxTreeNode) -> list[str]:
    header, separator, *rows = _table_rows(node)
    head = encoded_size(f"{header}\n{separator}")
    tables, current, size = [], [header, separator], head
    for row in rows:
        cost = encoded_size(f"\n{row}")
        if len(current) > 2 and size + cost > MESSAGE_BYTES:
            tables.append("\n".join(current))
            current, size = [header, separator], head
        current.append(row)
        size += cost
    tables.append("\n".join(current))
    return tables


def _table_rows(node: SyntaxTreeNode) -> list[str]:
    rows: list[list[str]] = []
    aligns: list[str] = []
    for section in node.children:  # thead, tbody
        for tr in section.children:
            cells = [
                _inline_of(cell).replace("|", "\\|").replace("\n", " ") for cell in tr.children
            ]
            if not aligns:
                aligns = [_align(str(cell.attrs.get("style", ""))) for cell in tr.children]
            rows.append(cells)
    header, *body = rows or [[""]]
    lines = [_row(header), _row(aligns or ["---"] * len(header))]
    lines += [_row(cells) for cells in body]
    return lines


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _align(style: str) -> str:
    return {"text-align:center": ":-:", "text-align:right": "--:", "text-align:left": ":--"}.get(
        style, "---"
    )


# --- inline -------------------------------------------------------------------------------


def _inline_of(node: SyntaxTreeNode) -> str:
    return "".join(_inline(child) for child in node.children)


def _inline(node: SyntaxTreeNode) -> str:
    kind = node.type
    if kind == "inline":
        return _inline_of(node)
    if kind == "text":
        return markdown_literal(node.content)
    if kind in ("softbreak", "hardbreak"):
        return "\n"
    if kind == "code_inline":
        code = neutralize_mentions(node.content)
        ticks = "`" * (max((len(r) for r in re.findall(r"`+", code)), default=0) + 1)
        pad = " " if code.startswith("`") or code.endswith("`") else ""
        return f"{ticks}{pad}{code}{pad}{ticks}"
    if kind == "strong":
        return f"**{_inline_of(node)}**"
    if kind == "em":
        return f"*{_inline_of(node)}*"
    if kind == "s":
        return f"~~{_inline_of(node)}~~"
    if kind == "link":
        return _link(_inline_of(node), str(node.attrs.get("href", "")))
    if kind == "image":
        return _link(markdown_literal(node.content), str(node.attrs.get("src", "")))
    return markdown_literal(node.content)


def _link(words: str, href: str) -> str:
    """A link shows where it goes: its words, then its address (the one clickable part)."""
    if not re.fullmatch(r"https?://[^\s()<>]+", href):
        return f"{words} ({markdown_literal(href)})" if href else words
    target = f"[{markdown_literal(href)}]({href})"
    return target if markdown_literal(href) == words else f"{words} ({target})"


# --- parts --------------------------------------------------------------------------------


def _cut_lines(text: str, most: int = MESSAGE_BYTES) -> list[str]:
    """`text` in pieces of at most `most` bytes, cut at line ends; one endless line (minified
    code, say) is cut where it must be."""
    pieces, current, size = [], "", 0
    for line in text.splitlines(keepends=True):
        cost = encoded_size(line)
        if current and size + cost > most:
            pieces.append(current)
            current, size = "", 0
        if cost > most:
            *filled, line = split_text(line, max_bytes=most, balance_fences=False)
            pieces.extend(filled)
            cost = encoded_size(line)
        current, size = current + line, size + cost
    if current:
        pieces.append(current)
    return pieces


_BETWEEN = encoded_size("\n\n")


def _pack(blocks: list[str]) -> list[str]:
    """Blocks joined into as few parts as fit, in order; a block is never split here."""
    joined = "\n\n".join(blocks)
    if encoded_size(joined) <= MESSAGE_BYTES:
        return [joined] if joined else []
    parts: list[str] = []
    current, size = "", 0
    for block in blocks:
        cost = encoded_size(block)
        if current and size + _BETWEEN + cost > MESSAGE_BYTES:
            parts.append(current)
            current, size = "", 0
        current, size = (
            (f"{current}\n\n{block}", size + _BETWEEN + cost) if current else (block, cost)
        )
    if current:
        parts.append(current)
    return parts
