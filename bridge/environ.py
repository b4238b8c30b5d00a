"""The bridge's secrets out of its environment, as `run` starts.

A secret left in the environment is readable by whoever may read the process's environment:
a child started without an explicit one, and `/proc/<pid>/environ` (every process of the
same user, and root whatever the process does). That file shows the block the process was
*started* with, not `os.environ`: deleting a variable (libc's `unsetenv`) only drops libc's
pointer to it. So `take_secrets` also overwrites each secret's entry in that block with NUL
bytes, in place: the block is this process's own memory (the top of its main stack), at the
addresses the kernel gives in `/proc/self/stat` (env_start, env_end), written through
`/proc/self/mem`. The same memory `setproctitle` and PostgreSQL rewrite for their process
titles. Re-executing the bridge with a scrubbed environment would do too, at the cost of a
second start and of rebuilding whatever command line started it.

It must run while the process is still dumpable: once it is not (`forbid_environ_reading`),
`/proc/self/mem` and `/proc/self/environ` belong to root, and a non-root bridge cannot open
its own.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from pydantic import SecretStr

from bridge.config import env_fields

PROC_SELF = Path("/proc/self")
# Fields 50 and 51 of /proc/<pid>/stat (proc(5)), counted after the `(comm)` field.
_ENV_START, _ENV_END = 50 - 3, 51 - 3


def secret_names() -> dict[str, str]:
    """Environment name (upper case) → field name of every secret setting (a `SecretStr`):
    the App Secret, the encrypt key, the verification token, the operator token, the
    database URL, and any secret added later."""
    return {
        env: name
        for env, (_, name, field) in env_fields().items()
        if SecretStr in (field.annotation, *get_args(field.annotation))
    }


@dataclass(frozen=True)
class TakenSecrets:
    """`values`: field name → value, for `Settings(**values)`; `left`: the names the
    start-up block still shows (this kernel would not let them be overwritten)."""

    values: dict[str, str]
    wiped: tuple[str, ...] = ()
    left: tuple[str, ...] = ()


def take_secrets(environ: MutableMapping[str, str] = os.environ) -> TakenSecrets:
    """Remove every secret setting from `environ` (names matched as pydantic-settings does,
    whatever their case) and from the block `/proc/self/environ` shows."""
    names = secret_names()
    values: dict[str, str] = {}
    # Reverse order: `FEISHU_APP_SECRET` is taken after `feishu_app_secret` and wins.
    for name in sorted((n for n in environ if n.upper() in names), reverse=True):
        values[names[name.upper()]] = environ.pop(name)
    wiped, left = wipe_startup_environ(frozenset(names))
    return TakenSecrets(values, tuple(wiped), tuple(left))


def take_variables(
    names: frozenset[str], environ: MutableMapping[str, str] = os.environ
) -> dict[str, str]:
    """Remove the variables `names` (exact names: those a config file names for its secrets)
    from `environ` and the start-up block; their values."""
    values = {name: environ.pop(name) for name in sorted(names) if name in environ}
    wipe_startup_environ(frozenset(name.upper() for name in values))
    return values


def _entries(block: bytes, names: frozenset[str]) -> list[tuple[int, bytes, str]]:
    """(offset, entry, upper-case name) of each entry of `block` named in `names`."""
    found, offset = [], 0
    for entry in block.split(b"\0"):
        name = entry.partition(b"=")[0].decode("utf-8", errors="replace").upper()
        if name in names:
            found.append((offset, entry, name))
        offset += len(entry) + 1
    return found


def wipe_startup_environ(
    names: frozenset[str], proc: Path = PROC_SELF
) -> tuple[list[str], list[str]]:
    """Overwrite the entries of `names` in this process's start-up environment block.
    Returns (wiped, left): the names overwritten, and those it still shows. Nothing to do
    where there is no /proc (nothing shows the block there either)."""
    try:
        fields = (proc / "stat").read_bytes().rpartition(b")")[2].split()
        start, end = int(fields[_ENV_START]), int(fields[_ENV_END])
        block = (proc / "environ").read_bytes()
    except (OSError, IndexError, ValueError):
        return [], []
    found = _entries(block, names)
    if not found:
        return [], []
    if len(block) != end - start:  # not the block the addresses say: touch nothing
        return [], sorted({name for _, _, name in found})
    wiped: list[str] = []
    try:
        with open(proc / "mem", "r+b", buffering=0) as mem:
            for offset, entry, name in found:
                mem.seek(start + offset)
                if mem.read(len(entry)) != entry:
                    continue
                mem.seek(start + offset)
                mem.write(b"\0" * len(entry))
                wiped.append(name)
        block = (proc / "environ").read_bytes()
    except OSError:
        pass
    return sorted(set(wiped)), sorted({name for _, _, name in _entries(block, names)})
