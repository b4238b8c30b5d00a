from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bridge.app import main
from bridge.config import LARK_DOMAIN, load_settings, problems_for_run


def test_defaults_are_the_documented_ones() -> None:
    settings, problems = load_settings()
    assert problems == []
    assert settings is not None
    assert settings.feishu_domain == "https://open.feishu.cn"
    assert settings.feishu_event_mode == "websocket"
    assert (settings.bridge_host, settings.bridge_port) == ("127.0.0.1", 8080)
    assert settings.bridge_locale == "zh_CN"
    assert settings.bridge_first_hint_seconds == 5
    assert settings.bridge_heartbeat_seconds == 60
    assert settings.bridge_stale_seconds == 600
    assert settings.bridge_approval_timeout_seconds == 1800
    assert settings.bridge_finish_grace_seconds == 3
    assert settings.bridge_received_text is False


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FEISHU_DOMAIN", "lark")
    monkeypatch.setenv("FEISHU_EVENT_MODE", "webhook")
    monkeypatch.setenv("BRIDGE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BRIDGE_ALLOWED_USERS", "ou_a, ou_b,,")
    monkeypatch.setenv("BRIDGE_AGENT_COMMAND", "gemini --acp")
    monkeypatch.setenv("BRIDGE_FIRST_HINT_SECONDS", "0.02")
    settings, problems = load_settings()
    assert problems == []
    assert settings is not None
    assert settings.feishu_domain == LARK_DOMAIN
    assert settings.feishu_event_mode == "webhook"
    assert settings.db_path == tmp_path / "data" / "bridge.sqlite3"
    assert settings.bridge_allowed_users == ("ou_a", "ou_b")
    assert settings.agent_argv == ["gemini", "--acp"]
    assert settings.bridge_first_hint_seconds == pytest.approx(0.02)


def test_any_url_is_a_domain_and_trailing_slash_is_dropped() -> None:
    settings, _ = load_settings(feishu_domain="http://127.0.0.1:9999/")
    assert settings is not None
    assert settings.feishu_domain == "http://127.0.0.1:9999"


def test_every_problem_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_DOMAIN", "open.feishu.cn")
    monkeypatch.setenv("FEISHU_EVENT_MODE", "carrier-pigeon")
    monkeypatch.setenv("BRIDGE_PORT", "99999")
    settings, problems = load_settings()
    assert settings is None
    assert {p.variable for p in problems} == {"FEISHU_DOMAIN", "FEISHU_EVENT_MODE", "BRIDGE_PORT"}


@pytest.fixture(autouse=True)
def agent_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default agent (claude-agent-acp) is not installed here; use one that is."""
    monkeypatch.setenv(
        "BRIDGE_AGENT_COMMAND", f"{sys.executable} -m bridge.devtools.scripted_agent"
    )


def test_run_needs_credentials_and_webhook_needs_a_token() -> None:
    settings, _ = load_settings(feishu_event_mode="webhook")
    assert settings is not None
    assert [p.variable for p in problems_for_run(settings)] == [
        "FEISHU_APP_ID",
        "FEISHU_APP_SECRET",
        "FEISHU_VERIFICATION_TOKEN",
    ]


def test_check_config_prints_all_problems_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FEISHU_APP_SECRET", "s3cr3t-value-never-shown")
    monkeypatch.setenv("FEISHU_EVENT_MODE", "nope")
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "FEISHU_EVENT_MODE" in err
    assert "example: FEISHU_EVENT_MODE=websocket" in err
    assert "s3cr3t-value-never-shown" not in err


def test_check_config_names_missing_credentials_in_plain_words(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "The configuration has 2 problem(s):" in err
    assert "FEISHU_APP_ID: not set" in err
    assert "FEISHU_APP_SECRET: not set" in err


def test_check_config_accepts_a_complete_configuration(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FEISHU_APP_ID", "cli_x")
    monkeypatch.setenv("FEISHU_APP_SECRET", "secret-x")
    assert main(["check-config"]) == 0
    out = capsys.readouterr().out
    assert "websocket" in out
    assert "secret-x" not in out


def test_empty_secrets_count_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """An `FEISHU_VERIFICATION_TOKEN=` line must not silently switch the token check off."""
    monkeypatch.setenv("FEISHU_APP_ID", "cli_x")
    monkeypatch.setenv("FEISHU_APP_SECRET", "  ")
    monkeypatch.setenv("FEISHU_EVENT_MODE", "webhook")
    monkeypatch.setenv("FEISHU_VERIFICATION_TOKEN", "")
    monkeypatch.setenv("FEISHU_ENCRYPT_KEY", "")
    settings, problems = load_settings()
    assert problems == []
    assert settings is not None
    assert settings.feishu_encrypt_key is None
    assert [p.variable for p in problems_for_run(settings)] == [
        "FEISHU_APP_SECRET",
        "FEISHU_VERIFICATION_TOKEN",
    ]


def test_empty_paths_fall_back_to_their_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BRIDGE_DATA_DIR", "")
    monkeypatch.setenv("BRIDGE_WORKDIR", " ")
    settings, _ = load_settings()
    assert settings is not None
    assert settings.bridge_data_dir.name == "feishu-presence-bridge"
    assert settings.bridge_workdir == tmp_path  # the working directory, not "."


def test_check_config_finds_a_missing_agent_program_before_any_user_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FEISHU_APP_ID", "cli_x")
    monkeypatch.setenv("FEISHU_APP_SECRET", "secret-x")
    monkeypatch.setenv("BRIDGE_AGENT_COMMAND", "no-such-agent-acp --acp")
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "BRIDGE_AGENT_COMMAND: program no-such-agent-acp not found (not on PATH)" in err
    assert "example: BRIDGE_AGENT_COMMAND=claude-agent-acp" in err


def test_a_malformed_value_does_not_hide_the_missing_credentials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FEISHU_EVENT_MODE", "carrier-pigeon")
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "The configuration has 3 problem(s):" in err
    assert "FEISHU_EVENT_MODE: invalid value" in err
    assert "FEISHU_APP_ID: not set" in err
    assert "FEISHU_APP_SECRET: not set" in err
