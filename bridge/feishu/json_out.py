"""The one JSON encoder for what the bridge sends Feishu: compact, UTF-8 as it is (no
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
from typing import Any

import orjson


def dumps(value: Any) -> str:
    """`value` as compact JSON text."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
