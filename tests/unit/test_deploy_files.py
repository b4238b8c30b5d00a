"""The deployment files and the set-up docs say only what the code does.

- deploy/example.env lists every Settings field once, nothing else, each with a comment, and
  each commented default is the real default;
- every FEISHU_*/BRIDGE_* name in deploy/ and in the set-up docs is a real setting;
- every `feishu-bridge <command> --option` written there exists in the CLI.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from bridge.app import build_parser
from bridge.config import OLD_NAMES, Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLE_ENV = DEPLOY / "example.env"
DEPLOY_FILES = [
    DEPLOY / "Dockerfile",
    DEPLOY / "compose.yaml",
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

FIELDS = {name.upper(): name for name in Settings.model_fields}


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
    field = Settings.model_fields[FIELDS[name]]
    return field.default_factory is None and field.default is not None


@pytest.mark.parametrize("name", [name for name in FIELDS if _static_default(name)])
def test_commented_default_is_the_real_default(name: str) -> None:
    values = {n: v for _, commented, n, v in _assignments() if commented}
    assert name in values, f"{name} should be shown commented out, with its default"
    field = FIELDS[name]
    parsed = Settings(_env_file=None, **{field: values[name]})  # type: ignore[call-arg]
    assert getattr(parsed, field) == Settings.model_fields[field].default


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
    compose = (DEPLOY / "compose.yaml").read_text(encoding="utf-8")
    policies = re.findall(r"^\s*restart:\s*(\S+)", compose, re.M)
    assert policies, "compose sets no restart policy"
    for policy in policies:
        # `always`/`unless-stopped` restart a bad configuration forever; on-failure needs a bound.
        assert re.fullmatch(r"on-failure:[1-9][0-9]?", policy), policy


def test_the_deploy_files_run_every_agent_in_the_sandbox() -> None:
    for path in (DEPLOY / "Dockerfile", DEPLOY / "feishu-bridge.service"):
        text = path.read_text(encoding="utf-8")
        assert re.search(r"BRIDGE_AGENT_SANDBOX=bwrap", text), path.name
