"""Start to healthy: `feishu-bridge run` in webhook mode, spawned as an operator would, against
the local Feishu emulator, until `GET /healthz` on the Feishu port answers 200.

    python bench/startup_bench.py [--runs 5]

Prints, per run and as the median: the time from spawn to the first 200 from /healthz, and the
bridge's resident memory (VmRSS) right then. The agent is started lazily, at the first
message, so it is in neither figure. Also prints what importing lark-oapi alone costs, which
only the long connection pays.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.devtools.emulator import FeishuEmulator  # noqa: E402

BRIDGE = ROOT / ".venv" / "bin" / "feishu-bridge"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def one_run(emu: FeishuEmulator, folder: Path) -> tuple[float, float]:
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FEISHU_", "BRIDGE_"))},
        "FEISHU_APP_ID": emu.app_id,
        "FEISHU_APP_SECRET": emu.app_secret,
        "FEISHU_DOMAIN": emu.url,
        "FEISHU_EVENT_MODE": "webhook",
        "FEISHU_VERIFICATION_TOKEN": emu.verification_token,
        "BRIDGE_PORT": str(port),
        "BRIDGE_OPS_PORT": str(_free_port()),
        "BRIDGE_ALLOWED_USERS": emu.default_user_open_id,
        "BRIDGE_DATA_DIR": str(folder / "data"),
        "BRIDGE_WORKDIR": str(folder / "work"),
        "BRIDGE_AGENT_COMMAND": f"{sys.executable} -m bridge.devtools.scripted_agent",
    }
    (folder / "work").mkdir(exist_ok=True)
    started = time.perf_counter()
    process = subprocess.Popen(  # noqa: ASYNC220 - the spawn itself is what is timed
        [str(BRIDGE), "run"], env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=1.0) as http:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"bridge exited: {process.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
                try:
                    answer = await http.get(f"http://127.0.0.1:{port}/healthz")
                    if answer.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
        return elapsed, _rss_mib(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=10)


def lark_import_cost() -> tuple[float, float]:
    code = (
        "import time,resource;t=time.perf_counter();import bridge.feishu.sdk_import;"
        "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)"
    )
    base = "import resource;print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    bare = subprocess.run([sys.executable, "-c", base], capture_output=True, text=True)
    seconds, rss = (float(x) for x in out.stdout.split())
    return seconds, rss - float(bare.stdout)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    times, memory = [], []
    async with FeishuEmulator() as emu:
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as folder:
                seconds, rss = await one_run(emu, Path(folder))
            times.append(seconds)
            memory.append(rss)
            print(f"run {run + 1}: start to healthy {seconds * 1000:.0f} ms, RSS {rss:.0f} MiB")
    print(
        f"median: start to healthy {statistics.median(times) * 1000:.0f} ms,"
        f" RSS after start {statistics.median(memory):.0f} MiB (webhook mode)"
    )
    seconds, rss = lark_import_cost()
    print(
        f"long connection only: importing lark-oapi costs {seconds * 1000:.0f} ms"
        f" and about {rss:.0f} MiB more"
    )


if __name__ == "__main__":
    asyncio.run(main())
