"""`feishu-bridge status` reads the operator API's settings (BRIDGE_OPS_*) as `run` reads them:
once, through the settings' own section, from the environment and `.env` alike."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from bridge.app import main


class _Asked:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    def __call__(self, url: str, *, headers: dict[str, str], timeout: float) -> httpx.Response:
        self.calls.append((url, headers))
        return httpx.Response(200, json={"ready": True})


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> _Asked:
    fake = _Asked()
    monkeypatch.setattr(httpx, "get", fake)
    return fake


def test_status_asks_the_default_listener_without_a_token(
    asked: _Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ready": True}
    ((url, headers),) = asked.calls
    assert url == "http://127.0.0.1:8081/status"
    assert "Authorization" not in headers


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:9000/status"),  # bound everywhere: asked on loopback
        ("::", "http://127.0.0.1:9000/status"),
        ("::1", "http://[::1]:9000/status"),
        ("ops.internal", "http://ops.internal:9000/status"),
    ],
)
def test_status_asks_the_listener_of_the_environment_with_its_token(
    monkeypatch: pytest.MonkeyPatch, asked: _Asked, host: str, url: str
) -> None:
    monkeypatch.setenv("BRIDGE_OPS_HOST", host)
    monkeypatch.setenv("BRIDGE_OPS_PORT", "9000")
    monkeypatch.setenv("BRIDGE_OPS_TOKEN", "t0ken")
    assert main(["status"]) == 0
    assert asked.calls[0][0] == url
    assert asked.calls[0][1]["Authorization"] == "Bearer t0ken"


def test_status_reads_the_operator_settings_from_env_file_as_run_does(
    tmp_path: Path, asked: _Asked
) -> None:
    """tests/conftest.py runs each test in its own folder: `.env` there is the bridge's."""
    (tmp_path / ".env").write_text("BRIDGE_OPS_PORT=9100\nBRIDGE_OPS_TOKEN=from-file\n")
    assert main(["status"]) == 0
    ((url, headers),) = asked.calls
    assert url == "http://127.0.0.1:9100/status"
    assert headers["Authorization"] == "Bearer from-file"


def test_a_malformed_operator_setting_is_named_and_nothing_is_asked(
    monkeypatch: pytest.MonkeyPatch, asked: _Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")
    monkeypatch.setenv("BRIDGE_OPS_PORT", "eighty")
    monkeypatch.setenv("BRIDGE_AGENT_COMMAND", "'unclosed")  # another section's: not status's
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert "The configuration has 1 problem(s):" in err
    assert "BRIDGE_OPS_PORT: invalid value" in err
    assert asked.calls == []


def test_an_explicit_url_wins(asked: _Asked, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_OPS_PORT", "9000")
    assert main(["status", "--url", "http://10.0.0.5:8081/"]) == 0
    assert asked.calls[0][0] == "http://10.0.0.5:8081/status"
