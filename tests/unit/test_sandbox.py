"""The bubblewrap command line an agent is started under (bridge/runtime/sandbox.py).

Pure: what exists on disk is a table, so each rule is checked on the argv alone. That the
argv really keeps the agent out is tests/integration/test_agent_sandbox.py.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from bridge.config import Settings
from bridge.runtime.sandbox import Mount, PathKind, SandboxPolicy, probe

DATA = Path("/var/lib/feishu-bridge")
WORKSPACE = Path("/srv/feishu-bridge/workspace")
SECRETS_FILE = Path("/etc/feishu-bridge/feishu-bridge.env")
FOLDERS = {DATA, WORKSPACE, Path("/home/bridge"), Path("/srv/bridge"), DATA / "home"}


def on_disk(path: Path) -> PathKind:
    if path in FOLDERS:
        return "dir"
    return "file" if path == SECRETS_FILE else None


def pairs(argv: list[str], option: str) -> list[str]:
    """The path after each `option` (its second argument for --bind / --ro-bind)."""
    found = []
    for index, arg in enumerate(argv):
        if arg == option:
            found.append(argv[index + (2 if option in ("--bind", "--ro-bind") else 1)])
    return found


def test_the_agent_runs_in_its_own_namespaces_with_the_network_kept() -> None:
    argv = SandboxPolicy(workdir=WORKSPACE).wrap(["claude-agent-acp", "--x"], on_disk)
    assert argv[0] == "bwrap"
    assert {"--unshare-all", "--share-net", "--die-with-parent"} <= set(argv)
    assert "--unshare-net" not in argv
    # bwrap started by root keeps every capability unless told (containers/bubblewrap#561).
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--proc") + 1] == "/proc"  # a fresh /proc of its own pid namespace
    assert argv[argv.index("--ro-bind") : argv.index("--ro-bind") + 3] == ["--ro-bind", "/", "/"]
    assert pairs(argv, "--bind") == [str(WORKSPACE)]
    assert pairs(argv, "--tmpfs") == ["/tmp"]
    assert argv[argv.index("--chdir") + 1] == str(WORKSPACE)
    assert argv[-3:] == ["--", "claude-agent-acp", "--x"]


def test_hidden_folders_become_empty_read_only_and_files_empty() -> None:
    policy = SandboxPolicy(workdir=WORKSPACE, hidden=(DATA, Path("/srv/bridge"), SECRETS_FILE))
    argv = policy.wrap(["agent"], on_disk)
    assert pairs(argv, "--tmpfs") == ["/tmp", "/srv/bridge", str(DATA)]
    assert pairs(argv, "--remount-ro") == ["/srv/bridge", str(DATA)]
    # /dev/null over the file: it reads empty and cannot be written.
    index = argv.index(str(SECRETS_FILE))
    assert argv[index - 2 : index + 1] == ["--ro-bind", "/dev/null", str(SECRETS_FILE)]
    # Made read-only after every mount, so a writable folder inside can still be mounted.
    assert argv.index("--remount-ro") > max(i for i, a in enumerate(argv) if a == "--bind")


def test_a_hidden_path_that_does_not_exist_is_left_alone() -> None:
    argv = SandboxPolicy(workdir=WORKSPACE, hidden=(Path("/nowhere"),)).wrap(["a"], on_disk)
    assert "/nowhere" not in argv


def test_home_is_writable_even_inside_the_hidden_data_folder() -> None:
    """The systemd unit: HOME=/var/lib/feishu-bridge/home, the store beside it."""
    policy = SandboxPolicy(workdir=WORKSPACE, hidden=(DATA,), home=DATA / "home")
    argv = policy.wrap(["a"], on_disk)
    assert policy.home_mount is Mount.WRITABLE
    binds = pairs(argv, "--bind")
    assert binds == [str(WORKSPACE), str(DATA / "home")]
    # Mounted after (over) the hidden data folder, or it would be hidden with it.
    assert argv.index(str(DATA / "home")) > argv.index(str(DATA))
    assert policy.hides(DATA / "bridge.sqlite3", on_disk)
    assert not policy.hides(DATA / "home" / ".claude" / "settings.json", on_disk)


@pytest.mark.parametrize("home", [Path("/srv/bridge"), Path("/srv")])
def test_home_that_holds_a_hidden_folder_is_a_private_tmpfs(home: Path) -> None:
    """A writable parent would let the agent rename the hidden folder away and put its own
    `.env` in its place; so such a HOME is empty and private instead."""
    policy = SandboxPolicy(workdir=WORKSPACE, hidden=(Path("/srv/bridge"),), home=home)
    argv = policy.wrap(["a"], on_disk)
    assert policy.home_mount is Mount.PRIVATE
    assert str(home) not in pairs(argv, "--bind")
    assert str(home) in pairs(argv, "--tmpfs")
    assert policy.hides(Path("/srv/bridge/.env"), on_disk)


def test_a_workdir_that_holds_a_hidden_path_is_refused() -> None:
    with pytest.raises(ValueError, match="holds hidden"):
        SandboxPolicy(workdir=Path("/srv"), hidden=(Path("/srv/bridge"),))
    with pytest.raises(ValueError, match="holds hidden"):
        SandboxPolicy(workdir=DATA, hidden=(DATA,))


def test_the_workdir_inside_tmp_shows_through_the_private_tmp() -> None:
    policy = SandboxPolicy(workdir=Path("/tmp/work"), hidden=(Path("/tmp/data"),))
    argv = policy.wrap(["a"], lambda path: "dir")
    assert argv.index("/tmp") < argv.index("/tmp/work")
    assert "/tmp/data" not in argv  # already out of sight under the private /tmp
    assert policy.hides(Path("/tmp/data/bridge.sqlite3"), lambda path: "dir")
    assert not policy.hides(Path("/tmp/work/src"), lambda path: "dir")


def test_the_agent_program_under_a_hidden_folder_is_seen_as_hidden() -> None:
    policy = SandboxPolicy(workdir=WORKSPACE, hidden=(Path("/srv/bridge"),))
    assert policy.hides(Path("/srv/bridge/.venv/bin/python"), on_disk)
    assert not policy.hides(Path("/usr/local/bin/claude-agent-acp"), on_disk)


def test_from_settings_hides_the_data_folder_the_working_folder_and_the_listed_paths(
    tmp_path: Path,
) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        bridge_agent_sandbox="bwrap",
        bridge_data_dir=tmp_path / "data",
        bridge_workdir=tmp_path / "work",
        bridge_agent_sandbox_hidden="/etc/feishu-bridge, /run/secrets",  # type: ignore[arg-type]
    )
    policy = SandboxPolicy.from_settings(settings, cwd=tmp_path / "run", home="/home/bridge")
    assert policy is not None
    assert policy.workdir == (tmp_path / "work").resolve()
    assert policy.hidden == (
        (tmp_path / "data").resolve(),
        (tmp_path / "run").resolve(),
        Path("/etc/feishu-bridge"),
        Path("/run/secrets"),
    )
    assert policy.home == Path("/home/bridge")
    none = Settings(_env_file=None)  # type: ignore[call-arg]
    assert none.agent.bridge_agent_sandbox == "none"
    assert SandboxPolicy.from_settings(none) is None


def _fake_bwrap(folder: Path, script: str) -> str:
    program = folder / "bwrap"
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    return str(program)


def test_probe_reports_a_missing_bwrap(tmp_path: Path) -> None:
    failure = probe(SandboxPolicy(workdir=tmp_path, program=str(tmp_path / "no-bwrap")))
    assert failure is not None
    assert failure.reason == "missing"


def test_probe_reports_bwraps_own_words_when_it_cannot_start(tmp_path: Path) -> None:
    message = "bwrap: No permissions to create a new namespace, likely because the kernel ..."
    program = _fake_bwrap(tmp_path, f"echo '{message}' >&2; exit 1")
    failure = probe(SandboxPolicy(workdir=tmp_path, program=program))
    assert failure is not None
    assert (failure.reason, failure.detail) == ("refused", message)


def test_probe_passes_when_the_sandbox_runs_true(tmp_path: Path) -> None:
    program = _fake_bwrap(tmp_path, 'while [ "$1" != "--" ]; do shift; done; shift; exec "$@"')
    assert probe(SandboxPolicy(workdir=tmp_path, program=program)) is None
