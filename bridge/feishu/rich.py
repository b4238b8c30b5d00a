"""The agent's Markdown as Feishu rich content: headings, lists, emphasis, links, code blocks
with their language and tables become card markdown (card JSON 2.0); an answer with none
of that stays a plain text message.

The answer is parsed (markdown-it, CommonMark plus tables and strikethrough) and written
out again from the parse tree, never passed through: the agent's text stays data. Words
cannot become a mention, a tag or a hidden link (`markdown_literal`); a link shows its
address next to its words; an image is its words and address as text. Code keeps its
characters, with mentions neutralized and a fence no backtick run inside can close.

Long answers are split between top-level blocks, never inside a code block or a table; a
single block larger than a part is cut at line ends into blocks of the same kind (a code
block refenced with its language, a table with its header repeated).
"""

from __future__ import annotations

import re
from typing import Any, Final

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from bridge.feishu.markup import markdown_literal, neutralize_mentions

# Characters of card markdown per part: a card holds 30 KB, and CJK takes 3 bytes each.
PART_CHARS: Final = 7000
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
# emphasis, code, fences, tables, quotes, rules, setext underlines, links), an ordered
# list's number, or an indented code block's indent. Text with none of them is plain
# whatever markdown-it would say, and is not parsed (most short answers: a parse and its
# tree cost more than the rest of relaying them).
# What Markdown needs to be more than plain text, as three scans: one alternation of them
# all tries every branch at every character (twice the time on a long answer, which is
# looked at on every refresh of a card).
_MAYBE_RICH = (
    re.compile(r"[#*_+=|>`~\[<\t-]"),
    re.compile(r"\d[.)]"),
    re.compile(r"^ {4}", re.MULTILINE),
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
    """One top-level block, cut into pieces of at most PART_CHARS where it is that long."""
    if node.type in ("fence", "code_block"):
        return _fences(node.content, _language(node.info) if node.type == "fence" else "")
    if node.type == "table":
        return _tables(node)
    rendered = _block(node, 0)
    if len(rendered) <= PART_CHARS:
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
    chunks, current = [], ""
    for line in code.splitlines(keepends=True):
        if current and len(current) + len(line) > PART_CHARS - 40:
            chunks.append(current)
            current = ""
        current += line
    chunks.append(current)
    return [_fence(chunk, language) for chunk in chunks]


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
    tables, current = [], [header, separator]
    for row in rows:
        size = sum(len(line) + 1 for line in current) + len(row)
        if len(current) > 2 and size > PART_CHARS:
            tables.append("\n".join(current))
            current = [header, separator]
        current.append(row)
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


def _cut_lines(text: str) -> list[str]:
    pieces, current = [], ""
    for line in text.splitlines(keepends=True):
        while len(line) > PART_CHARS:  # one endless line: cut it where it must be cut
            pieces.append(current + line[: PART_CHARS - len(current)])
            line, current = line[PART_CHARS - len(current) :], ""
        if current and len(current) + len(line) > PART_CHARS:
            pieces.append(current)
            current = ""
        current += line
    if current:
        pieces.append(current)
    return pieces


def _pack(blocks: list[str]) -> list[str]:
    """Blocks joined into as few parts as fit, in order; a block is never split here."""
    parts: list[str] = []
    current = ""
    for block in blocks:
        joined = f"{current}\n\n{block}" if current else block
        if current and len(joined) > PART_CHARS:
            parts.append(current)
            joined = block
        current = joined
    if current:
        parts.append(current)
    return parts
