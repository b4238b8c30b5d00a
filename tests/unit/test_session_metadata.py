from __future__ import annotations

import pytest

from bridge.ops.sessions import InvalidMetadata, check_display_name
from bridge.preferences import DISPLAY_NAME_PREFERENCE, agent_choices


@pytest.mark.parametrize(
    "value",
    ["x" * 257, "a\nb", "tab\there", "nul\x00", "del\x7f", "c1\x85", 3, ["x"], {"a": 1}],
)
def test_a_display_name_too_long_or_with_a_control_character_is_refused(value: object) -> None:
    with pytest.raises(InvalidMetadata):
        check_display_name(value)


def test_a_display_name_of_256_characters_of_any_script_is_kept_and_empty_clears() -> None:
    assert check_display_name("发" * 256) == "发" * 256
    assert check_display_name("<b>release</b> & 'room'") == "<b>release</b> & 'room'"
    assert check_display_name("") is None
    assert check_display_name(None) is None


def test_the_operators_names_never_reach_the_agent() -> None:
    chosen = {"mode": "plan", "config:model": "deep", DISPLAY_NAME_PREFERENCE: "release room"}
    assert agent_choices(chosen) == {"mode": "plan", "config:model": "deep"}
