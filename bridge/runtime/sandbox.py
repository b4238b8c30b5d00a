"""What an agent process can see: the bubblewrap command line it is started under.

The agent is untrusted code with a shell. Under `BRIDGE_AGENT_SANDBOX=bwrap` it runs in its
own pid namespace (a fresh /proc: the bridge's process and its environ are not there), sees
the system read-only, its workdir and HOME read-write, a private /tmp, and in place of the
bridge's data folder and working folder (where `.env` is read) an empty read-only folder.
The network is kept: agents call their model's API.

`SandboxPolicy.wrap` only builds argv; what exists on disk is asked through `kind_of`, so
the rules are unit-tested without a filesystem. `probe` runs the result once, for
check-config (`sandbox_problems`). `forbid_environ_reading` is the part that holds without a
sandbox too.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from bridge.config.checks import ConfigProblem
from bridge.paths import within

if TYPE_CHECKING:
    from bridge.config import Settings

PathKind = Literal["dir", "file"] | None
BWRAP = "bwrap"
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
PROBE_TIMEOUT_SECONDS = 10.0


class Mount(Enum):
    """What the agent sees at one path, over what it sees at the paths above it."""

    WRITABLE = "writable"  # the real folder, read-write
    PRIVATE = "private"  # an empty tmpfs of its own, read-write, gone when it exits
    HIDDEN_DIR = "hidden_dir"  # an empty read-only folder
    HIDDEN_FILE = "hidden_file"  # an empty read-only file


def path_kind(path: Path) -> PathKind:
    if path.is_dir():
        return "dir"
    if path.exists():
        return "file"
    return None


@dataclass(frozen=True)
class SandboxPolicy:
    """Where the agent works (`workdir`), what it must never see (`hidden`: the data folder,
    the bridge's working folder, secrets files) and its HOME. Paths are absolute, resolved."""

    workdir: Path
    hidden: tuple[Path, ...] = ()
    home: Path | None = None
    program: str = BWRAP

    def __post_init__(self) -> None:
        for hidden in self.hidden:
            # A writable ancestor lets the agent rename the folder away and put its own in
            # its place (a `.env` the bridge reads at its next start): refused, not mounted.
            if within(hidden, self.workdir):
                raise ValueError(f"the agent's workdir {self.workdir} holds hidden {hidden}")

    @property
    def home_mount(self) -> Mount | None:
        """HOME is bound read-write (agents keep their login and settings there) unless it
        holds a hidden path; then it is a private tmpfs, for the same reason as the workdir."""
        if self.home is None:
            return None
        if any(within(hidden, self.home) for hidden in self.hidden):
            return Mount.PRIVATE
        return Mount.WRITABLE

    def mounts(self, kind_of: Callable[[Path], PathKind] = path_kind) -> list[tuple[Path, Mount]]:
        """Every mount over the read-only root, parents before children: a child mount
        (the workdir inside /tmp, HOME inside the data folder) shows through its parent."""
        table: dict[Path, Mount] = {Path("/tmp"): Mount.PRIVATE}
        for hidden in self.hidden:
            kind = kind_of(hidden)
            if kind is not None:  # nothing there, nothing to hide
                table[hidden] = Mount.HIDDEN_DIR if kind == "dir" else Mount.HIDDEN_FILE
        home_mount = self.home_mount
        if self.home is not None and home_mount is not None:
            table[self.home] = home_mount
        table[self.workdir] = Mount.WRITABLE
        ordered = sorted(table.items(), key=lambda item: (len(item[0].parts), str(item[0])))
        kept: list[tuple[Path, Mount]] = []
        for path, mount in ordered:
            if mount in (Mount.HIDDEN_DIR, Mount.HIDDEN_FILE) and not self._visible(path, kept):
                continue  # already out of sight under a private tmpfs or another hidden folder
            kept.append((path, mount))
        return kept

    @staticmethod
    def _visible(path: Path, mounts: Iterable[tuple[Path, Mount]]) -> bool:
        """Whether `path` shows its real content under `mounts` (the deepest one above wins)."""
        deepest: Mount | None = None
        depth = -1
        for mount_path, mount in mounts:
            if within(path, mount_path) and len(mount_path.parts) > depth:
                deepest, depth = mount, len(mount_path.parts)
        return deepest is None or deepest is Mount.WRITABLE

    def hides(self, path: Path, kind_of: Callable[[Path], PathKind] = path_kind) -> bool:
        """True when the agent cannot see `path` (e.g. its own program lives there)."""
        return not self._visible(path, self.mounts(kind_of))

    def wrap(
        self, argv: Sequence[str], kind_of: Callable[[Path], PathKind] = path_kind
    ) -> list[str]:
        """The bwrap command line that runs `argv` inside this sandbox."""
        args = [
            self.program,
            # user (when possible), ipc, pid, uts and cgroup namespaces; the network is kept.
            "--unshare-all",
            "--share-net",
            "--die-with-parent",
            # Started by root, bwrap keeps every capability by default: the agent could
            # unmount what hides the data folder and remount / writable.
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",  # a fresh /proc: only the sandbox's own processes
            "/proc",
        ]
        read_only: list[str] = []
        for path, mount in self.mounts(kind_of):
            target = str(path)
            if mount is Mount.WRITABLE:
                args += ["--bind", target, target]
            elif mount is Mount.PRIVATE:
                args += ["--tmpfs", target]
            elif mount is Mount.HIDDEN_DIR:
                # Read-only only at the end, so writable folders inside it can be mounted.
                args += ["--tmpfs", target]
                read_only += ["--remount-ro", target]
            else:
                args += ["--ro-bind", "/dev/null", target]
        return [*args, *read_only, "--chdir", str(self.workdir), "--", *argv]

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        cwd: Path | None = None,
        home: str | None = None,
        workdir: Path | None = None,
    ) -> SandboxPolicy | None:
        """The policy `BRIDGE_AGENT_SANDBOX` asks for (None: no sandbox). `cwd` is where the
        bridge reads `.env` (its working folder); `home` the agent's HOME; `workdir` the
        workspace the agent works in (default: the first of BRIDGE_WORKSPACES/BRIDGE_WORKDIR)."""
        agent = settings.agent
        if agent.bridge_agent_sandbox == "none":
            return None
        home = os.environ.get("HOME") if home is None else home
        extra = [Path(path) for path in agent.bridge_agent_sandbox_hidden]
        workdir = (workdir or agent.workspace_roots[0][1]).resolve()
        # The other workspaces are other projects: out of sight, unless nested in this one
        # (or it in them), where hiding would cut its own folder.
        others = [
            root
            for _, root in agent.workspace_roots
            if not (within(root, workdir) or within(workdir, root))
        ]
        hidden = [settings.store.bridge_data_dir, cwd or Path.cwd(), *extra, *others]
        return cls(
            workdir=workdir,
            hidden=tuple(dict.fromkeys(path.resolve() for path in hidden)),
            home=Path(home).resolve() if home else None,
        )


@dataclass(frozen=True)
class ProbeFailure:
    """Why the sandbox cannot start: `missing` (no bwrap) or `refused` (bwrap's own words)."""

    reason: Literal["missing", "refused"]
    detail: str = ""


def probe(policy: SandboxPolicy, env: dict[str, str] | None = None) -> ProbeFailure | None:
    """Start `true` in the sandbox once; None when it ran."""
    if shutil.which(policy.program) is None:
        return ProbeFailure("missing")
    try:
        done = subprocess.run(  # our own argv, no shell
            policy.wrap(["true"]),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ProbeFailure("refused", str(exc)[:200])
    if done.returncode == 0:
        return None
    lines = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
    return ProbeFailure("refused", (lines[-1] if lines else f"exit {done.returncode}")[:200])


def sandbox_problems(settings: Settings) -> list[ConfigProblem]:
    """For check-config and `run`: a sandbox that cannot start, or one that would hide the
    agent's own program, found now rather than at the first user's message."""
    policy = SandboxPolicy.from_settings(settings)
    if policy is None:
        return []
    found: list[ConfigProblem] = []
    program = shutil.which(settings.agent.agent_argv[0], path=os.environ.get("PATH"))
    if program is not None and any(
        policy.hides(path) for path in (Path(program).absolute(), Path(program).resolve())
    ):
        found.append(
            ConfigProblem("BRIDGE_AGENT_COMMAND", "sandbox_hides_agent", {"program": program})
        )
    # The probe's bubblewrap gets none of the bridge's settings, like an agent.
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("FEISHU_", "BRIDGE_"))}
    failure = probe(policy, env)
    if failure is not None and failure.reason == "missing":
        found.append(ConfigProblem("BRIDGE_AGENT_SANDBOX", "sandbox_missing"))
    elif failure is not None:
        found.append(
            ConfigProblem("BRIDGE_AGENT_SANDBOX", "sandbox_refused", {"detail": failure.detail})
        )
    return found


def forbid_environ_reading() -> bool:
    """Make this process non-dumpable: other processes of the same user (an agent without a
    sandbox) can then no longer read its /proc/<pid>/environ or attach to it. Children get
    their own setting back at exec. False where Linux's prctl is not available."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
