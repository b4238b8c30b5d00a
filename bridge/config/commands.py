"""Command lines and named lists in settings (BRIDGE_AGENT_COMMAND, BRIDGE_AGENTS,
BRIDGE_WORKSPACES), parsed for the agent section (bridge/config/agent.py) and for the
projects of BRIDGE_CONFIG_FILE (bridge/config/apps.py), which read them alike."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
_LAUNCHERS = re.compile(r"(python[0-9.]*|node|npx|uvx|bunx|pnpx)")
_RUNS_AFTER_DASHES = re.compile(r"python[0-9.]*|uv|unshare|env")
_WRAPPERS = frozenset({"unshare", "env", "nice", "ionice", "stdbuf", "setsid", "firejail"})


def profile_name(argv: list[str]) -> str:
    """The one agent's name when BRIDGE_AGENTS is unset: its program, or for a launcher
    (`python -m pkg.agent`, `npx @scope/agent-acp@1.2`) the program it launches."""
    if _RUNS_AFTER_DASHES.fullmatch(Path(argv[0]).name) and "--" in argv[:-1]:
        # `python -m some.wrapper … -- agent`, `uv run -- agent`: the agent follows `--`.
        argv = argv[argv.index("--") + 1 :]
    while len(argv) > 1 and Path(argv[0]).name in _WRAPPERS:
        # `unshare -rn agent`, `env A=1 agent`: the agent is what the wrapper runs.
        argv = argv[1:]
        while len(argv) > 1 and (argv[0].startswith("-") or "=" in argv[0]):
            argv = argv[1:]
    program = Path(argv[0]).name
    if not _LAUNCHERS.fullmatch(program):
        return program
    rest = argv[1:]
    if "-m" in rest and rest.index("-m") + 1 < len(rest):
        return rest[rest.index("-m") + 1].rsplit(".", 1)[-1]
    launched = next((a for a in rest if not a.startswith("-")), "")
    base = launched.rstrip("/").rsplit("/", 1)[-1].split("@")[0]
    return Path(base).stem if base.endswith((".py", ".js", ".mjs")) else base or program


def split_command(value: str) -> list[str]:
    try:
        parts = shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"cannot be split like a shell command line ({exc})") from exc
    if not parts:
        raise ValueError("must name a program")
    return parts


def parse_named_list(value: str) -> tuple[tuple[str, str], ...]:
    """`name=value;name=value` as pairs, in order; names are short words, each once."""
    pairs: list[tuple[str, str]] = []
    for item in value.split(";"):
        if not item.strip():
            continue
        name, sep, rest = item.partition("=")
        name, rest = name.strip(), rest.strip()
        if not sep or not rest:
            raise ValueError(f"`{name or item.strip()}` needs `=` and a value (name=value;…)")
        if not _NAME.fullmatch(name):
            raise ValueError(f"`{name}` is not a name (letters, digits, `_.-`, up to 32)")
        if any(name == seen for seen, _ in pairs):
            raise ValueError(f"`{name}` is named twice")
        pairs.append((name, rest))
    return tuple(pairs)


def named_list(value: Any, commands: bool) -> Any:
    """A named list as written: `name=value;…` (a setting) or a table of name = value (the
    file), as pairs in order; each value a command line when `commands`. Else as given, for
    the field's own type to refuse."""
    if isinstance(value, str):
        pairs = parse_named_list(value)
    elif isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values()):
        pairs = parse_named_list(";".join(f"{name}={v}" for name, v in value.items()))
    else:
        return value
    if commands:
        for _, command in pairs:
            split_command(command)
    return pairs


def agent_profiles(
    agents: tuple[tuple[str, str], ...], command: str
) -> tuple[tuple[str, list[str]], ...]:
    """(name, argv) of every agent a chat may use; the first is the default. Without named
    agents, the one command under its program's name."""
    if agents:
        return tuple((name, shlex.split(line)) for name, line in agents)
    argv = shlex.split(command)
    return ((profile_name(argv), argv),)


def workspace_roots(
    workspaces: tuple[tuple[str, str], ...], workdir: Path
) -> tuple[tuple[str, Path], ...]:
    """(name, resolved folder) of every workspace; the first is the default. Without named
    workspaces, the one folder under its own name."""
    if workspaces:
        return tuple((n, Path(p).expanduser().resolve()) for n, p in workspaces)
    folder = workdir.resolve()
    return ((folder.name or "workdir", folder),)
