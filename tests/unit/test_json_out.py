"""What the bridge sends Feishu is the JSON `json.dumps` would write: the same value for any
value, the same text for text (a card, a message's content), compact and unescaped."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bridge.feishu.json_codec import dumps, dumps_utf8
from bridge.utf8 import utf8_safe

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # lone surrogates too
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def reference(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@given(VALUES)
def test_any_value_is_written_as_json_writes_it(value: Any) -> None:
    ours, theirs = dumps(value), reference(value)
    assert json.loads(ours) == json.loads(theirs)


@given(st.dictionaries(st.text(), st.text() | st.lists(st.text(), max_size=3), max_size=5))
def test_text_is_written_byte_for_byte_as_json_writes_it(value: dict[str, Any]) -> None:
    assert dumps(value) == reference(value)


def test_a_key_that_is_not_a_string_is_written_as_json_writes_it() -> None:
    assert dumps({1: "a"}) == reference({1: "a"}) == '{"1":"a"}'


@given(VALUES)
def test_a_request_body_is_the_text_made_utf8_safe_and_encoded(value: Any) -> None:
    """A body's bytes: orjson's own where it writes the value, the repaired text where it
    refuses it (a lone surrogate becomes U+FFFD, never an encoding error)."""
    assert dumps_utf8(value) == utf8_safe(dumps(value)).encode("utf-8")


def test_a_lone_surrogate_in_a_body_is_sent_as_the_replacement_character() -> None:
    assert dumps_utf8({"text": "a\ud800b"}) == '{"text":"a\ufffdb"}'.encode()
