"""Several apps in one bridge, the configuration file (BRIDGE_CONFIG_FILE, issue 44): a file
of apps, projects and routes resolves to one model, and so do the single-app environment
settings; every problem of the file is named at once, at its line and key, in the order of
the file; secrets are referenced, never written, and never shown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.app import main
from bridge.config import Settings
from bridge.config import checks as config_checks
from bridge.config.apps import Apps, apps_from_settings
from bridge.config.apps_file import load_apps
from bridge.config.checks import ConfigProblem
from bridge.config.toml_lines import key_lines
from bridge.i18n import Translator

ROOT = Path(__file__).resolve().parents[2]
AGENT = f"{sys.executable} -m bridge.devtools.scripted_agent"

THREE_APPS = """\
[projects.backend]
agent_command = "{agent}"
workdir = "backend"
mode = "plan"

[projects.docs]
agents = { claude = "{agent}", codex = "{agent} --codex" }
workspaces = { docs = "docs", site = "{site}" }
model = "opus"

[apps.claude]
app_id = "cli_claude"
app_secret_env = "CLAUDE_APP_SECRET"
allowed_users = ["ou_1", "ou_2"]
default_project = "backend"

[apps.codex]
app_id = "cli_codex"
app_secret_file = "codex.secret"
mode = "webhook"
verification_token_env = "CODEX_TOKEN"
allowed_chats = "oc_1, oc_2"
requester_may_approve = false
approvers = ["ou_lead"]
default_project = "docs"

[apps.team]
app_id = "cli_team"
app_secret_env = "TEAM_APP_SECRET"
domain = "lark"
allow_all = true
default_project = "backend"

[[routes]]
app = "claude"
chat = "oc_1"
project = "docs"

[[routes]]
app = "claude"
chat = "oc_1"
thread = "omt_1"
project = "backend"
"""

MISTAKES = """\
[projects.backend]
agent_command = "{agent}"
workdir = "backend"
sandbox = "bwrap"

[apps.claude]
app_id = "cli_a"
app_secret = "literal-secret-never-shown"
default_project = "x"
allow_all = "yes"

[apps.codex]
app_id = "cli_a"
app_secret_env = "NOT_SET_ANYWHERE"
mode = "webhook"
allow_all = true

[apps.team]
app_id = "cli_c"
app_secret_file = "missing.secret"
allowed_users = []

[[routes]]
app = "nobody"
chat = "oc_1"
project = "backend"

[[routes]]
app = "team"
chat = "oc_1"
project = "frontend"
"""

SECRETS = ("claude-secret-from-env", "codex-secret-from-file", "team-secret", "codex-token")


@pytest.fixture(autouse=True)
def an_ordinary_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root, whoever runs the tests (CI is root): no project is refused for that."""
    monkeypatch.setattr(config_checks, "effective_uid", lambda: 1000)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file's folder, with the projects' folders and the secrets the file references."""
    for name in ("backend", "docs", "site"):
        (tmp_path / name).mkdir()
    (tmp_path / "codex.secret").write_text("codex-secret-from-file\n", encoding="utf-8")
    monkeypatch.setenv("CLAUDE_APP_SECRET", "claude-secret-from-env")
    monkeypatch.setenv("TEAM_APP_SECRET", "team-secret")
    monkeypatch.setenv("CODEX_TOKEN", "codex-token")
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")
    return tmp_path


def write(folder: Path, text: str) -> Path:
    path = folder / "bridge.toml"
    text = text.replace("{agent}", AGENT).replace("{site}", str(folder / "site"))
    path.write_text(text, encoding="utf-8")
    return path


def read(path: Path, **settings: object) -> tuple[Apps | None, list[str]]:
    """The file read as check-config reads it; its problems as the operator sees them."""
    apps, problems = load_apps(Settings(bridge_config_file=path, **settings))
    return apps, rendered(problems)


def rendered(problems: list[ConfigProblem]) -> list[str]:
    t = Translator("en_US")
    return [f"{p.variable}: {p.in_words(t)}" for p in problems]


# --- the model -------------------------------------------------------------------------------


def test_a_file_of_three_apps_two_projects_and_routes_resolves(folder: Path) -> None:
    apps, problems = read(write(folder, THREE_APPS))
    assert problems == []
    assert apps is not None
    assert list(apps.apps) == ["claude", "codex", "team"]
    assert list(apps.projects) == ["backend", "docs"]

    claude, codex, team = apps.apps.values()
    assert (claude.app_id, claude.intake, claude.domain) == (
        "cli_claude",
        "longconn",
        "https://open.feishu.cn",
    )
    assert claude.access.allowed_users == ("ou_1", "ou_2")
    assert codex.intake == "webhook"
    assert codex.webhook_path == "/feishu/events/codex"
    assert codex.access.allowed_chats == ("oc_1", "oc_2")
    assert (codex.access.requester_may_approve, codex.access.approvers) == (False, ("ou_lead",))
    assert team.domain == "https://open.larksuite.com"
    assert team.access.allow_all is True
    assert [a.default_project for a in apps.apps.values()] == ["backend", "docs", "backend"]

    # Secrets by reference: an environment variable, a file (its final newline dropped).
    assert claude.app_secret is not None
    assert claude.app_secret.get_secret_value() == "claude-secret-from-env"
    assert codex.app_secret is not None
    assert codex.app_secret.get_secret_value() == "codex-secret-from-file"
    assert codex.verification_token is not None
    assert codex.verification_token.get_secret_value() == "codex-token"
    assert claude.encrypt_key is None

    backend, docs = apps.projects.values()
    assert backend.agent_argv == AGENT.split()
    assert backend.workspace_roots == (("backend", (folder / "backend").resolve()),)
    assert (backend.mode, backend.model) == ("plan", None)
    assert [name for name, _ in docs.agent_profiles] == ["claude", "codex"]
    assert docs.agent_profiles[1][1] == [*AGENT.split(), "--codex"]
    assert docs.workspace_roots == (
        ("docs", (folder / "docs").resolve()),
        ("site", (folder / "site").resolve()),
    )
    assert docs.model == "opus"

    assert [(r.app, r.chat, r.thread, r.project) for r in apps.routes] == [
        ("claude", "oc_1", None, "docs"),
        ("claude", "oc_1", "omt_1", "backend"),
    ]


def test_a_chat_works_on_its_threads_route_then_its_own_then_the_apps_default(
    folder: Path,
) -> None:
    apps, _ = read(write(folder, THREE_APPS))
    assert apps is not None
    assert apps.project_for("claude", "oc_1", thread="omt_1").name == "backend"
    assert apps.project_for("claude", "oc_1", thread="omt_2").name == "docs"
    assert apps.project_for("claude", "oc_1").name == "docs"
    assert apps.project_for("claude", "oc_9").name == "backend"
    assert apps.project_for("codex", "oc_1").name == "docs"  # the route is claude's alone


def test_the_environment_settings_are_one_app_and_one_project_named_default(
    tmp_path: Path,
) -> None:
    settings = Settings(
        _env_file=None,
        feishu_app_id="cli_one",
        feishu_app_secret="one-secret",
        feishu_event_mode="webhook",
        feishu_verification_token="one-token",
        feishu_domain="lark",
        bridge_allowed_users="ou_a,ou_b",
        bridge_requester_may_approve=False,
        bridge_approvers="ou_lead",
        bridge_agent_command="codex-acp --flag",
        bridge_workdir=str(tmp_path),
        bridge_agent_sandbox="bwrap",
    )
    apps, problems = load_apps(settings)
    assert problems == []
    assert apps == apps_from_settings(settings)
    assert apps is not None
    assert list(apps.apps) == ["default"]
    assert list(apps.projects) == ["default"]
    assert apps.routes == ()
    app = apps.apps["default"]
    assert (app.app_id, app.intake, app.webhook_path) == ("cli_one", "webhook", "/feishu/events")
    assert app.domain == "https://open.larksuite.com"
    assert app.app_secret is not None
    assert app.app_secret.get_secret_value() == "one-secret"
    assert app.verification_token is not None
    assert app.verification_token.get_secret_value() == "one-token"
    assert app.access.allowed_users == ("ou_a", "ou_b")
    assert (app.access.requester_may_approve, app.access.approvers) == (False, ("ou_lead",))
    project = apps.projects["default"]
    assert project.agent_argv == ["codex-acp", "--flag"]
    assert project.workspace_roots == ((tmp_path.name, tmp_path.resolve()),)
    assert project.agent_sandbox == "bwrap"
    assert apps.project_for("default", "oc_any") is project


def test_a_project_takes_the_environments_agent_settings_it_does_not_give(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BRIDGE_AGENT_SANDBOX=bwrap of the deploy files stays in force; a pair (workdir and
    workspaces) is taken whole, so the file's workdir does not lose to BRIDGE_WORKSPACES."""
    monkeypatch.setenv("BRIDGE_AGENT_SANDBOX", "bwrap")
    monkeypatch.setenv("BRIDGE_WORKSPACES", f"elsewhere={folder / 'site'}")
    monkeypatch.setenv("BRIDGE_AGENT_COMMAND", AGENT)
    text = (
        '[projects.p]\nworkdir = "backend"\n\n'
        '[projects.q]\nworkspaces = { docs = "docs" }\nagent_sandbox = "none"\n\n'
        '[apps.a]\napp_id = "cli_a"\napp_secret_env = "TEAM_APP_SECRET"\nallow_all = true\n'
        'default_project = "p"\n'
    )
    apps, problems = read(write(folder, text))
    assert problems == []
    assert apps is not None
    p, q = apps.projects.values()
    assert p.agent_sandbox == "bwrap"
    assert p.workspace_roots == (("backend", (folder / "backend").resolve()),)
    assert p.agent_argv == AGENT.split()
    assert (q.agent_sandbox, [name for name, _ in q.workspace_roots]) == ("none", ["docs"])


# --- problems --------------------------------------------------------------------------------


def test_every_mistake_is_named_at_once_with_its_line_and_key_in_order(folder: Path) -> None:
    path = write(folder, MISTAKES)
    apps, problems = read(path)
    assert apps is None
    file = str(path)
    assert problems == [
        f"{file}:4 projects.backend.sandbox: unknown key (docs/operators/apps.md lists the keys)",
        f"{file}:8 apps.claude.app_secret: a secret is never written in this file: keep it in an"
        ' environment variable and write app_secret_env = "VARIABLE", or in a file only the'
        ' bridge can read and write app_secret_file = "/path/to/file"',
        f'{file}:9 apps.claude.default_project: no project named "x" (projects: backend)',
        f"{file}:10 apps.claude.allow_all: invalid value (Input should be a valid boolean)",
        f"{file}:12 apps.codex.verification_token_env: required in webhook mode",
        f"{file}:13 apps.codex.app_id: the same app_id as apps.claude: each Feishu app is one"
        " [apps.<name>]",
        f"{file}:14 apps.codex.app_secret_env: the environment variable NOT_SET_ANYWHERE is not"
        " set",
        f"{file}:20 apps.team.app_secret_file: cannot read {folder / 'missing.secret'}: No such"
        " file or directory",
        f"{file}:21 apps.team.allowed_users: with allowed_users and allowed_chats both empty,"
        " anyone who can message this bot would drive the agent, which runs commands. Set one"
        " of them, or allow_all = true to allow everyone on purpose",
        f'{file}:24 routes[1].app: no app named "nobody" (apps: claude, codex, team)',
        f'{file}:31 routes[2].project: no project named "frontend" (projects: backend)',
    ]
    assert not any("literal-secret-never-shown" in line for line in problems)


def test_names_given_twice_are_named_at_the_second(folder: Path) -> None:
    text = (
        f'[projects.p]\nagent_command = "{AGENT}"\nworkdir = "backend"\n\n'
        '[apps.a]\napp_id = "cli_a"\napp_secret_env = "TEAM_APP_SECRET"\nallow_all = true\n'
        'mode = "webhook"\nverification_token_env = "CODEX_TOKEN"\nwebhook_path = "/hooks/x"\n\n'
        '[apps.b]\napp_id = "cli_b"\napp_secret_env = "TEAM_APP_SECRET"\nallow_all = true\n'
        'mode = "webhook"\nverification_token_env = "CODEX_TOKEN"\nwebhook_path = "/hooks/x"\n\n'
        '[[routes]]\napp = "a"\nchat = "oc_1"\nproject = "p"\n\n'
        '[[routes]]\napp = "a"\nchat = "oc_1"\nproject = "p"\n'
    )
    path = write(folder, text)
    _, problems = read(path)
    assert problems == [
        f"{path}:19 apps.b.webhook_path: the same webhook path as apps.a: each app in webhook"
        " mode needs its own",
        f"{path}:28 routes[2].chat: the same app, chat and thread as routes[1]",
    ]


def test_names_that_would_share_an_apps_data_are_named(folder: Path) -> None:
    """The schema of an app of several on PostgreSQL is its name in lower case, `_` for
    `-` (bridge/stores.py): names that differ only so would mix two apps' conversations."""
    app = 'app_id = "cli_{0}"\napp_secret_env = "TEAM_APP_SECRET"\nallow_all = true\n'
    text = (
        f'[projects.p]\nagent_command = "{AGENT}"\nworkdir = "backend"\n\n'
        f"[apps.team-a]\n{app.format('a')}\n[apps.Team_A]\n{app.format('b')}\n"
        f"[apps.team]\n{app.format('c')}\n[apps.TEAM]\n{app.format('d')}"
    )
    path = write(folder, text)
    _, problems = read(path)
    twice = "but for case or - for _: each app's data is kept under its name, so each needs"
    assert problems == [
        f"{path}:10 apps.Team_A: the same name as apps.team-a {twice} a name of its own",
        f"{path}:20 apps.TEAM: the same name as apps.team {twice} a name of its own",
    ]


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ('app_secret_env = "EMPTY_SECRET"', "the environment variable EMPTY_SECRET is empty"),
        ('app_secret_file = "empty.secret"', "{folder}/empty.secret is empty"),
        (
            'app_secret_env = "CLAUDE_APP_SECRET"\napp_secret_file = "codex.secret"',
            "give app_secret_env or app_secret_file, not both",
        ),
        (
            "",
            'required, by reference: app_secret_env = "VARIABLE" (an environment variable'
            ' holding it) or app_secret_file = "/path/to/file"',
        ),
        (
            'app_secret_env = "pasted-Secret-value"',
            "must be the name of an environment variable, in upper case (A-Z, 0-9, _), e.g."
            " FEISHU_APP_SECRET; the secret itself goes in that variable",
        ),
    ],
)
def test_a_secret_referenced_wrong_is_named_never_shown(
    folder: Path, monkeypatch: pytest.MonkeyPatch, reference: str, expected: str
) -> None:
    monkeypatch.setenv("EMPTY_SECRET", "  ")
    (folder / "empty.secret").write_text("\n", encoding="utf-8")
    text = (
        f'[projects.p]\nagent_command = "{AGENT}"\nworkdir = "backend"\n\n'
        f'[apps.a]\napp_id = "cli_a"\n{reference}\nallow_all = true\n'
    )
    path = write(folder, text)
    _, problems = read(path)
    assert [line.partition(": ")[2] for line in problems] == [expected.format(folder=folder)]
    assert not any(secret in line for line in problems for secret in SECRETS)
    assert "pasted-Secret-value" not in "".join(problems)


def test_syntax_errors_and_missing_files_are_named(folder: Path) -> None:
    path = folder / "bridge.toml"
    path.write_text('[apps.a]\napp_id = "cli_a"\napp_id = "cli_b"\n', encoding="utf-8")
    _, problems = read(path)
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}:3: not valid TOML: ")
    _, problems = read(folder / "nowhere.toml")
    assert problems == [f"BRIDGE_CONFIG_FILE: no such file: {folder / 'nowhere.toml'}"]


def test_a_key_like_a_settings_option_is_an_unknown_key(folder: Path) -> None:
    """Never taken as an option of pydantic-settings (`_cli_parse_args` would parse argv)."""
    path = folder / "bridge.toml"
    path.write_text("_cli_parse_args = true\n[projects._x]\n", encoding="utf-8")
    _, problems = read(path)
    assert [line.split(": ")[0] for line in problems] == [
        f"{path}:1 _cli_parse_args",
        f"{path}:1 apps",  # not written: at the top
        f"{path}:2 projects._x",
    ]
    assert problems[0].endswith("unknown key (docs/operators/apps.md lists the keys)")
    assert "not a name" in problems[2]


def test_the_single_apps_settings_set_beside_the_file_are_named(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unread with the file, so never ignored silently; a secret the file references stays."""
    monkeypatch.setenv("FEISHU_APP_ID", "cli_old")
    monkeypatch.setenv("FEISHU_APP_SECRET", "old-secret")
    monkeypatch.setenv("FEISHU_ENCRYPT_KEY", "old-key")
    monkeypatch.setenv("BRIDGE_ALLOWED_USERS", "ou_old")
    text = (
        f'[projects.p]\nagent_command = "{AGENT}"\nworkdir = "backend"\n\n'
        '[apps.a]\napp_id = "cli_a"\napp_secret_env = "FEISHU_APP_SECRET"\nallow_all = true\n'
    )
    _, problems = read(write(folder, text))
    assert problems == [
        "FEISHU_APP_ID: not read when BRIDGE_CONFIG_FILE is set: each app of the file has its"
        " own (docs/operators/apps.md). Remove it",
        "FEISHU_ENCRYPT_KEY: not read when BRIDGE_CONFIG_FILE is set: reference it from its app"
        ' (encrypt_key_env = "VARIABLE"), or remove it',
        "BRIDGE_ALLOWED_USERS: not read when BRIDGE_CONFIG_FILE is set: each app of the file"
        " has its own (docs/operators/apps.md). Remove it",
    ]


def test_run_checks_each_project_at_its_key(folder: Path) -> None:
    text = (
        '[projects.p]\nagent_command = "no-such-agent-program"\nworkdir = "absent"\n\n'
        '[apps.a]\napp_id = "cli_a"\napp_secret_env = "TEAM_APP_SECRET"\nallow_all = true\n'
    )
    path = write(folder, text)
    _, problems = read(path)
    assert problems == [
        f"{path}:2 projects.p.agent_command: program no-such-agent-program not found (not on PATH)",
        f"{path}:3 projects.p.workdir: {folder / 'absent'} is not an existing folder",
    ]


def test_no_secret_is_in_a_repr(folder: Path) -> None:
    apps, _ = read(write(folder, THREE_APPS))
    shown = f"{apps!r} {apps}"
    assert "**********" in shown
    assert not any(secret in shown for secret in SECRETS)


def test_the_example_of_the_operators_page_is_a_sound_file(folder: Path) -> None:
    """docs/operators/apps.md's example has no problem of its own (its folders, programs
    and secret files are the reader's, not this machine's)."""
    page = (ROOT / "docs" / "operators" / "apps.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", page, re.S)
    assert example is not None
    path = folder / "bridge.toml"
    path.write_text(example.group(1), encoding="utf-8")
    environ = {"CLAUDE_APP_SECRET": "a", "TEAM_APP_SECRET": "b"}
    _, problems = load_apps(Settings(bridge_config_file=path), environ)
    codes = {p.code for p in problems}
    assert codes <= {"not_a_folder", "program_not_found", "file_secret_unreadable"}, problems


# --- where keys are written ------------------------------------------------------------------


def test_keys_are_found_past_strings_arrays_and_comments_spanning_lines() -> None:
    text = (
        "# a comment [not.a.table]\n"
        "[projects.backend]   # after a header\n"
        'agents = { claude = "a", "co.dex" = "b" }\n'
        "workspaces = [\n"
        '  "x", # ] in a comment\n'
        '  """multi\n'
        '  line ] = not a key""",\n'
        "]\n"
        "\"quoted.key\" = 'literal'\n"
        '[apps."my app"]\n'
        'text = """a\n'
        "b = c\n"
        '"""\n'
        "sub.key = 3\n"
        "[[routes]]\n"
        'app = "x"\n'
        "[[routes]]\n"
        'app = "y"\n'
    )
    lines = key_lines(text)
    assert lines[("projects", "backend")] == 2
    assert lines[("projects", "backend", "agents")] == 3
    assert lines[("projects", "backend", "workspaces")] == 4
    assert lines[("projects", "backend", "quoted.key")] == 9
    assert lines[("apps", "my app")] == 10
    assert lines[("apps", "my app", "text")] == 11
    assert lines[("apps", "my app", "sub", "key")] == 14
    assert (lines[("routes", 0, "app")], lines[("routes", 1, "app")]) == (16, 18)
    assert ("apps", "my app", "b") not in lines
    assert ("projects", "backend", "line ]") not in lines


# --- check-config ----------------------------------------------------------------------------


def test_check_config_reads_the_file_and_says_what_it_serves(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BRIDGE_CONFIG_FILE", str(write(folder, THREE_APPS)))
    assert main(["check-config"]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.splitlines() == [
        f"Configuration is valid: 3 app(s), 2 project(s) and 2 route(s) from {folder}/bridge.toml.",
        "  - claude (cli_claude): longconn, https://open.feishu.cn, default project backend",
        "  - codex (cli_codex): webhook, https://open.feishu.cn, default project docs",
        "  - team (cli_team): longconn, https://open.larksuite.com, default project backend",
    ]


def test_check_config_names_every_problem_of_the_file_and_exits_2(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real process: what an operator runs."""
    path = write(folder, MISTAKES)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "BRIDGE_CONFIG_FILE": str(path),
        "BRIDGE_LOCALE": "en_US",
        # The bridge refuses root without a sandbox; CI runs as root.
        "BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX": "true",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bridge.app", "check-config"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "The configuration has 11 problem(s):"
    assert [line.split(": ", 1)[0] for line in lines[1:]] == [
        f"  - {path}:4 projects.backend.sandbox",
        f"  - {path}:8 apps.claude.app_secret",
        f"  - {path}:9 apps.claude.default_project",
        f"  - {path}:10 apps.claude.allow_all",
        f"  - {path}:12 apps.codex.verification_token_env",
        f"  - {path}:13 apps.codex.app_id",
        f"  - {path}:14 apps.codex.app_secret_env",
        f"  - {path}:20 apps.team.app_secret_file",
        f"  - {path}:21 apps.team.allowed_users",
        f"  - {path}:24 routes[1].app",
        f"  - {path}:31 routes[2].project",
    ]
    assert "literal-secret-never-shown" not in done.stderr


def test_check_config_without_the_file_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ws").mkdir()
    for name, value in {
        "FEISHU_APP_ID": "cli_one",
        "FEISHU_APP_SECRET": "one-secret",
        "BRIDGE_ALLOWED_USERS": "ou_a",
        "BRIDGE_AGENT_COMMAND": AGENT,
        "BRIDGE_WORKDIR": str(tmp_path / "ws"),
        "BRIDGE_LOCALE": "en_US",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["check-config"]) == 0
    assert capsys.readouterr().out == (
        "Configuration is valid (mode: websocket, domain: https://open.feishu.cn).\n"
    )
