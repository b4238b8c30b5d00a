"""What the benches that run `feishu-bridge run` as its own process share: a free loopback
port, the environment of a webhook-mode bridge against the local emulator, waiting for its
`/healthz` and for it to go quiet, a process's CPU time from /proc, and how late this
process's own loop wakes."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
# This checkout's venv, or (a worktree without one) the entry point beside the running
# Python: the bridge's code comes from PYTHONPATH (this checkout) either way.
BRIDGE = ROOT / ".venv" / "bin" / "feishu-bridge"
if not BRIDGE.exists():
    BRIDGE = Path(sys.executable).with_name("feishu-bridge")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    """Resident memory of a process, MiB (nan when it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def bridge_env(emu: Any, folder: Path, port: int, **settings: str) -> dict[str, str]:
    """A webhook-mode bridge on `port` against the emulator, the scripted agent, its data and
    work folders in `folder`; `settings` (FEISHU_* / BRIDGE_* names) add to it or win."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("FEISHU_", "BRIDGE_"))}
    return {
        **inherited,
        "FEISHU_APP_ID": emu.app_id,
        "FEISHU_APP_SECRET": emu.app_secret,
        "FEISHU_DOMAIN": emu.url,
        "FEISHU_EVENT_MODE": "webhook",
        "FEISHU_VERIFICATION_TOKEN": emu.verification_token,
        "BRIDGE_PORT": str(port),
        "BRIDGE_OPS_PORT": str(free_port()),
        "BRIDGE_DATA_DIR": str(folder / "data"),
        "BRIDGE_WORKDIR": str(folder / "work"),
        "BRIDGE_AGENT_COMMAND": f"{sys.executable} -m bridge.devtools.scripted_agent",
        # The scripted agent is the bridge's own code; benches run as root on the bench machine.
        "BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX": "true",
        **settings,
    }


def apps_config(
    folder: Path, domain: str, app_ids: list[str], names: list[str], mode: str = "webhook"
) -> Path:
    """A BRIDGE_CONFIG_FILE in `folder`: the apps `app_ids` of the emulator at `domain`,
    named `names`, their secrets in SECRET_<n> and TOKEN_<n>, all on one project of the
    scripted agent."""
    (folder / "work").mkdir(parents=True, exist_ok=True)
    agent = f"{sys.executable} -m bridge.devtools.scripted_agent"
    text = f"[projects.work]\nagent_command = '{agent}'\nworkdir = 'work'\n"
    for n, (app, name) in enumerate(zip(app_ids, names, strict=True)):
        text += (
            f'\n[apps.{name}]\napp_id = "{app}"\napp_secret_env = "SECRET_{n}"\n'
            f'verification_token_env = "TOKEN_{n}"\ndomain = "{domain}"\nmode = "{mode}"\n'
            'allow_all = true\ndefault_project = "work"\n'
        )
    path = folder / "bridge.toml"
    path.write_text(text)
    return path


async def wait_healthy(port: int, process: subprocess.Popen[bytes]) -> None:
    """Until `GET /healthz` on `port` answers 200, polled every 10 ms (30 s at most)."""
    async with httpx.AsyncClient(trust_env=False, timeout=1.0) as http:
        for _ in range(3000):
            if process.poll() is not None:
                detail = process.stderr.read().decode()[-500:] if process.stderr else ""
                raise RuntimeError(f"the process under test exited {detail}")
            try:
                if (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.01)
    raise RuntimeError("never healthy")


async def wait_quiet(pid: int, *, quiet: float = 1.0, most: float = 20.0) -> float:
    """Until the process has used under 20 ms of CPU in `quiet` seconds (at most `most`
    seconds); the seconds waited. A bridge answers `/healthz` while it still starts in the
    background (the ACP SDK is imported in a worker thread, a few tenths of a second of
    CPU): a figure per agent update leaves that one-time cost out this way."""
    began = time.monotonic()
    samples = [(began, cpu_s(pid))]
    while time.monotonic() - began < most:
        await asyncio.sleep(0.1)
        now = time.monotonic()
        samples.append((now, cpu_s(pid)))
        while len(samples) > 1 and now - samples[1][0] >= quiet:
            del samples[0]
        then, used = samples[0]
        if now - then >= quiet and samples[-1][1] - used < 0.02:
            break
    return time.monotonic() - began


async def follow_calls(emu: Any, look: Callable[[Any], None]) -> None:
    """Hands `look` each call the emulator recorded, once, and lets the emulator forget
    them (a long run would otherwise keep every call); only the bench reads that record."""
    calls: list[Any] = emu._calls
    read = 0
    while True:
        for call in calls[read:]:
            look(call)
        read = len(calls)
        if read > 10_000:
            del calls[:read]
            read = 0
        await asyncio.sleep(0.02)


async def loop_lag(lags: list[float]) -> None:
    """How late this process's loop wakes, appended to `lags` every 50 ms until cancelled:
    the emulator shares the bench's loop, so this is the machine's share of latency."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(0.05)
        lags.append(time.monotonic() - before - 0.05)
