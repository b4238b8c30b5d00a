"""What another app costs in memory (issue 44: at most 10 MiB each): the resident memory of
an idle `feishu-bridge run` serving 1, 2, 3 … apps from a config file.

    python bench/apps_memory.py [--apps 3] [--mode webhook|longconn] [--settle 8] [--repeat 3]

For each count of apps it starts the local Feishu emulator hosting that many apps and
`feishu-bridge run` (its own process, as an operator runs it) with BRIDGE_CONFIG_FILE
naming them, each app by webhook on its own path (or over its own long connection), one
project with the scripted ACP agent; waits for /healthz (and, with long connections, for
every app's connection), then lets it idle `--settle` seconds (its start's background work,
the ACP SDK's import among it, ends) and reads its VmRSS and RssAnon from /proc every
100 ms for a second: the median. No message is sent, so no agent runs: what is measured is
what an app costs the bridge's own process. Each count is started `--repeat` times; the
table gives the medians, and the cost of each app past the first (the slope from 1 app to
the most), which the issue wants at most 10 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spawned import BRIDGE, apps_config, bridge_env, free_port, wait_healthy  # noqa: E402

LIMIT_MIB = 10.0  # the issue's


def app_ids(count: int) -> list[str]:
    return [f"cli_memory_{chr(ord('a') + n)}" for n in range(count)]


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, RssAnon) of a process, MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["RssAnon"]


async def idle(count: int, args: argparse.Namespace) -> tuple[float, float]:
    """The median (VmRSS, RssAnon) of an idle bridge serving `count` apps."""
    from bridge.devtools.emulator import FeishuEmulator
    from bridge.devtools.emulator.apps import AppSpec

    apps = app_ids(count)
    specs = [AppSpec(a, f"{a}-secret", bot_name=a, verification_token=f"{a}-t") for a in apps]
    async with FeishuEmulator(apps=specs) as emu:
        with tempfile.TemporaryDirectory() as folder:
            keys = {f"SECRET_{n}": f"{a}-secret" for n, a in enumerate(apps)}
            keys |= {f"TOKEN_{n}": f"{a}-t" for n, a in enumerate(apps)}
            port = free_port()
            env = bridge_env(emu, Path(folder), port, BRIDGE_LOG_LEVEL="WARNING", **keys)
            for key in [k for k in env if k.startswith("FEISHU_")]:
                del env[key]  # the apps are the file's
            env["BRIDGE_CONFIG_FILE"] = str(
                apps_config(
                    Path(folder), emu.url, apps, [f"app{n}" for n in range(len(apps))], args.mode
                )
            )
            with open(Path(folder, "bridge.log"), "ab") as log:  # noqa: ASYNC230
                process = subprocess.Popen(  # noqa: ASYNC220
                    [str(BRIDGE), "run"], env=env, stdin=subprocess.DEVNULL, stderr=log
                )
            try:
                for n, app in enumerate(apps):
                    emu.set_webhook_url(f"http://127.0.0.1:{port}/feishu/events/app{n}", app)
                await wait_healthy(port, process)
                if args.mode == "longconn":
                    await emu.wait_for(lambda: all(emu.long_connections(a) for a in apps), 30)
                await asyncio.sleep(args.settle)
                samples = []
                for _ in range(10):
                    samples.append(memory(process.pid))
                    await asyncio.sleep(0.1)
                return (
                    statistics.median(s[0] for s in samples),
                    statistics.median(s[1] for s in samples),
                )
            finally:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


def slope(points: list[tuple[int, float]]) -> float:
    """The least-squares MiB per app through (apps, MiB)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


async def run(args: argparse.Namespace) -> int:
    counts = list(range(1, args.apps + 1))
    found: dict[int, list[tuple[float, float]]] = {n: [] for n in counts}
    for _ in range(args.repeat):
        for n in counts:  # interleaved: a drift of the machine spreads over every count
            found[n].append(await idle(n, args))
    print(
        f"feishu-bridge run, idle, apps by {args.mode}; median of {args.repeat} starts each"
        f" ({args.settle:g} s after healthy)"
    )
    print(f"  {'apps':>4} {'VmRSS MiB':>10} {'RssAnon MiB':>12} {'each start (VmRSS)':>20}")
    rss: dict[int, float] = {}
    anon: dict[int, float] = {}
    for n in counts:
        rss[n] = statistics.median(r for r, _ in found[n])
        anon[n] = statistics.median(a for _, a in found[n])
        starts = " ".join(f"{r:.1f}" for r, _ in found[n])
        print(f"  {n:4} {rss[n]:10.1f} {anon[n]:12.1f}   {starts}")
    per_app = slope([(n, rss[n]) for n in counts])
    per_app_anon = slope([(n, anon[n]) for n in counts])
    steps = ", ".join(f"{n - 1}→{n}: {rss[n] - rss[n - 1]:+.1f}" for n in counts[1:])
    ok = per_app <= LIMIT_MIB
    print(
        f"  each app past the first: {per_app:.1f} MiB resident ({per_app_anon:.1f} MiB"
        f" anonymous), by step {steps} MiB; at most {LIMIT_MIB:g}: {'yes' if ok else 'NO'}"
    )
    return 0 if ok else 1


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--apps", type=int, default=3, help="the most apps (from 1)")
    parser.add_argument("--mode", choices=("webhook", "longconn"), default="webhook")
    parser.add_argument("--settle", type=float, default=8.0, help="idle seconds before reading")
    parser.add_argument("--repeat", type=int, default=3, help="starts of each count")
    args = parser.parse_args()
    if args.apps < 2:
        parser.error("--apps is at least 2")
    return args


def main() -> Any:
    return asyncio.run(run(parse()))


if __name__ == "__main__":
    sys.exit(main())
