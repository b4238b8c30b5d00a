from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from bridge.app import main
from bridge.config import LARK_DOMAIN, Settings
from bridge.config import checks as config_checks
from bridge.config.checks import describe_access, is_loopback, load_settings, problems_for_run


def test_defaults_are_the_documented_ones() -> None:
    settings, problems = load_settings()
    assert problems == []
    assert settings is not None
    assert settings.feishu.feishu_domain == "https://open.feishu.cn"
    assert settings.feishu.feishu_event_mode == "websocket"
    assert (settings.feishu.bridge_host, settings.feishu.bridge_port) == ("127.0.0.1", 8080)
    assert settings.presence.bridge_locale == "zh_CN"
    assert settings.presence.bridge_first_hint_seconds == 3
    assert settings.presence.bridge_heartbeat_seconds == 60
    assert settings.presence.bridge_stale_seconds == 600
    assert settings.presence.bridge_approval_timeout_seconds == 1800
    assert settings.presence.bridge_finish_grace_seconds == 3
    assert settings.presence.bridge_received_text is False


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
    assert settings.feishu.feishu_domain == LARK_DOMAIN
    assert settings.feishu.feishu_event_mode == "webhook"
    assert settings.store.db_path == tmp_path / "data" / "bridge.sqlite3"
    assert settings.access.bridge_allowed_users == ("ou_a", "ou_b")
    assert settings.agent.agent_argv == ["gemini", "--acp"]
    assert settings.presence.bridge_first_hint_seconds == pytest.approx(0.02)


def test_the_running_turns_limit_is_read_under_its_old_name_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRIDGE_MAX_CONVERSATIONS", "7")
    settings, problems = load_settings()
    assert (problems, settings and settings.agent.bridge_max_running_turns) == ([], 7)
    monkeypatch.setenv("BRIDGE_MAX_RUNNING_TURNS", "9")  # the new name wins
    settings, problems = load_settings()
    assert (problems, settings and settings.agent.bridge_max_running_turns) == ([], 9)
    monkeypatch.setenv("BRIDGE_MAX_CONVERSATIONS", "0")
    monkeypatch.delenv("BRIDGE_MAX_RUNNING_TURNS")
    settings, problems = load_settings()
    assert [p.variable for p in problems] == ["BRIDGE_MAX_RUNNING_TURNS"]


def test_any_url_is_a_domain_and_trailing_slash_is_dropped() -> None:
    settings, _ = load_settings(feishu_domain="http://127.0.0.1:9999/")
    assert settings is not None
    assert settings.feishu.feishu_domain == "http://127.0.0.1:9999"


def test_every_problem_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_DOMAIN", "open.feishu.cn")
    monkeypatch.setenv("FEISHU_EVENT_MODE", "carrier-pigeon")
    monkeypatch.setenv("BRIDGE_PORT", "99999")
    settings, problems = load_settings()
    assert settings is None
    assert {p.variable for p in problems} == {"FEISHU_DOMAIN", "FEISHU_EVENT_MODE", "BRIDGE_PORT"}


@pytest.fixture(autouse=True)
def agent_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The default agent (claude-agent-acp) is not installed here; use one that is. The
    default workdir (the folder the bridge runs in, where it reads `.env`) is refused, so
    the agent gets a folder of its own."""
    monkeypatch.setenv(
        "BRIDGE_AGENT_COMMAND", f"{sys.executable} -m bridge.devtools.scripted_agent"
    )
    (tmp_path / "workspace").mkdir()
    monkeypatch.setenv("BRIDGE_WORKDIR", str(tmp_path / "workspace"))


@pytest.fixture(autouse=True)
def an_ordinary_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root, whoever runs the tests (CI is root); the root checks below say so."""
    monkeypatch.setattr(config_checks, "effective_uid", lambda: 1000)


@pytest.fixture(autouse=True)
def someone_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """An allow-list, so the tests of other variables see only their own problems; the
    access checks below clear it."""
    monkeypatch.setenv("BRIDGE_ALLOWED_USERS", "ou_alice")


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
    assert settings.feishu.feishu_encrypt_key is None
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
    assert settings.store.bridge_data_dir.name == "feishu-presence-bridge"
    assert settings.agent.bridge_workdir == tmp_path  # the working directory, not "."


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


# --- what the agent can reach ------------------------------------------------------------------


def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_APP_ID", "cli_x")
    monkeypatch.setenv("FEISHU_APP_SECRET", "secret-x")
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")


def test_a_workdir_that_holds_the_folder_of_env_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent writes in its workdir; a `.env` there would be the bridge's settings next
    start (the working folder is tmp_path here: tests/conftest.py changes into it)."""
    _credentials(monkeypatch)
    monkeypatch.setenv("BRIDGE_DATA_DIR", str(tmp_path / "elsewhere" / "data"))
    for workdir in (tmp_path, tmp_path.parent):
        monkeypatch.setenv("BRIDGE_WORKDIR", str(workdir))
        assert main(["check-config"]) == 2
        err = capsys.readouterr().err
        assert f"BRIDGE_WORKDIR: is or contains {tmp_path.resolve()}, where the bridge reads" in err
        assert "example: BRIDGE_WORKDIR=/srv/feishu-bridge/workspace" in err
        assert main(["run"]) == 2


def test_a_workdir_that_holds_the_data_folder_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _credentials(monkeypatch)
    monkeypatch.setenv("BRIDGE_DATA_DIR", str(tmp_path / "workspace" / "state"))
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "The configuration has 1 problem(s):" in err
    expected = f"is or contains the data folder {(tmp_path / 'workspace' / 'state').resolve()}"
    assert f"BRIDGE_WORKDIR: {expected}" in err


def test_a_workdir_inside_the_data_folder_is_allowed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _credentials(monkeypatch)
    monkeypatch.setenv("BRIDGE_DATA_DIR", str(tmp_path))
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    assert main(["check-config"]) == 0


@pytest.mark.parametrize(
    ("domain", "ok"),
    [
        ("https://open.feishu.cn", True),
        ("lark", True),
        ("http://127.0.0.1:9999", True),
        ("http://127.8.0.1", True),
        ("http://[::1]:8080", True),
        ("http://localhost:8080", True),
        ("http://open.feishu.cn", False),
        ("http://10.0.0.5:8080", False),
        ("http://localhost.evil.example", False),
        ("http://[::2]", False),
    ],
)
def test_feishu_domain_must_be_https_except_on_loopback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], domain: str, ok: bool
) -> None:
    _credentials(monkeypatch)
    monkeypatch.setenv("FEISHU_DOMAIN", domain)
    assert main(["check-config"]) == (0 if ok else 2)
    err = capsys.readouterr().err
    assert ("FEISHU_DOMAIN: must be an https URL" in err) is not ok


def _sandboxed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bwrap_script: str | None) -> None:
    """BRIDGE_AGENT_SANDBOX=bwrap with PATH holding only a stand-in bwrap (or none) and the
    agent's own folder."""
    _credentials(monkeypatch)
    monkeypatch.setenv("BRIDGE_AGENT_SANDBOX", "bwrap")
    monkeypatch.setenv("BRIDGE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    tools = tmp_path / "tools"
    tools.mkdir()
    if bwrap_script is not None:
        bwrap = tools / "bwrap"
        bwrap.write_text(f"#!/bin/sh\n{bwrap_script}\n")
        bwrap.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{Path(sys.executable).parent}")
    monkeypatch.setenv(
        "BRIDGE_AGENT_COMMAND", f"{sys.executable} -m bridge.devtools.scripted_agent"
    )


def test_check_config_names_a_missing_bubblewrap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sandboxed(monkeypatch, tmp_path, None)
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "BRIDGE_AGENT_SANDBOX: bubblewrap (bwrap) is not installed: install it" in err
    assert "apt-get install bubblewrap" in err
    assert main(["run"]) == 2


def test_check_config_names_a_sandbox_the_kernel_refuses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = "bwrap: No permissions to create new namespace"
    _sandboxed(monkeypatch, tmp_path, f"echo '{refusal}' >&2; exit 1")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert f"BRIDGE_AGENT_SANDBOX: bubblewrap cannot start a sandbox here ({refusal})" in err
    assert "Enable unprivileged user namespaces" in err


@pytest.mark.skipif(
    Path(sys.prefix).resolve().is_relative_to("/tmp"),
    reason="this checkout lies under /tmp, which the sandbox hides from the agent",
)
def test_check_config_accepts_a_sandbox_that_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = tmp_path / "calls"
    _sandboxed(monkeypatch, tmp_path, f'echo "$@" >> {calls}; exit 0')
    assert main(["check-config"]) == 0
    (probe,) = calls.read_text().splitlines()  # probed once
    assert probe.startswith("--unshare-all --share-net --die-with-parent")
    assert probe.endswith("-- true")


def test_check_config_refuses_a_sandbox_that_would_hide_the_agent_program(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bridge started from the folder its agent is installed in: the sandbox hides the
    working folder (its `.env`), and with it the agent."""
    _sandboxed(monkeypatch, tmp_path, "exit 0")
    agent = tmp_path / "my-agent"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    monkeypatch.setenv("BRIDGE_AGENT_COMMAND", f"{agent} --acp")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert f"BRIDGE_AGENT_COMMAND: the agent program {agent} lies in a folder the sandbox" in err


# -- root without a sandbox (issue 35) ---------------------------------------------------------


def test_as_root_without_a_sandbox_check_config_and_run_refuse_and_say_how_to_turn_it_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root reads every process's memory and environ whatever the bridge does: an agent
    with root's shell and no sandbox would read the App Secret."""
    _credentials(monkeypatch)
    monkeypatch.setattr(config_checks, "effective_uid", lambda: 0)
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "The configuration has 1 problem(s):" in err
    assert "BRIDGE_AGENT_SANDBOX: the bridge runs as root and BRIDGE_AGENT_SANDBOX=none" in err
    assert "Turn the sandbox on: BRIDGE_AGENT_SANDBOX=bwrap (see docs/sandbox.md)" in err
    assert "set BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX=true" in err
    assert "example: BRIDGE_AGENT_SANDBOX=bwrap" in err
    assert main(["run"]) == 2  # refused before anything starts
    assert "BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX=true" in capsys.readouterr().err


def test_as_root_the_override_lets_check_config_and_run_start_with_the_secrets_out_of_the_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _credentials(monkeypatch)
    monkeypatch.setenv("BRIDGE_OPS_TOKEN", "ops-token-x")
    monkeypatch.setenv("BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX", "true")
    monkeypatch.setattr(config_checks, "effective_uid", lambda: 0)
    assert main(["check-config"]) == 0
    started: list[Settings] = []

    async def run_service(settings: Settings, **_: object) -> int:
        started.append(settings)
        return 0

    monkeypatch.setattr("bridge.running.run_service", run_service)
    monkeypatch.setattr("bridge.app.forbid_environ_reading", lambda: True)  # keep pytest dumpable
    assert main(["run"]) == 0
    (settings,) = started
    # The secrets reached the settings explicitly; the environment no longer holds them.
    assert settings.feishu.feishu_app_secret is not None
    assert settings.feishu.feishu_app_secret.get_secret_value() == "secret-x"
    assert settings.ops.bridge_ops_token is not None
    assert settings.ops.bridge_ops_token.get_secret_value() == "ops-token-x"
    assert "FEISHU_APP_SECRET" not in os.environ
    assert "BRIDGE_OPS_TOKEN" not in os.environ
    assert os.environ["FEISHU_APP_ID"] == "cli_x"  # not a secret: left alone


@pytest.mark.skipif(
    Path(sys.prefix).resolve().is_relative_to("/tmp"),
    reason="this checkout lies under /tmp, which the sandbox hides from the agent",
)
def test_as_root_a_sandbox_needs_no_override(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _sandboxed(monkeypatch, tmp_path, "exit 0")
    monkeypatch.setattr(config_checks, "effective_uid", lambda: 0)
    assert main(["check-config"]) == 0


# -- who can reach the agent, who can approve, who can read the operator API ---------------


def test_run_refuses_an_agent_open_to_everyone_and_says_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _credentials(monkeypatch)
    monkeypatch.delenv("BRIDGE_ALLOWED_USERS")
    assert main(["check-config"]) == 2
    assert main(["run"]) == 2  # refused before anything starts
    err = capsys.readouterr().err
    assert "BRIDGE_ALLOWED_USERS: with BRIDGE_ALLOWED_USERS and BRIDGE_ALLOWED_CHATS both" in err
    assert "set BRIDGE_ALLOW_ALL=true to allow everyone on purpose" in err
    assert "example: BRIDGE_ALLOWED_USERS=ou_1a2b3c,ou_4d5e6f" in err


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BRIDGE_ALLOW_ALL", "true"),
        ("BRIDGE_ALLOWED_CHATS", "oc_team"),
        ("BRIDGE_ALLOWED_USERS", "ou_a"),
    ],
)
def test_an_allow_list_or_an_explicit_allow_all_is_accepted(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    _credentials(monkeypatch)
    monkeypatch.delenv("BRIDGE_ALLOWED_USERS")
    monkeypatch.setenv(variable, value)
    assert main(["check-config"]) == 0


def test_four_eyes_without_approvers_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _credentials(monkeypatch)
    monkeypatch.setenv("BRIDGE_REQUESTER_MAY_APPROVE", "false")
    assert main(["check-config"]) == 2
    err = capsys.readouterr().err
    assert "BRIDGE_APPROVERS: required when BRIDGE_REQUESTER_MAY_APPROVE=false" in err
    monkeypatch.setenv("BRIDGE_APPROVERS", "ou_boss")
    assert main(["check-config"]) == 0


def test_an_operator_api_off_loopback_needs_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _credentials(monkeypatch)
    monkeypatch.setenv("BRIDGE_OPS_HOST", "0.0.0.0")
    assert main(["check-config"]) == 2
    assert main(["run"]) == 2  # refused before anything starts
    err = capsys.readouterr().err
    assert "BRIDGE_OPS_TOKEN: required when BRIDGE_OPS_HOST (0.0.0.0) is not a loopback" in err
    _credentials(monkeypatch)  # `run` took the App Secret out of this process's environment
    monkeypatch.setenv("BRIDGE_OPS_TOKEN", "t0ken-never-shown")
    assert main(["check-config"]) == 0
    assert "t0ken-never-shown" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.53", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("ops.internal", False),
    ],
)
def test_loopback_means_only_this_machine(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_access_line_names_who_can_reach_and_who_can_approve() -> None:
    settings, _ = load_settings(
        bridge_allowed_users="ou_a,ou_b",
        bridge_approvers="ou_boss",
        bridge_requester_may_approve=False,
        bridge_ops_token="t0ken-never-shown",
    )
    assert settings is not None
    assert describe_access(settings) == (
        "access: who can reach the agent: users=2 [ou_a, ou_b] chats=any; "
        "who can approve: not the requester, approvers=1 [ou_boss]"
    )


def test_help_describes_the_product_not_the_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "Connects Feishu/Lark chats to an AI coding agent" in out
    assert "Settings are read here" not in out


def test_agent_profiles_and_workspaces_are_named_lists_and_the_first_is_the_default(
    tmp_path: Path,
) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        bridge_agents="claude=claude-agent-acp; qwen=qwen --acp",
        bridge_workspaces=f"app={tmp_path};docs={tmp_path}/../{tmp_path.name}",
    )
    assert settings.agent.agent_profiles == (
        ("claude", ["claude-agent-acp"]),
        ("qwen", ["qwen", "--acp"]),
    )
    assert settings.agent.workspace_roots == (
        ("app", tmp_path.resolve()),
        ("docs", tmp_path.resolve()),
    )
    for bad in ("a=x;a=y", "claude", "bad name=x", "q=qwen 'unclosed"):
        with pytest.raises(ValidationError):
            Settings(_env_file=None, bridge_agents=bad)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("claude-agent-acp", "claude-agent-acp"),
        ("unshare -rn /opt/agents/claude-code-acp", "claude-code-acp"),  # found by a real agent
        ("env A=1 qwen --acp", "qwen"),
        ("python -m bridge.devtools.scripted_agent", "scripted_agent"),
        ("npx -y @zed-industries/claude-code-acp@0.16.2", "claude-code-acp"),
        ("/usr/bin/python3 /x/echo_agent.py", "echo_agent"),
        # The offline rig's wrapper (found with the real agents): the agent follows `--`.
        ("unshare -rn python -m bridge.devtools.fake_model -- /x/claude-acp", "claude-acp"),
        ("uv run -- qwen --acp", "qwen"),
        ("npx -y @x/agent -- --flag", "agent"),  # npx passes what follows `--` to the agent
    ],
)
def test_the_one_agent_is_named_after_the_program_it_runs(command: str, name: str) -> None:
    settings = Settings(_env_file=None, bridge_agent_command=command)  # type: ignore[call-arg]
    assert settings.agent.agent_profiles[0][0] == name


def test_operator_schedules_are_read_from_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "BRIDGE_SCHEDULES",
        '[{"chat_id": "oc_1", "every": "1h", "prompt": "build"},'
        ' {"chat_id": "oc_2", "at": "2030-06-01T09:30", "prompt": "ship"}]',
    )
    every, once = Settings(_env_file=None).schedules.bridge_schedules  # type: ignore[call-arg]
    assert (every.chat_id, every.every_seconds, once.at) == ("oc_1", 3600.0, "2030-06-01T09:30")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not json", "JSON list"),
        ('{"chat_id": "oc_1"}', "JSON list"),
        ('[{"chat_id": "oc_1", "prompt": "x"}]', "exactly one of"),
        ('[{"chat_id": "oc_1", "every": "soon", "prompt": "x"}]', "interval like"),
        ('[{"chat_id": "oc_1", "at": "9am", "prompt": "x"}]', "ISO date-time"),
        ('[{"chat_id": "oc_1", "every": "10s", "prompt": "x"}]', "shorter than"),
    ],
)
def test_a_bad_operator_schedule_stops_the_start_with_its_problem(
    monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    monkeypatch.setenv("BRIDGE_SCHEDULES", value)
    with pytest.raises(ValidationError, match=problem):
        Settings(_env_file=None)  # type: ignore[call-arg]


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ValidationError, match="unknown time zone"):
        Settings(_env_file=None, bridge_timezone="Mars/Olympus")  # type: ignore[call-arg]
