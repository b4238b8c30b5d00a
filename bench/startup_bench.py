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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spawned import BRIDGE, bridge_env, free_port, rss_mib, wait_healthy  # noqa: E402
from bridge.devtools.emulator import FeishuEmulator  # noqa: E402


async def one_run(emu: FeishuEmulator, folder: Path) -> tuple[float, float]:
    port = free_port()
    env = bridge_env(emu, folder, port, BRIDGE_ALLOWED_USERS=emu.default_user_open_id)
    (folder / "work").mkdir(exist_ok=True)
    started = time.perf_counter()
    process = subprocess.Popen(  # noqa: ASYNC220 - the spawn itself is what is timed
        [str(BRIDGE), "run"], env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        await wait_healthy(port, process)
        elapsed = time.perf_counter() - started
        return elapsed, rss_mib(process.pid)
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
