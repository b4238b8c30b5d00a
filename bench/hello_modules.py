"""How many of the bridge's own modules one warm `hello` turn executes, and which.

    python bench/hello_modules.py [--json] [--lines] [--quiet 0.5] [--settle-max 2.0]  (10 s)

The figure of the issue: files under bridge/ with any line run by coverage.py between the
answer to one `hello` and the answer to the next, in a new chat, background included.

It starts the local Feishu emulator (in this process) and `feishu-bridge run` (webhook mode,
product settings, SQLite, the scripted ACP agent) in its own process under coverage.py
(bench/covered_bridge.py: traced from before its first import, so every thread it starts is
measured). User A sends `hello` in their p2p chat: start-up, imports, the agent's start and a
first session are the warm-up. Once A's answer (`echo: hello`) is in and the bridge is quiet,
and right after its next instance heartbeat (a 5 s clock that ticks whether or not anyone
talks: the window ends before the next one), the measured window opens (SIGUSR1). User B sends
`hello` in a new p2p chat; after B's answer the bridge's background work runs until it is
quiet: no Feishu call and under 20 ms of the bridge's CPU for `--quiet` s, `--settle-max` s at
most. Then the window closes (SIGUSR2).

Counted: files under bridge/ with at least one line run inside the window, in the bridge's
process only, any thread; lines run before it (module bodies run at import, in the warm-up) do
not count. bridge/devtools/ (the emulator, the scripted agent) is not the bridge and never
counts; the emulator runs in this process and the agent in its own, neither traced. Nothing
asks the bridge's operator API while measuring (that would run ops/ code): quiet is read from
the emulator's record and /proc, the heartbeat from the SQLite file. Prints the count and the
modules by package, with the number of distinct lines each ran; `--json`, one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.presence_runs import Screen  # noqa: E402
from bench.spawned import bridge_env, cpu_s, free_port, wait_healthy  # noqa: E402
from bridge.devtools.emulator import FeishuEmulator  # noqa: E402
from bridge.i18n import Translator  # noqa: E402

PACKAGES = ("core", "engine", "feishu", "runtime", "store", "ops")
TEXT, ANSWER = "hello", "echo: hello"
USER_A, USER_B = "ou_hello_a", "ou_hello_b"
ANSWER_TIMEOUT_S = 20.0
CPU_QUIET_S = 0.02  # less CPU than this over the quiet stretch is quiet (ticks are 10 ms)
BEAT_WAIT_S = 8.0  # the instance heartbeat comes every 5 s (a third of BRIDGE_LEASE_SECONDS)


def last_beat(database: Path) -> float | None:
    """The bridge's last instance heartbeat, read from its SQLite file (read-only, from this
    process: no bridge code runs for it)."""
    try:
        with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1.0)) as db:
            row = db.execute("SELECT max(heartbeat_at) FROM instances").fetchone()
    except sqlite3.Error:
        return None
    return None if row is None else row[0]


async def after_beat(database: Path) -> None:
    """Until the next instance heartbeat is written: the window then ends before the one after
    (that clock ticks whether or not anyone talks; it is not the turn's background)."""
    before = last_beat(database)
    began = time.perf_counter()
    while time.perf_counter() - began < BEAT_WAIT_S:
        await asyncio.sleep(0.01)
        if last_beat(database) != before:
            return
    raise RuntimeError("no instance heartbeat within 8 s")


async def hello(emu: FeishuEmulator, screen: Screen, user: str) -> float:
    """`hello` from `user` in their own p2p chat; returns when its answer was posted."""
    chat_id = emu.open_chat("p2p", user_open_id=user)
    sent = await emu.send_user_message(TEXT, chat_id=chat_id, sender_open_id=user)
    screen.answers[sent.message_id] = ANSWER
    await emu.wait_for(lambda: screen.answered(sent.message_id), ANSWER_TIMEOUT_S)
    return time.perf_counter()


async def settle(emu: FeishuEmulator, pid: int, quiet: float, most: float) -> float:
    """Until neither a Feishu call nor the bridge's CPU moved for `quiet` s (`most` s at most);
    returns the seconds waited."""
    began = time.perf_counter()
    marks = [(began, emu.revision, cpu_s(pid))]
    while (now := time.perf_counter()) - began < most:
        await asyncio.sleep(0.02)
        now = time.perf_counter()
        marks.append((now, emu.revision, cpu_s(pid)))
        if marks[-1][1] != marks[-2][1]:
            marks = marks[-1:]  # a call: the quiet stretch starts again
            continue
        while len(marks) > 1 and now - marks[1][0] >= quiet:
            marks.pop(0)
        at, _, cpu = marks[0]
        if now - at >= quiet and marks[-1][2] - cpu < CPU_QUIET_S:
            break
    return now - began


async def signalled(process: subprocess.Popen[bytes], sig: int, path: Path) -> None:
    """Send `sig` to the covered bridge and wait for it to write `path`."""
    process.send_signal(sig)
    for _ in range(1000):
        if await asyncio.to_thread(path.exists):
            return
        if process.poll() is not None:
            raise RuntimeError(f"the covered bridge exited {process.returncode}")
        await asyncio.sleep(0.01)
    raise RuntimeError(f"the covered bridge did not write {path.name}")


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    async with FeishuEmulator() as emu:
        with tempfile.TemporaryDirectory(prefix="hello-modules-") as tmp:
            folder = Path(tmp)
            port = free_port()
            env = bridge_env(emu, folder, port, BRIDGE_ALLOWED_USERS=f"{USER_A},{USER_B}")
            env["PYTHONPATH"] = str(ROOT)  # this checkout's bridge, in the agent too
            (folder / "work").mkdir()
            result = folder / "window.json"
            with (folder / "bridge.log").open("wb") as log:
                bridge = subprocess.Popen(  # noqa: ASYNC220
                    [sys.executable, str(ROOT / "bench" / "covered_bridge.py"), str(result)],
                    env=env,
                    cwd=folder,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                await wait_healthy(port, bridge)
                emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
                screen = Screen(emu, Translator("zh_CN"))
                await hello(emu, screen, USER_A)
                warm_settle = await settle(emu, bridge.pid, args.quiet, args.settle_max)
                database = folder / "data" / "bridge.sqlite3"
                await after_beat(database)
                beat = last_beat(database)
                await signalled(bridge, signal.SIGUSR1, Path(f"{result}.open"))
                opened = time.perf_counter()
                answered = await hello(emu, screen, USER_B)
                waited = await settle(emu, bridge.pid, args.quiet, args.settle_max)
                await signalled(bridge, signal.SIGUSR2, result)
                closed = time.perf_counter()
                beat_in_window = last_beat(database) != beat
            except BaseException:
                log_tail = (folder / "bridge.log").read_text(errors="replace")[-2000:]
                print(f"bridge log (tail):\n{log_tail}", file=sys.stderr)
                raise
            finally:
                bridge.terminate()
                try:
                    bridge.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    bridge.kill()
                    bridge.wait()
            files: dict[str, list[int]] = json.loads(result.read_text())["files"]
    return {
        "files": files,
        "warm_settle_s": warm_settle,
        "answer_s": answered - opened,
        "settle_s": waited,
        "window_s": closed - opened,
        "heartbeat_in_window": beat_in_window,
    }


def group_of(module: str) -> str:
    """core/, engine/, … for a path relative to bridge/; `other` for the rest."""
    head = module.split("/", 1)[0]
    return head if "/" in module and head in PACKAGES else "other"


def report(measured: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    bridge_dir = ROOT / "bridge"
    modules: dict[str, int] = {}
    ran: dict[str, list[int]] = {}
    devtools: list[str] = []
    for path, lines in measured["files"].items():
        module = Path(path).relative_to(bridge_dir).as_posix()
        if module.startswith("devtools/"):
            devtools.append(module)  # not the bridge (and not expected: nothing traces them)
        else:
            modules[module] = len(lines)
            ran[module] = lines
    groups: dict[str, dict[str, int]] = {g: {} for g in (*PACKAGES, "other")}
    for module in sorted(modules):
        groups[group_of(module)][module] = modules[module]
    return {
        "count": len(modules),
        "lines": sum(modules.values()),
        "groups": groups,
        "ran": {m: ran[m] for m in sorted(ran)} if args.lines else {},
        "devtools_excluded": sorted(devtools),
        "quiet_s": args.quiet,
        "settle_max_s": args.settle_max,
        "warm_settle_s": round(measured["warm_settle_s"], 3),
        "answer_s": round(measured["answer_s"], 3),
        "settle_s": round(measured["settle_s"], 3),
        "window_s": round(measured["window_s"], 3),
        "heartbeat_in_window": measured["heartbeat_in_window"],
    }


def print_text(out: dict[str, Any]) -> None:
    print(
        f"warm `hello` in a new chat ran {out['count']} of the bridge's modules "
        f"({out['lines']} distinct lines; bridge/devtools/ not counted)"
    )
    print(
        f"window {out['window_s']:.2f} s: answer after {out['answer_s']:.2f} s, then "
        f"{out['settle_s']:.2f} s until quiet ({out['quiet_s']:g} s quiet, at most "
        f"{out['settle_max_s']:g} s)"
    )
    for group, modules in out["groups"].items():
        if not modules:
            continue
        label = f"{group}/" if group != "other" else "other"
        print(f"{label} ({len(modules)})")
        for module, lines in modules.items():
            print(f"  bridge/{module:<44} {lines:>4} lines")
            if module in out["ran"]:
                print(f"      {' '.join(map(str, out['ran'][module]))}")
    if out["heartbeat_in_window"]:
        print("note: the 5 s instance heartbeat fell inside the window (it should not)")
    if out["devtools_excluded"]:
        print(f"not counted (devtools): {', '.join(out['devtools_excluded'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--quiet", type=float, default=0.5, help="seconds of quiet that settle")
    parser.add_argument(
        "--lines", action="store_true", help="also print the line numbers each module ran"
    )
    parser.add_argument("--settle-max", type=float, default=2.0, help="longest settle, seconds")
    args = parser.parse_args()
    out = report(asyncio.run(measure(args)), args)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_text(out)


if __name__ == "__main__":
    main()
