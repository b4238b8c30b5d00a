"""Command lines and named lists in settings (BRIDGE_AGENT_COMMAND, BRIDGE_AGENTS,
BRIDGE_WORKSPACES), parsed for the agent section (bridge/config/agent.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

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
