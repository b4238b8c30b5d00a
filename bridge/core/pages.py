"""Where a long answer is cut into pages: a live card's pages (`status_card`) and, in lines
style, the messages a long answer goes out in while it streams (`long_answer`).

A page closes at the best place that fits: after a paragraph outside a code block, else after
a line outside one, else after any line (the code block is opened again on the next page,
`reopened`), else where it fills. Sizes are counted as Feishu counts them where it matters:
bytes, not characters (`weight`).
"""

from __future__ import annotations

# Characters escaped on the way (a backslash for Markdown, another for JSON): 3 bytes each.
_ESCAPED = frozenset("\\`*_~[]()<>#+-=|{}.!\"'\n\t")
# All escaped characters are ASCII, so they are counted in the UTF-8 bytes: deleting every
# other byte leaves them (one pass in C, where a count per character took 24).
_NOT_ESCAPED = bytes(b for b in range(256) if chr(b) not in _ESCAPED)
_FENCE = "```"
# A code block opened again carries at most this much of its fence line, so a page always
# shrinks what is left however long the fence line (a fence is ``` and a language).
_FENCE_KEPT = 64


def weight(text: str) -> int:
    """At least the bytes `text` takes in a card: its UTF-8 length, plus two for each
    character that card Markdown or JSON escapes."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data) + 2 * len(data.translate(None, _NOT_ESCAPED))


def page_end(text: str, chars: int, most: int) -> int:
    """Where a page of `text` that outgrew `chars` characters or a weight of `most` closes:
    after a paragraph outside a code block if one ends in the page's last half, else after a
    line outside one, else after any line (a long code block goes on in the next page), else
    where it fills."""
    filled = _filled(text, chars, most)
    head = text[:filled]
    paragraph, line = _breaks(head)
    for end in (paragraph, line):
        if end >= filled // 2:
            return end
    newline = head.rfind("\n")
    return newline + 1 if newline >= filled // 2 else max(filled, 1)


def paragraph_end(text: str, chars: int, most: int) -> int | None:
    """Where a page of `text` closes if it may close only after a paragraph outside a code
    block, in the page's last half; None if no paragraph ends there (a long code block, a
    table, one long paragraph)."""
    filled = _filled(text, chars, most)
    paragraph, _ = _breaks(text[:filled])
    return paragraph if paragraph >= max(filled // 2, 1) else None


def _filled(text: str, chars: int, most: int) -> int:
    """How much of `text` a page of `chars` characters and a weight of `most` holds."""
    filled = min(len(text), chars)
    if weight(text[:filled]) <= most:
        return filled
    fits, over = 0, filled  # weighed by halves: a prefix's weight grows with its length
    while over - fits > 1:
        middle = (fits + over) // 2
        if weight(text[:middle]) <= most:
            fits = middle
        else:
            over = middle
    return fits


def _breaks(head: str) -> tuple[int, int]:
    """The last paragraph end and the last line end in `head` outside a code block (-1).
    A paragraph ends at a blank line followed by a line that is not indented: an indented
    one goes on a list item above it (or, alone on a page, would read as code)."""
    fence = False
    paragraph = line = blank = -1
    at = 0
    rows = head.split("\n")
    for i, row in enumerate(rows):
        if row.strip() and blank >= 0 and not row[0].isspace():
            paragraph = blank  # the line after it begun, if not yet complete
        if i == len(rows) - 1:
            break  # complete lines only from here on
        at += len(row) + 1
        if row.lstrip().startswith(_FENCE):
            fence = not fence
        if row.strip():
            blank = -1
        elif not fence:
            blank = at
        if not fence:
            line = at
    return paragraph, line


def open_fence(text: str, opened: str = "") -> str:
    """The fence line of a code block still open at the end of `text` (which begins inside
    the block `opened` opened, if any); "" when none is."""
    for row in text.split("\n"):
        stripped = row.lstrip()
        if stripped.startswith(_FENCE):
            opened = "" if opened else stripped
    return opened


def reopened(fence: str, text: str) -> str:
    """Text that begins inside a code block, with the block opened again on top."""
    return f"{fence[:_FENCE_KEPT]}\n{text}" if fence else text
