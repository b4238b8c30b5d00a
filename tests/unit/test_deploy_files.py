"""The deployment files and the set-up docs say only what the code does.

- deploy/example.env lists every Settings field once, nothing else, each with a comment, and
  each commented default is the real default;
- every FEISHU_*/BRIDGE_* name in deploy/ and in the set-up docs is a real setting;
- every `feishu-bridge <command> --option` written there exists in the CLI;
- the compose files publish only on loopback and write out no secret, and the cluster file
  runs each instance as compose.yaml runs the bridge, under its own name, on one database.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from bridge.app import build_parser
from bridge.config import OLD_NAMES, Settings, env_fields

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLE_ENV = DEPLOY / "example.env"
COMPOSE_FILES = [DEPLOY / "compose.yaml", DEPLOY / "compose.cluster.yaml"]
DEPLOY_FILES = [
    DEPLOY / "Dockerfile",
    DEPLOY / "compose.yaml",
    DEPLOY / "compose.cluster.yaml",
    DEPLOY / "feishu-bridge.service",
    EXAMPLE_ENV,
]
DOCS = [ROOT / "docs" / "feishu-app-setup.md", ROOT / "docs" / "agents.md"]

ASSIGNMENT = re.compile(r"^(?P<comment>#\s*)?(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")
SETTING_NAME = re.compile(r"\b(?:FEISHU|BRIDGE)_[A-Z0-9_]+\b")
# `feishu-bridge run`, `/opt/…/bin/feishu-bridge demo --agent …`; not the user, unit or folder
# of that name (`StateDirectory=feishu-bridge …`, `/var/lib/feishu-bridge holds …`).
COMMAND = re.compile(
    r"(?:^|(?<=[\s`\"'])|(?<=bin/))feishu-bridge[ \t]+(?P<sub>[a-z][a-z-]*)(?P<rest>[^\n`]*)",
    re.M,
)

FIELDS = env_fields()  # NAME → (section, field, its FieldInfo)


def _assignments() -> list[tuple[int, bool, str, str]]:
    """(line number, commented out, NAME, value) for every NAME=value line of example.env."""
    found = []
    for number, line in enumerate(EXAMPLE_ENV.read_text(encoding="utf-8").splitlines(), 1):
        match = ASSIGNMENT.match(line)
        if match:
            commented = match["comment"] is not None
            found.append((number, commented, match["name"], match["value"]))
    return found


def test_example_env_lists_every_setting_once_and_nothing_else() -> None:
    names = [name for _, _, name, _ in _assignments()]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert duplicates == [], f"listed more than once: {duplicates}"
    assert sorted(set(FIELDS) - set(names)) == [], "Settings fields missing from example.env"
    assert sorted(set(names) - set(FIELDS)) == [], "example.env names that are no setting"


def test_every_example_variable_is_explained_by_the_line_above() -> None:
    lines = EXAMPLE_ENV.read_text(encoding="utf-8").splitlines()
    for number, _, name, _ in _assignments():
        above = lines[number - 2] if number >= 2 else ""
        explained = above.startswith("#") and not ASSIGNMENT.match(above)
        assert explained, f"{name} (line {number}) has no explanation on the line above"


def test_only_the_required_credentials_are_active_and_they_are_empty() -> None:
    active = {name: value for _, commented, name, value in _assignments() if not commented}
    assert active == {"FEISHU_APP_ID": "", "FEISHU_APP_SECRET": ""}


def _static_default(name: str) -> bool:
    field = FIELDS[name][2]
    return field.default_factory is None and field.default is not None


@pytest.mark.parametrize("name", [name for name in FIELDS if _static_default(name)])
def test_commented_default_is_the_real_default(name: str) -> None:
    values = {n: v for _, commented, n, v in _assignments() if commented}
    assert name in values, f"{name} should be shown commented out, with its default"
    section, field, info = FIELDS[name]
    parsed = Settings(_env_file=None, **{field: values[name]})
    assert getattr(getattr(parsed, section), field) == info.default


def _text_of(path: Path) -> str:
    """Markdown: only code (fenced blocks and `spans`), so prose may name anything."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".md":
        return text
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", prose)
    return "\n".join(blocks + spans)


@pytest.mark.parametrize("path", DEPLOY_FILES + DOCS, ids=lambda p: p.name)
def test_every_setting_named_exists(path: Path) -> None:
    assert path.exists(), f"{path.relative_to(ROOT)} is missing"
    named = set(SETTING_NAME.findall(path.read_text(encoding="utf-8")))
    unknown = sorted(named - set(FIELDS) - set(OLD_NAMES))
    assert unknown == [], f"{path.name} names settings that do not exist: {unknown}"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("feishu-bridge has no subcommands")


@pytest.mark.parametrize("path", DEPLOY_FILES + DOCS, ids=lambda p: p.name)
def test_every_command_line_written_exists(path: Path) -> None:
    subcommands = _subcommands()
    problems = []
    for match in COMMAND.finditer(_text_of(path)):
        sub = match["sub"]
        if sub not in subcommands:
            problems.append(f"`feishu-bridge {sub}`: no such command")
            continue
        options = subcommands[sub]._option_string_actions
        rest = re.sub(r"\"[^\"]*\"|'[^']*'", "", match["rest"])  # an option's quoted value
        for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
            if option not in options:
                problems.append(f"`feishu-bridge {sub} {option}`: no such option")
    assert problems == []


def test_a_configuration_error_is_not_restarted_forever() -> None:
    """Exit code 2 (bad settings) cannot be fixed by a restart: systemd stops, compose bounds it."""
    unit = (DEPLOY / "feishu-bridge.service").read_text(encoding="utf-8")
    assert re.search(r"^RestartPreventExitStatus=.*\b2\b", unit, re.M)
    for path in COMPOSE_FILES:
        compose = path.read_text(encoding="utf-8")
        policies = re.findall(r"^\s*restart:\s*(\S+)", compose, re.M)
        assert policies, f"{path.name} sets no restart policy"
        for policy in policies:
            # `always`/`unless-stopped` restart a bad configuration forever; on-failure needs a
            # bound.
            assert re.fullmatch(r"on-failure:[1-9][0-9]?", policy), f"{path.name}: {policy}"


def test_the_deploy_files_run_every_agent_in_the_sandbox() -> None:
    for path in (DEPLOY / "Dockerfile", DEPLOY / "feishu-bridge.service"):
        text = path.read_text(encoding="utf-8")
        assert re.search(r"BRIDGE_AGENT_SANDBOX=bwrap", text), path.name


# --- compose files (no YAML parser in the dependencies: the few shapes they use, by line) ------


def _list_items(text: str, key: str) -> list[str]:
    """The items of every `key:` block list in `text` (`- item` lines, comments skipped)."""
    items = []
    pattern = rf"^(?P<indent> *){key}:[ \t]*\n(?P<body>(?:(?P=indent) +\S.*\n)+)"
    for match in re.finditer(pattern, text, re.M):
        items += re.findall(r"^\s*-\s+(.+?)\s*$", match["body"], re.M)
    return [item.strip("\"'") for item in items]


def _services(text: str) -> dict[str, str]:
    """Each service's name and the lines under it."""
    body = re.split(r"^services:[ \t]*\n", text, maxsplit=1, flags=re.M)[1]
    body = re.split(r"^[^\s#]", body, maxsplit=1, flags=re.M)[0]  # up to the next top-level key
    parts = re.split(r"^  ([\w.-]+):[ \t]*\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _mounts(block: str) -> dict[str, str]:
    """A service's volumes: the path in the container → the volume or host path."""
    pairs = (item.split(":")[:2] for item in _list_items(block, "volumes"))
    return {target: source for source, target in pairs}


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_publishes_only_on_loopback_and_holds_no_secret(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    published = _list_items(text, "ports")
    assert published, f"{path.name} publishes no port"
    assert all(p.startswith("127.0.0.1:") for p in published), published
    host_ports = [p.split(":")[1] for p in published]
    assert len(set(host_ports)) == len(host_ports), f"a host port twice: {host_ports}"
    # A secret is only ever interpolated (`${NAME}` from deploy/.env or the shell) or read
    # from an env file, never written here.
    for name, value in re.findall(r"^\s*(\w*(?:PASSWORD|SECRET|TOKEN)\w*):\s*(\S+)", text, re.M):
        assert value.startswith("${"), f"{path.name}: {name} is written out"
    for password in re.findall(r"://[^:/\s]+:([^@\s]+)@", text):
        assert password.startswith("${"), f"{path.name}: a password in a URL is written out"


def test_the_cluster_runs_each_instance_as_compose_yaml_runs_the_bridge() -> None:
    single, cluster = (path.read_text(encoding="utf-8") for path in COMPOSE_FILES)
    for key in ("security_opt", "cap_drop"):
        assert set(_list_items(single, key)) <= set(_list_items(cluster, key)), key
    for line in re.findall(r"^\s*((?:image|target|init|stop_grace_period):.*)$", single, re.M):
        assert re.search(rf"^\s*{re.escape(line)}$", cluster, re.M), line


def test_the_cluster_instances_differ_in_name_and_data_and_share_the_rest() -> None:
    text = (DEPLOY / "compose.cluster.yaml").read_text(encoding="utf-8")
    services = _services(text)
    assert set(services) == {"postgres", "bridge-1", "bridge-2"}
    assert re.search(r"pg_isready", services["postgres"])
    assert re.search(r"condition: service_healthy", text)
    ids = re.findall(r"^\s*BRIDGE_INSTANCE_ID:\s*(\S+)", text, re.M)
    hosts = re.findall(r"^\s*hostname:\s*(\S+)", text, re.M)
    assert ids == hosts == ["bridge-1", "bridge-2"], (ids, hosts)
    # One database for both, and an operator listener the other instance can reach.
    urls = set(re.findall(r"^\s*BRIDGE_DATABASE_URL:\s*(\S+)", text, re.M))
    assert len(urls) == 1
    assert urls.pop().startswith("postgresql://bridge:${POSTGRES_PASSWORD")
    assert re.search(r"^\s*BRIDGE_OPS_HOST:\s*0\.0\.0\.0\s*$", text, re.M)
    one, two = _mounts(services["bridge-1"]), _mounts(services["bridge-2"])
    assert one["/data"] != two["/data"]
    for shared in ("/workspace", "/home/bridge"):  # the files and the agents' sessions
        assert one[shared] == two[shared], shared
