"""Settings no longer read are never ignored silently: check-config names each one still set
(in the environment or `.env`) with what replaces it, among every other problem, and exits
2; `run` starts and says the same in its log."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.app import main
from bridge.config import checks as config_checks
from bridge.config import env_fields
from bridge.config.retired import RETIRED, retired_problems


@pytest.fixture(autouse=True)
def a_valid_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Everything check-config asks for, so the retired settings are the only problems."""
    monkeypatch.setattr(config_checks, "effective_uid", lambda: 1000)
    (tmp_path / "workspace").mkdir()
    for name, value in {
        "FEISHU_APP_ID": "cli_x",
        "FEISHU_APP_SECRET": "secret-x",
        "BRIDGE_ALLOWED_USERS": "ou_alice",
        "BRIDGE_WORKDIR": str(tmp_path / "workspace"),
        "BRIDGE_AGENT_COMMAND": f"{sys.executable} -m bridge.devtools.scripted_agent",
        "BRIDGE_LOCALE": "en_US",
    }.items():
        monkeypatch.setenv(name, value)


def test_a_retired_setting_is_not_a_setting() -> None:
    assert set(RETIRED) & set(env_fields()) == set()


def test_check_config_names_a_retired_setting_and_what_replaces_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config"]) == 0
    monkeypatch.setenv("BRIDGE_FEISHU_BUDGET_MARGIN", "0.5")
    monkeypatch.setenv("bridge_delivery_max_probe_seconds", "2")  # any case, as settings read
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "The configuration has 2 problem(s):" in err
    assert (
        "BRIDGE_FEISHU_BUDGET_MARGIN: is no longer a setting, and its value is not used: set"
        " BRIDGE_FEISHU_APP_CALLS_PER_SECOND instead" in err
    )
    assert (
        "BRIDGE_DELIVERY_MAX_PROBE_SECONDS: is no longer a setting, and its value is not used:"
        " the bridge derives it from BRIDGE_DELIVERY_GIVE_UP_SECONDS. Remove it" in err
    )
    assert "0.5" not in err  # never the value


def test_check_config_names_a_retired_setting_written_in_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """tests/conftest.py runs each test in its own folder: `.env` there is the bridge's."""
    (tmp_path / ".env").write_text("BRIDGE_PROGRESS_INTERVAL_SECONDS=10\n")
    monkeypatch.setenv("BRIDGE_LOCALE", "zh_CN")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "配置有 1 处问题：" in err
    assert "BRIDGE_PROGRESS_INTERVAL_SECONDS：已不再是配置项，设置的值不会生效" in err
    assert "固定使用 3 s" in err


def test_retired_settings_come_with_every_other_problem_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FEISHU_APP_SECRET")
    monkeypatch.setenv("FEISHU_EVENT_MODE", "carrier-pigeon")
    monkeypatch.setenv("BRIDGE_FEISHU_SENDS_PER_MINUTE", "500")
    monkeypatch.setenv("BRIDGE_FEISHU_CHAT_CALLS_PER_SECOND", "3")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "The configuration has 4 problem(s):" in err
    for line in (
        "FEISHU_APP_SECRET: not set",
        "FEISHU_EVENT_MODE: invalid value",
        "BRIDGE_FEISHU_SENDS_PER_MINUTE: is no longer a setting",
        "BRIDGE_FEISHU_CHAT_CALLS_PER_SECOND: is no longer a setting, and its value is not"
        " used: the bridge always uses 5/s",
    ):
        assert line in err


def test_every_retired_setting_is_found_in_the_environment_and_in_env_file(
    tmp_path: Path,
) -> None:
    names = list(RETIRED)
    half = len(names) // 2
    env_file = tmp_path / "settings.env"
    env_file.write_text("".join(f"{name.lower()}=1\n" for name in names[half:]))
    found = retired_problems({name: "1" for name in names[:half]}, env_file)
    assert [p.variable for p in found] == names
    assert retired_problems({}, None) == []


class _Started(Exception):
    """Raised where the service would be built: `run` got that far."""


@pytest.fixture
def logging_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


@pytest.mark.usefixtures("logging_restored")
def test_run_starts_with_a_retired_setting_and_warns_about_it_in_its_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BRIDGE_DELIVERY_FIRST_PROBE_SECONDS", "0.1")
    monkeypatch.setattr("bridge.app.forbid_environ_reading", lambda: True)  # keep pytest dumpable

    def build_service(*_: object, **__: object) -> None:
        raise _Started

    monkeypatch.setattr("bridge.running.build_service", build_service)
    with pytest.raises(_Started):
        main(["run"])
    err = capsys.readouterr().err
    assert (
        "WARNING bridge.running: configuration: BRIDGE_DELIVERY_FIRST_PROBE_SECONDS: is no"
        " longer a setting, and its value is not used: the bridge derives it from"
        " BRIDGE_DELIVERY_GIVE_UP_SECONDS. Remove it" in err
    )
