"""JSON on the Feishu wire: the one decoder for what Feishu sends and the one encoder for
what the bridge sends.

In, at every level: the request body (webhook),
the SDK's payload (long connection), and the JSON strings inside it — a message's `content`
(text, post, a file's name) and a 1.0 card's string value — which are decoded later and
would otherwise bypass the body's checks.

Invalid JSON and nesting past `MAX_DEPTH` are an `EventParseError` (they fail the same way on
every delivery, so they must be refused, never answered 5xx). A string that is not Unicode (a
lone surrogate escape such as `"\\ud800"`, which `json` accepts) is repaired with U+FFFD
(`bridge.utf8`): the message is still answered, and nothing downstream (the journal, a log
line, a Feishu call) can fail to encode it.

Out: compact, UTF-8 as it is (no
`\\uXXXX` for non-ASCII), the text a request body and the JSON strings inside it (a
message's `content`, a card entity's `data`) are written in.

orjson writes it at a fraction of `json`'s cost (a card's body is encoded twice per change:
the card as a string, then the body holding it). What orjson refuses (a lone surrogate, a
key that is not a string, an integer past 64 bits) is written by `json`, the callers repair
surrogates after (`bridge.utf8`). The two agree on every value (a property test); they may
differ only in how a float is spelled (`1e16` against `1e+16`), never in what it is, and a
NaN (never in a Feishu body, and not JSON) is written `null`.
"""

from __future__ import annotations

import json
from typing import Any, Final

import orjson

from bridge.feishu.errors import EventParseError
from bridge.utf8 import is_utf8_safe, repaired_json, utf8_safe

MAX_DEPTH: Final = 64  # Feishu's events nest about 6 deep; far deeper is an attack


def load_json(raw: bytes | str, what: str = "body") -> Any:
    """Any JSON value, checked and repaired as the module docstring says; `what` names the
    input in the error's reason (never its text)."""
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise EventParseError(f"{what} is not valid JSON") from exc
    if not _check_tree(value, what):
        value = repaired_json(value)
    return value


def decode_json(raw: bytes | str, what: str = "body") -> dict[str, Any]:
    """`load_json` for a JSON object; any other value is an `EventParseError`."""
    value = load_json(raw, what)
    if not isinstance(value, dict):
        raise EventParseError(f"{what} is not a JSON object")
    return value


def _check_tree(value: Any, what: str) -> bool:
    """Raise past `MAX_DEPTH`; False when some string (a key or a value) needs repair."""
    clean = True
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            clean = clean and is_utf8_safe(node)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise EventParseError(f"{what} nested deeper than {MAX_DEPTH}")
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)
    return clean


def dumps(value: Any) -> str:
    """`value` as compact JSON text."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dumps_utf8(value: Any) -> bytes:
    """`value` as a request body: compact JSON in UTF-8, a lone surrogate in it replaced
    with U+FFFD. What orjson writes is UTF-8 already (it refuses a surrogate): only what
    it refuses is written as text, repaired and encoded."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return utf8_safe(dumps(value)).encode("utf-8")
