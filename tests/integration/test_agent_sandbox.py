"""What the agent can reach (issue 8): a real agent tries every route to the bridge's secrets.

The scripted agent's `probe` command reads, writes and runs what it is told and reports
each outcome; this test process plays the bridge (its pid, its working folder with a `.env`,
its data folder with the store). Under `BRIDGE_AGENT_SANDBOX=bwrap`, started the way the
service starts it (`AcpRuntime.from_settings`), each route fails while the agent's normal
work still succeeds. Where bubblewrap cannot run (not installed, no user namespaces) the
test is skipped, except in CI (`CI` set): there it fails and says why.

The folders live under /var/tmp, not /tmp: the sandbox gives the agent a private /tmp, which
would hide them for a reason other than the one under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from tenacity import wait_none

from bridge.clock import LoopClock
from bridge.config import Settings
from bridge.runtime.acp.runtime import AcpRuntime
from bridge.runtime.events import MessageChunk, TurnEnded, TurnEvent
from bridge.runtime.port import WORKSPACE_CHOICE
from bridge.runtime.router import Routes, acp_routed

REPO = Path(__file__).resolve().parents[2]
AGENT = f"{sys.executable} -m bridge.devtools.scripted_agent"
STORE_BYTES = b"SQLite format 3\x00 app secret: store-secret-1f2e"
ENV_FILE = "FEISHU_APP_SECRET=env-file-secret-3c4d\n"


def _bwrap_unusable() -> str | None:
    """Why bubblewrap cannot start a sandbox here, or None."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed (scripts/install-sandbox.sh installs it)"
    probe = ["bwrap", "--unshare-all", "--share-net", "--ro-bind", "/", "/"]
    done = subprocess.run(
        [*probe, "--proc", "/proc", "--dev", "/dev", "true"], capture_output=True, check=False
    )
    if done.returncode != 0:
        words = done.stderr.decode(errors="replace").strip()
        return f"bwrap cannot start a sandbox (no user namespaces?): {words}"
    return None


# The sandbox gives the agent a private /tmp, so an agent program installed under /tmp is out
# of its sight by design (check-config says so). A checkout there cannot run these tests.
CHECKOUT_IN_TMP = any(Path(p).resolve().is_relative_to("/tmp") for p in (sys.prefix, REPO))
# The environ probe drops the bridge to `nobody` once it has started (when run as root), and
# the bridge still reads its package files (its translations): a checkout in a folder only
# its owner may enter (mktemp -d gives 0700) cannot run that test.
CHECKOUT_PRIVATE = os.geteuid() == 0 and any(
    p.stat().st_mode & 0o005 != 0o005 for p in (REPO / "bridge", *REPO.parents, REPO)
)


def require_bwrap() -> None:
    if CHECKOUT_IN_TMP:
        pytest.skip("this checkout lies under /tmp, which the sandbox hides from the agent")
    reason = _bwrap_unusable()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {reason}")
    pytest.skip(reason)


class Site:
    """The bridge's folders, as a deployment has them, outside /tmp."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.data = base / "data"
        self.run = base / "run"  # the bridge's working folder: where it reads .env
        self.work = base / "work"  # BRIDGE_WORKDIR
        self.home = base / "home"
        self.outside = base / "outside"
        for folder in (self.data, self.run, self.work, self.home, self.outside):
            folder.mkdir()
        self.store = self.data / "bridge.sqlite3"
        self.store.write_bytes(STORE_BYTES)
        self.env_file = self.run / ".env"
        self.env_file.write_text(ENV_FILE)


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    require_bwrap()
    base = Path(tempfile.mkdtemp(prefix="bridge-sandbox-test-", dir="/var/tmp")).resolve()
    try:
        site = Site(base)
        monkeypatch.chdir(site.run)
        monkeypatch.setenv("HOME", str(site.home))
        # Secrets the bridge holds in its environment: the agent's copy must not have them.
        monkeypatch.setenv("FEISHU_APP_SECRET", "environment-secret-5e6f")
        monkeypatch.setenv("BRIDGE_OPS_TOKEN", "ops-token-7a8b")
        yield site
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest_asyncio.fixture
async def sandboxed(site: Site) -> AsyncIterator[AcpRuntime]:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        bridge_agent_command=AGENT,
        bridge_agent_sandbox="bwrap",
        bridge_data_dir=site.data,
        bridge_workdir=site.work,
    )
    runtime = AcpRuntime.from_settings(
        settings,
        clock=LoopClock(),
        env={"PYTHONPATH": str(REPO)},
        restart_wait=wait_none(),
        start_timeout=30,
    )
    yield runtime
    await runtime.close()


async def probe(runtime: AcpRuntime, routes: dict[str, list[object]]) -> dict[str, object]:
    session = await runtime.open_session("probe")
    events: list[TurnEvent] = []
    await runtime.prompt(session.session_id, f"probe {json.dumps(routes)}", events.append)
    assert isinstance(events[-1], TurnEnded), events
    text = "".join(e.text for e in events if isinstance(e, MessageChunk))
    assert text.startswith("probe: "), text
    report: dict[str, object] = json.loads(text.removeprefix("probe: "))
    return report


def undo_the_sandbox(site: Site) -> list[list[str]]:
    """What an agent with capabilities (bwrap started by root keeps them unless told) would
    run: unmount what hides the data folder, make the system writable."""
    return [["umount", str(site.data)], ["mount", "-o", "remount,bind,rw", "/"]]


def sha256_of(data: bytes) -> str:
    return "ok:" + hashlib.sha256(data).hexdigest()


def check_report(
    site: Site, report: dict[str, object], bridge_environ: Path, own_file: Path
) -> None:
    read, write = report["read"], report["write"]
    assert isinstance(read, dict)
    assert isinstance(write, dict)

    # Every route to the bridge's secrets fails ... (hashes only: a failure must not print
    # the environment of the machine running the tests)
    bridges_environ = sha256_of(bridge_environ.read_bytes())
    assert read[str(bridge_environ)] != bridges_environ, "the agent read the bridge's environ"
    assert not read[str(site.store)].startswith("ok"), read
    assert not read[str(site.env_file)].startswith("ok"), read
    assert report["env"] == []
    for target in (site.outside / "escaped.txt", site.env_file, site.store):
        assert write[str(target)] != "ok", write
    # ... and the real files say the same.
    assert not (site.outside / "escaped.txt").exists()
    assert site.env_file.read_text() == ENV_FILE
    assert site.store.read_bytes() == STORE_BYTES

    # The agent's normal work still succeeds.
    assert read["/etc/os-release"] == sha256_of(Path("/etc/os-release").read_bytes())
    assert write[str(own_file)] == "ok"
    assert own_file.read_text() == "written by the scripted agent\n"
    assert write[str(site.home / ".agent-settings")] == "ok"
    assert (site.home / ".agent-settings").exists()
    ran = report["run"]
    assert isinstance(ran, dict)
    assert ran.pop("python3 -c print('hello')") == "ok"
    # Whoever started the bridge, root included, the agent cannot take the sandbox apart.
    assert [command for command, outcome in ran.items() if outcome == "ok"] == []


async def test_a_sandboxed_agent_reaches_no_secret_and_still_does_its_work(
    site: Site, sandboxed: AcpRuntime
) -> None:
    bridge_environ = Path(f"/proc/{os.getpid()}/environ")
    own_file = site.work / "notes.txt"
    report = await probe(
        sandboxed,
        {
            "read": [str(bridge_environ), str(site.store), str(site.env_file), "/etc/os-release"],
            "write": [
                str(site.outside / "escaped.txt"),
                str(site.env_file),  # a .env where the bridge reads one
                str(site.store),
                str(own_file),
                str(site.home / ".agent-settings"),
            ],
            "run": [["python3", "-c", "print('hello')"], *undo_the_sandbox(site)],
            "env": ["FEISHU_", "BRIDGE_"],
        },
    )
    check_report(site, report, bridge_environ, own_file)


# --- without a sandbox: the bridge's environ --------------------------------------------------

NOBODY = 65534
# Plays `feishu-bridge run` up to the point where it has read its settings, then waits. As
# root it first becomes an ordinary user (root reads every process's environ anyway), and
# dumpable again, as any process of that user would be.
BRIDGE = """
import ctypes, os, sys
import bridge.app as app
if os.geteuid() == 0:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)
def settings_for_run(out, secrets=None, environ=None):
    print("ready", flush=True)
    sys.stdin.readline()
    return None
app.settings_for_run = settings_for_run
sys.exit(app.main(["run"]))
""".replace("NOBODY", str(NOBODY))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")
@pytest.mark.skipif(
    CHECKOUT_IN_TMP, reason="this checkout lies under /tmp (the probe runs from outside it)"
)
@pytest.mark.skipif(
    CHECKOUT_PRIVATE, reason="this checkout is in a folder `nobody` may not enter (mode 0700?)"
)
def test_without_a_sandbox_the_bridges_environ_is_unreadable_to_its_own_user() -> None:
    marker = "FEISHU_APP_SECRET=environ-secret-9c0d"
    env = {**os.environ, "FEISHU_APP_SECRET": marker.partition("=")[2], "PYTHONPATH": str(REPO)}
    with subprocess.Popen(  # closes the pipes however the test ends
        [sys.executable, "-c", BRIDGE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd="/",
    ) as bridge:
        _probe_environ(bridge, marker)


def _probe_environ(bridge: subprocess.Popen[bytes], marker: str) -> None:
    assert bridge.stdout is not None
    assert bridge.stdin is not None
    try:
        assert bridge.stdout.readline() == b"ready\n"
        as_user = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
        reader = subprocess.run(
            ["cat", f"/proc/{bridge.pid}/environ"],
            capture_output=True,
            check=False,
            **as_user,  # type: ignore[arg-type]
        )
        leaked = marker.encode() in reader.stdout
        assert not leaked, "a process of the same user read the bridge's environ"
        assert reader.returncode != 0
        # Refused; or, under /proc's hidepid=invisible, a process one may not read is not
        # listed at all.
        assert re.search(rb"Permission denied|No such file", reader.stderr), reader.stderr
    finally:
        bridge.stdin.close()
        assert bridge.wait(10) == 2  # `run` without settings: the configuration exit code


# --- several workspaces: the sandbox follows the one the session is in ---------------------


async def test_a_sandboxed_agent_sees_only_the_workspace_its_session_is_in(site: Site) -> None:
    docs = site.base / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "secret.md").write_text("docs only\n")
    (site.work / "app.py").write_text("app only\n")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        bridge_agent_command=AGENT,
        bridge_agent_sandbox="bwrap",
        bridge_data_dir=site.data,
        bridge_workspaces=f"app={site.work};docs={docs}",
    )
    routes = Routes.of(settings.agent.agent_profiles, settings.agent.workspace_roots)
    runtime = acp_routed(settings, routes, LoopClock(), {"env": {"PYTHONPATH": str(REPO)}})
    routes_tried = {
        "read": [str(site.work / "app.py"), str(docs / "secret.md")],
        "write": [str(site.work / "new.py"), str(docs / "guide" / "new.md")],
    }
    try:
        reports = {}
        for name, folder in (("app", site.work), ("guide", docs / "guide")):
            chosen = {WORKSPACE_CHOICE: str(folder)}
            session = await runtime.open_session(name, chosen=chosen)
            events: list[TurnEvent] = []
            text = f"probe {json.dumps(routes_tried)}"
            await runtime.prompt(session.session_id, text, events.append)
            said = "".join(e.text for e in events if isinstance(e, MessageChunk))
            reports[name] = json.loads(said.removeprefix("probe: "))
    finally:
        await runtime.close()
    app, guide = reports["app"], reports["guide"]
    assert app["read"][str(site.work / "app.py")] == sha256_of(b"app only\n")
    assert not app["read"][str(docs / "secret.md")].startswith("ok")
    assert app["write"][str(site.work / "new.py")] == "ok"
    assert app["write"][str(docs / "guide" / "new.md")] != "ok"
    # A session in a folder inside the docs workspace: that workspace, not the app's.
    assert guide["read"][str(docs / "secret.md")] == sha256_of(b"docs only\n")
    assert not guide["read"][str(site.work / "app.py")].startswith("ok")
    assert guide["write"][str(docs / "guide" / "new.md")] == "ok"
    assert guide["write"][str(site.work / "new.py")] != "ok"
    assert (docs / "guide" / "new.md").exists()
