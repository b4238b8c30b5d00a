"""The bridge against bare relays and the floor, side by side in one run, each its own
process, against the local Feishu emulator (webhook mode, encrypted and signed events).

    python bench/relay_bench.py [--n 300] [--rate 50] [--chats 20] [--rounds 3]
                                [--loop uvloop|asyncio] [--simple] [--profile FILE]

The bare relay does what every Feishu bot must and nothing else: verify the signature,
decrypt, check the token, parse, answer 200, and add one reaction over a kept-alive session:
aiohttp's `ClientSession` (the bare aiohttp relay issue 18 measures against; "relay") and,
apart, httpx's `AsyncClient` ("relay, httpx": the library the bridge's own calls go through).
The bridge does the simplest whole turn: the ack reaction, the agent's one-line answer (the
scripted agent, its CPU counted apart), the reply; then, on the same process, a turn whose
agent reports ten tool calls before its answer (the progress row). Beside them runs the
floor (`floor_bridge.py`, row "floor"): the least a bridge built of this project's required
parts does per message (journal in aiosqlite, the reaction and the reply with httpx, the turn
over agent-client-protocol, nothing else), so the bridge's own cost shows apart from what
its parts cost. All run on the same event loop (`--loop`, the bridge's BRIDGE_EVENT_LOOP).

Messages are pushed at `--rate` per second, round-robin over `--chats` private chats, `--n`
to each process. The processes live through the whole run and take turns, `--n / --rounds`
messages at a time, so a slower or busier stretch of the machine weighs on both rather than
on whichever ran then (measured one after the other, the ratio moved by ±15% between runs
with the machine's load). For each process it prints the time from spawn to a healthy
`/healthz`, its resident memory then, its own CPU (user + system, from /proc) per message,
the ack latency (the emulator's push -> reaction POST) p50 / p99, whether every message was
acked exactly once (and, for the bridge and the floor, answered exactly once), the floor's
CPU / each relay's, and the bridge's figures / each relay's and the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bare_server import auth_headers, opened_event, serve_events  # noqa: E402
from bench.spawned import BRIDGE, bridge_env, cpu_s, free_port, rss_mib, wait_healthy  # noqa: E402

ENCRYPT_KEY = "bench-encrypt-key"
TOKEN = "bench-verification-token"


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(c) for c in text]
    return found


# --- the bare relay (runs as `relay_bench.py --serve PORT DOMAIN APP_ID SECRET CLIENT`) ------

# The relays, each its own process: the reaction added with aiohttp's client (the bare
# aiohttp relay issue 18 measures against), and with httpx's (what the bridge's calls use).
RELAYS = {"relay": "aiohttp", "relay, httpx": "httpx"}


async def serve_relay(port: int, domain: str, app_id: str, secret: str, client: str) -> None:
    """`client`: what adds the reaction, aiohttp's `ClientSession` (the bare aiohttp relay)
    or httpx's default `AsyncClient` (the library the bridge's calls go through)."""
    import aiohttp
    import httpx
    from aiohttp import web

    headers = await auth_headers(domain, app_id, secret)
    reaction = {"reaction_type": {"emoji_type": "OnIt"}}
    tasks: set[asyncio.Task[None]] = set()

    if client == "aiohttp":
        session = aiohttp.ClientSession(domain)

        async def react(message_id: str) -> None:
            path = f"/open-apis/im/v1/messages/{message_id}/reactions"
            async with session.post(path, json=reaction, headers=headers) as answer:
                await answer.read()

    else:
        http = httpx.AsyncClient(base_url=domain, timeout=10)

        async def react(message_id: str) -> None:
            path = f"/open-apis/im/v1/messages/{message_id}/reactions"
            await http.post(path, json=reaction, headers=headers)

    async def handle(request: web.Request) -> web.Response:
        event = opened_event(request.headers, await request.read(), ENCRYPT_KEY, TOKEN)
        task = asyncio.create_task(react(event["event"]["message"]["message_id"]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return web.json_response({})

    await serve_events(port, handle)


# --- the load ------------------------------------------------------------------------------


# `--progress`: a turn whose agent reports ten tool calls before its one-line answer.
PROGRESS_TURN = "\n".join(f"tool step {i}" for i in range(10)) + "\nsay done"


async def load(
    emu: object, chats: list[str], n: int, rate: float, users: list[str], text: str = ""
) -> list[tuple[str, float]]:
    """Push `n` messages at `rate`; (message id, when Feishu started pushing it) each."""
    start = time.perf_counter()
    pushes = []
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        chat, user = chats[i % len(chats)], users[i % len(users)]
        send = emu.send_user_message(text or f"hello {i}", chat_id=chat, sender_open_id=user)  # type: ignore[attr-defined]
        pushes.append(asyncio.create_task(send))
    out = []
    for push in pushes:
        delivered = await push
        out.append((delivered.message_id, delivered.first_attempt.at))
    return out


def ack_ms(emu: object, sent: list[tuple[str, float]]) -> list[float]:
    reacted: dict[str, float] = {}
    for call in emu.calls("/open-apis/im/v1/messages/", method="POST"):  # type: ignore[attr-defined]
        if call.path.endswith("/reactions"):
            reacted.setdefault(call.path.split("/")[-2], call.at)
    return [(reacted[m] - at) * 1000 for m, at in sent if m in reacted]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@dataclass
class Side:
    """One process under load: its chats (opened once, warmed once) and what its rounds
    measured, pooled."""

    name: str
    process: subprocess.Popen[bytes]
    webhook: str
    wait_replies: bool
    text: str = ""
    answer: str = "echo: hello"  # what the scripted agent's answer to `text` carries
    chats: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    sent: list[tuple[str, float]] = field(default_factory=list)
    cpu: float = 0.0
    agents: float = 0.0


async def measure_round(side: Side, emu: Any, args: argparse.Namespace, n: int) -> None:
    """`n` messages to `side` (its chats opened and warmed at its first round)."""
    emu.webhook_url = side.webhook
    if not side.chats:
        side.users = [f"ou_bench_{side.name}_{i}" for i in range(args.chats)]
        side.chats = [emu.open_chat("p2p", user_open_id=u) for u in side.users]
        warmed = await load(emu, side.chats, args.chats, args.rate, side.users)  # pools warm
        await _settle(emu, warmed, side.wait_replies)
    spy = None
    if side.name == "bridge" and args.profile and not side.sent:
        spy = subprocess.Popen(  # noqa: ASYNC220 - started once, not on a hot path
            [
                "py-spy",
                "record",
                "--pid",
                str(side.process.pid),
                "-f",
                "raw",
                "-o",
                args.profile,
                "-r",
                "200",
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await asyncio.sleep(1.0)
    pid = side.process.pid
    before, agents_before = cpu_s(pid), sum(cpu_s(p) for p in children(pid))
    sent = await load(emu, side.chats, n, args.rate, side.users, side.text)
    await _settle(emu, sent, side.wait_replies, side.answer)
    side.cpu += cpu_s(pid) - before
    side.agents += sum(cpu_s(p) for p in children(pid)) - agents_before
    side.sent += sent
    if spy is not None:
        spy.send_signal(2)  # SIGINT: py-spy writes its file
        spy.wait(timeout=30)


def figures(side: Side, emu: Any) -> dict[str, float]:
    acks = ack_ms(emu, side.sent)
    ids = {m for m, _ in side.sent}
    n = len(side.sent)
    return {
        "cpu": side.cpu * 1000 / n,
        "agents": side.agents * 1000 / n,
        "ack50": pct(acks, 0.5),
        "ack99": pct(acks, 0.99),
        "acked_once": _once(emu, ids, "/reactions"),
        "answered_once": (
            _once(emu, ids, "/reply", side.answer) if side.wait_replies else float("nan")
        ),
    }


def _once(emu: object, ids: set[str], kind: str, answer: str | None = None) -> int:
    """How many of `ids` got exactly one call of `kind` (a reaction; a reply carrying the
    agent's `answer`, when given: a message that waited for its chat also gets a queued line,
    and a ten-tool turn its progress lines)."""
    calls = emu.calls("/open-apis/im/v1/messages/", method="POST")  # type: ignore[attr-defined]
    counts = Counter(
        c.path.split("/")[-2]
        for c in calls
        if c.path.endswith(kind) and (answer is None or answer in json.dumps(c.body))
    )
    return sum(1 for m in ids if counts[m] == 1)


async def _settle(
    emu: object, sent: list[tuple[str, float]], wait_replies: bool, answer: str = "echo: hello"
) -> None:
    """Until every message has its reaction (the relay) or its answer (the bridge). Checked
    at every call the emulator records, so only the calls new since the last check are read:
    rescanning them all made this process's own CPU grow with the square of the run, on the
    cores the measured process shares."""
    kind = "/reply" if wait_replies else "/reactions"
    missing = {m for m, _ in sent}
    checked = 0

    def done() -> bool:
        nonlocal checked
        calls = emu.calls("/open-apis/im/v1/messages/", method="POST")  # type: ignore[attr-defined]
        for c in calls[checked:]:
            if c.path.endswith(kind) and (not wait_replies or answer in json.dumps(c.body)):
                missing.discard(c.path.split("/")[-2])
        checked = len(calls)
        return not missing

    await emu.wait_for(done, timeout=300)  # type: ignore[attr-defined]


async def started(command: list[str], env: dict[str, str] | None, port: int) -> Spawned:
    """Spawn, then wait for a healthy /healthz: (process, ms to healthy, RSS MiB then)."""
    began = time.perf_counter()
    process = subprocess.Popen(command, env=env)  # noqa: ASYNC220 - the spawn is what is timed
    await wait_healthy(port, process)
    return process, (time.perf_counter() - began) * 1000, rss_mib(process.pid)


Spawned = tuple[subprocess.Popen[bytes], float, float]


def row(name: str, start: tuple[float, float] | None, r: dict[str, float], n: int) -> str:
    boot = f"start {start[0]:5.0f} ms, RSS {start[1]:4.0f} MiB | " if start else " " * 31 + "| "
    answered = (
        ""
        if r["answered_once"] != r["answered_once"]
        else (f", answered once {r['answered_once']:.0f}/{n}")
    )
    return (
        f"{name:16} {boot}CPU {r['cpu']:5.2f} ms/msg (agents apart: {r['agents']:.2f}),"
        f" ack p50 {r['ack50']:5.1f} ms, p99 {r['ack99']:6.1f} ms,"
        f" acked once {r['acked_once']:.0f}/{n}{answered}"
    )


async def main(args: argparse.Namespace) -> None:
    from bridge.devtools.emulator import FeishuEmulator

    print(
        f"{args.n} messages at {args.rate:.0f}/s over {args.chats} chats to each process, in"
        f" {args.rounds} rounds taking turns, on {args.loop}"
    )
    async with FeishuEmulator(encrypt_key=ENCRYPT_KEY, verification_token=TOKEN) as emu:
        with tempfile.TemporaryDirectory() as folder:
            port = free_port()
            env = bridge_env(
                emu,
                Path(folder),
                port,
                FEISHU_ENCRYPT_KEY=ENCRYPT_KEY,
                BRIDGE_ALLOW_ALL="true",
                BRIDGE_MAX_AGENTS="2",
                BRIDGE_LOG_LEVEL="WARNING",
                BRIDGE_EVENT_LOOP=args.loop,
            )
            await asyncio.to_thread(Path(folder, "work").mkdir)
            bridge, *bridge_start = await started([str(BRIDGE), "run"], env, port)
            url = "http://127.0.0.1:{}/feishu/events"
            # Measured beside the bridge: the relays and the floor, with their start figures.
            beside: dict[str, tuple[Side, tuple[float, float]]] = {}
            try:
                for name, client in RELAYS.items():
                    relay_port = free_port()
                    serve = [sys.executable, __file__, "--loop", args.loop, "--serve"]
                    relay, *boot = await started(
                        [*serve, str(relay_port), emu.url, emu.app_id, emu.app_secret, client],
                        None,
                        relay_port,
                    )
                    side = Side(name, relay, url.format(relay_port), wait_replies=False)
                    beside[name] = (side, (boot[0], boot[1]))
                floor_port = free_port()
                floor, *floor_start = await started(
                    [
                        sys.executable,
                        str(Path(__file__).with_name("floor_bridge.py")),
                        str(floor_port),
                        emu.url,
                        emu.app_id,
                        emu.app_secret,
                        ENCRYPT_KEY,
                        TOKEN,
                        env["BRIDGE_AGENT_COMMAND"],
                        args.loop,
                    ],
                    {**os.environ, "TMPDIR": folder},  # its database goes with the run's folder
                    floor_port,
                )
                least = Side("floor", floor, url.format(floor_port), wait_replies=True)
                beside["floor"] = (least, (floor_start[0], floor_start[1]))
                simple = Side("bridge", bridge, url.format(port), wait_replies=True)
                progress = Side(
                    "progress", bridge, url.format(port), True, PROGRESS_TURN, answer="done"
                )
                others = [side for side, _ in beside.values()]
                sides = [simple, *others] if args.simple else [simple, progress, *others]
                # Rounds taking turns: whatever else the machine does then weighs on all.
                for r in range(args.rounds):
                    share = args.n // args.rounds + (r < args.n % args.rounds)
                    for side in sides:
                        await measure_round(side, emu, args, share)
            finally:
                for process in [bridge, *(side.process for side, _ in beside.values())]:
                    process.terminate()
                    process.wait(timeout=20)
        one = figures(simple, emu)
        tools = None if args.simple else figures(progress, emu)
        measured = {name: (figures(side, emu), boot) for name, (side, boot) in beside.items()}
    print(row("bridge", (bridge_start[0], bridge_start[1]), one, args.n))
    if tools is not None:
        print(row("bridge, 10 tools", None, tools, args.n))
    for name, (figured, booted) in measured.items():
        print(row(name, booted, figured, args.n))
    for name, (figured, _) in measured.items():
        if name == "floor":
            continue
        floor = measured["floor"][0]["cpu"] / figured["cpu"]
        print(f"floor / {name}: CPU {floor:.1f}×")
    for name, (figured, _) in measured.items():
        ten = "" if tools is None else f" (10 tools: {tools['cpu'] / figured['cpu']:.1f}×)"
        print(
            f"bridge / {name}: CPU {one['cpu'] / figured['cpu']:.1f}×{ten},"
            f" ack p50 {one['ack50'] / figured['ack50']:.1f}×,"
            f" p99 {one['ack99'] / figured['ack99']:.1f}×"
        )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument(
        "--rounds", type=int, default=3, help="the processes take turns, n/rounds at a time"
    )
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument(
        "--profile", metavar="FILE", help="py-spy record the bridge during its first round (raw)"
    )
    parser.add_argument("--simple", action="store_true", help="skip the ten-tool turn's row")
    parser.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    from bridge.loops import loop_factory

    arguments = parse()
    with asyncio.Runner(loop_factory=loop_factory(arguments.loop)) as runner:
        if arguments.serve:
            port, domain, app_id, secret, client = arguments.serve
            runner.run(serve_relay(int(port), domain, app_id, secret, client))
        else:
            runner.run(main(arguments))
