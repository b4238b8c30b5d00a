"""The settings are sections (bridge/config/), each read from the same flat variable names:
one name per setting across every section, every section's problems at once, and each
consumer handed its own section."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from bridge.config import SECTIONS, Settings, env_fields
from bridge.config.checks import load_settings
from bridge.config.presence import PresenceSection


def test_every_variable_is_its_field_in_upper_case_once() -> None:
    fields = env_fields()
    assert sum(len(model.model_fields) for model in SECTIONS.values()) == len(fields)
    for env, (section, name, _) in fields.items():
        assert env == name.upper()
        assert name in SECTIONS[section].model_fields
    assert list(SECTIONS) == list(Settings.model_fields)  # one attribute per section


def test_the_problems_of_every_section_come_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_PORT", "99999")  # feishu
    monkeypatch.setenv("BRIDGE_MAX_AGENTS", "0")  # agent
    monkeypatch.setenv("BRIDGE_STALE_SECONDS", "-1")  # presence
    monkeypatch.setenv("BRIDGE_OPS_PORT", "eighty")  # ops
    settings, problems = load_settings()
    assert settings is None
    assert [p.variable for p in problems] == [
        "BRIDGE_PORT",
        "BRIDGE_MAX_AGENTS",
        "BRIDGE_STALE_SECONDS",
        "BRIDGE_OPS_PORT",
    ]


def test_a_value_given_in_process_wins_over_the_environment_and_env_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("BRIDGE_HEARTBEAT_SECONDS=7\nBRIDGE_STALE_SECONDS=8\n")
    monkeypatch.setenv("BRIDGE_STALE_SECONDS", "9")  # the environment wins over .env
    settings = Settings(bridge_first_hint_seconds=0.5)
    presence = settings.presence
    assert (presence.bridge_first_hint_seconds, presence.bridge_heartbeat_seconds) == (0.5, 7.0)
    assert presence.bridge_stale_seconds == 9.0
    assert Settings(_env_file=None).presence.bridge_heartbeat_seconds == 60.0


def test_a_whole_section_may_be_given() -> None:
    presence = PresenceSection(_env_file=None, bridge_locale="en_US")  # type: ignore[call-arg]
    assert Settings(presence=presence).presence is presence


def test_a_name_no_section_has_is_refused_in_process() -> None:
    """A test or bench still passing a retired setting fails loudly, not silently."""
    with pytest.raises(TypeError, match="bridge_progress_interval_seconds"):
        Settings(bridge_progress_interval_seconds=0.0)


def test_a_section_is_frozen() -> None:
    settings = Settings(_env_file=None)
    with pytest.raises(ValidationError):
        settings.presence.bridge_locale = "en_US"  # type: ignore[misc]


def test_an_operator_chooses_at_most_49_settings_each_with_a_reason() -> None:
    from bridge.config import env_fields, operator_fields
    from bridge.config.base import is_clock

    chosen = operator_fields()
    # 48: BRIDGE_STATE_REACTIONS, BRIDGE_URGENT and BRIDGE_BOT_MENU (issue 45) joined the
    # 45, one switch for each Feishu surface; the urge's delay is one of the product's clocks.
    # 49: BRIDGE_CONFIG_FILE (issue 44), the one way to several apps: what each app and
    # project holds goes in that file, not in more variables.
    assert len(chosen) <= 49, sorted(chosen)
    for name, (_, _, info) in env_fields().items():
        extra = info.json_schema_extra
        assert isinstance(extra, dict), name
        assert extra.get("why"), f"{name} says no why"
        # The product's clocks are kept for tests and demos, never an operator's choice.
        assert (name in chosen) is not is_clock(info), name
