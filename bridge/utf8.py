"""Text that UTF-8 can carry.

Python's `json` decodes an escape such as `"\\ud800"` (and, from bytes, a CESU-style byte
sequence) into a lone surrogate: a `str` that SQLite, a socket, a log file or a Feishu call
cannot encode, so it raises wherever it lands. What comes from outside is JSON decoded in
two places — Feishu events (`bridge.feishu.json_codec`, at every level: the body, a message's
`content`, a card's value) and the agent's stdout (`bridge.runtime.acp.transport`) — and both
repair it there, once, with U+FFFD, so nothing downstream needs to care.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final


def utf8_safe(text: str) -> str:
    """Join surrogate pairs written as two code units; replace lone surrogates with U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def is_utf8_safe(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def repaired_json(value: Any) -> Any:
    """A decoded JSON value again, with every string in it (keys too, at any depth) made
    `utf8_safe`. A round trip through the encoder: only for values known to need it."""
    return json.loads(utf8_safe(json.dumps(value, ensure_ascii=False)))


# What a JSON line needs before it can decode to a lone surrogate: a \uD800-\uDFFF escape,
# or the UTF-8-style bytes of one (ED A0-BF), which `json.loads(bytes)` lets through.
_MAYBE_SURROGATE: Final = re.compile(rb"\\u[dD][89abcdefABCDEF]|\xed[\xa0-\xbf]")


def may_hold_surrogate(data: bytes) -> bool:
    """Whether some JSON line in `data` might decode to a lone surrogate (a quick scan: when
    it says no, none does). Every byte an agent writes passes here: `bytes.find` rules out
    the usual read (no `\\ud`/`\\uD` escape, no ED byte) faster than the regex could."""
    if b"\\ud" not in data and b"\\uD" not in data and b"\xed" not in data:
        return False
    return _MAYBE_SURROGATE.search(data) is not None


def repaired_json_line(line: bytes) -> bytes:
    """One line of NDJSON, re-encoded when it would decode to a lone surrogate; otherwise
    (nearly always: a regex scan) the very same bytes. A line that is not JSON is left for
    the reader's own parser to refuse."""
    if _MAYBE_SURROGATE.search(line) is None:
        return line
    try:
        text = json.dumps(json.loads(line), ensure_ascii=False)
    except (ValueError, RecursionError):
        return line
    if is_utf8_safe(text):
        return line  # an escaped pair, or "\\ud800" written as text: nothing to repair
    return utf8_safe(text).encode("utf-8") + line[len(line.rstrip(b"\r\n")) :]
