"""The whole product end to end on this machine: Feishu emulator → bridge (webhook mode, real
aiohttp server, SQLite store) → the scripted ACP agent subprocesses, all over loopback sockets.

    python bench/e2e_bench.py [--n 200] [--conversations 20] [--agents 2]   (about 15 s)

Every message is a plain text the scripted agent echoes, in one of C private chats (one user
each). Phases: cold (the first message of each conversation, sent one at a time: the first
one per agent process pays its start-up), paced (C users, each sending its next message when
the previous one is answered) and burst (all N pushed at once). The bridge runs with its
production timings (not the demo's) and logs at INFO to a file, as a deployment would.

Times are the emulator's own records, all on its wall clock (`time.time()`): a message
starts when Feishu begins pushing it (`DeliveryAttempt.at`), its ack is the moment the
emulator served the reaction POST, its reply the moment it served the `/reply` POST carrying
the echo (`ApiCall.at`). The webhook latency is `DeliveryAttempt.latency_ms` (the POST until
the answer is read). These are what Feishu and the user see, free of this script's own wake-up
lag; a client-side `perf_counter` round trip is printed next to them as a cross-check.

Everything but the agents shares one process and one event loop (emulator, bridge, this
script), so the "bridge" peak RSS and CPU include the emulator's.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import resource
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spawned import cpu_s  # noqa: E402
from bridge.config import Tuning, env_fields  # noqa: E402
from bridge.demo import DEMO_TIMINGS, Demo, start_demo  # noqa: E402
from bridge.devtools.emulator import FeishuEmulator  # noqa: E402
from bridge.logs import configure_logging  # noqa: E402

# The demo shortens the presence timings; a benchmark of the product runs with its defaults.
PRODUCT_TIMINGS = {key: env_fields()[key.upper()][2].default for key in DEMO_TIMINGS}
MESSAGES = "/open-apis/im/v1/messages/"
REPLY_TIMEOUT_S = 15.0
SERIAL_MAX = 40  # messages of the one-at-a-time phase


@dataclass
class Sent:
    message_id: str
    chat_id: str
    text: str
    pushed_at: float  # emulator wall clock, when the push started
    webhook_ms: float
    webhook_ok: bool
    client_start: float  # perf_counter before send_user_message
    client_reply: float | None = None  # perf_counter when this script saw the reply


@dataclass
class Tracker:
    """One watcher over the emulator's API-call log (append-only, read from a cursor), so
    waiting for N replies costs one scan per emulator change, not N."""

    emu: FeishuEmulator
    acks: dict[str, list[float]] = field(default_factory=dict)  # message_id -> POST times
    echoes: dict[str, list[float]] = field(default_factory=dict)  # the echo replies
    others: dict[str, list[str]] = field(default_factory=dict)  # any other reply texts
    _waiters: dict[str, asyncio.Future[float]] = field(default_factory=dict)
    _texts: dict[str, str] = field(default_factory=dict)
    _cursor: int = 0

    def expect(self, message_id: str, text: str) -> None:
        self._texts[message_id] = text

    async def run(self) -> None:
        revision = 0
        while True:
            revision = await self.emu.wait_revision(revision, 1.0)
            self.scan()

    def scan(self) -> None:
        # The log itself, from a cursor: `calls()` copies the whole log, and doing that on
        # every change made this script's own cost grow with the run (~5% of the CPU here).
        calls = self.emu._calls
        for call in calls[self._cursor :]:
            if call.method != "POST" or not call.path.startswith(MESSAGES) or not call.ok:
                continue
            parts = call.path[len(MESSAGES) :].split("/")
            if len(parts) != 2:
                continue
            message_id, action = parts
            if action == "reactions":
                self.acks.setdefault(message_id, []).append(call.at)
            elif action == "reply":
                text = (call.json_content() or {}).get("text")
                if message_id in self._texts and text == f"echo: {self._texts[message_id]}":
                    self.echoes.setdefault(message_id, []).append(call.at)
                    waiter = self._waiters.pop(message_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(time.perf_counter())
                else:
                    self.others.setdefault(message_id, []).append(str(text))
        self._cursor = len(calls)

    async def replied(self, message_id: str) -> float | None:
        """perf_counter when the echo reply to `message_id` was seen; None if it never came
        (reported by the correctness check)."""
        if message_id in self.echoes:
            return time.perf_counter()
        waiter = self._waiters.setdefault(message_id, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(waiter, REPLY_TIMEOUT_S)
        except TimeoutError:
            return None


@dataclass
class Phase:
    name: str
    sent: list[Sent]
    wall_s: float
    cpu_s: float  # this process (bridge + emulator + script)


class Bench:
    def __init__(self, demo: Demo, conversations: int) -> None:
        self.demo = demo
        self.emu = demo.emulator
        self.tracker = Tracker(self.emu)
        # One p2p chat per user, as C people each talking to the bot.
        users = [f"ou_bench{i:04d}{secrets.token_hex(12)}" for i in range(conversations)]
        self.chats = [(self.emu.open_chat("p2p", user_open_id=u), u) for u in users]
        self.all_sent: list[Sent] = []
        self._seq = 0

    async def send(self, conv: int, label: str) -> Sent:
        chat_id, user = self.chats[conv]
        self._seq += 1
        text = f"bench {label} {self._seq}"
        start = time.perf_counter()
        delivered = await self.emu.send_user_message(text, chat_id=chat_id, sender_open_id=user)
        attempt = delivered.first_attempt
        assert attempt is not None, "the emulator has no webhook URL"
        self.tracker.expect(delivered.message_id, text)
        sent = Sent(
            delivered.message_id, chat_id, text, attempt.at, attempt.latency_ms, attempt.ok, start
        )
        self.all_sent.append(sent)
        return sent

    async def send_and_wait(self, conv: int, label: str) -> Sent:
        sent = await self.send(conv, label)
        sent.client_reply = await self.tracker.replied(sent.message_id)
        return sent

    async def phase(self, name: str, body: Any) -> Phase:
        cpu, wall = time.process_time(), time.perf_counter()
        sent: list[Sent] = await body
        return Phase(name, sent, time.perf_counter() - wall, time.process_time() - cpu)

    async def cold(self) -> tuple[Phase, Phase]:
        """First message of every conversation, one at a time; split by whether it started an
        agent process."""
        spawned: list[Sent] = []
        first: list[Sent] = []
        for conv in range(len(self.chats)):
            before = len(agent_pids(self.demo))
            sent = await self.send_and_wait(conv, "cold")
            (spawned if len(agent_pids(self.demo)) > before else first).append(sent)
        return Phase("agent start", spawned, 0.0, 0.0), Phase("new session", first, 0.0, 0.0)

    async def serial(self, n: int) -> list[Sent]:
        """One message in flight at a time, round-robin over the conversations."""
        return [await self.send_and_wait(i % len(self.chats), "serial") for i in range(n)]

    async def paced(self, n: int) -> list[Sent]:
        width = len(self.chats)

        async def user(conv: int) -> list[Sent]:
            return [await self.send_and_wait(conv, "paced") for _ in range(conv, n, width)]

        per_user = await asyncio.gather(*(user(c) for c in range(width)))
        return [s for group in per_user for s in group]

    async def burst(self, n: int) -> list[Sent]:
        width = len(self.chats)
        sent = await asyncio.gather(*(self.send(i % width, "burst") for i in range(n)))
        replies = await asyncio.gather(*(self.tracker.replied(s.message_id) for s in sent))
        for s, seen in zip(sent, replies, strict=True):
            s.client_reply = seen
        return list(sent)

    async def settle(self) -> None:
        """Until every conversation is idle (late extra posts would show in the checks)."""
        engine = self.demo.service.engine
        for _ in range(500):
            await engine.wait_idle()
            if all(
                a.conv.state.value == "idle" and not a.conv.queue
                for a in engine.conversations.values()
            ):
                await engine.wait_idle()
                self.tracker.scan()
                return
            await asyncio.sleep(0.01)
        raise AssertionError("conversations did not settle")

    def failures(self) -> list[str]:
        problems: list[str] = []
        replies_in_world: dict[str, list[str]] = {}
        for message in self.emu.bot_messages():
            if message.parent_id:
                replies_in_world.setdefault(message.parent_id, []).append(message.text or "")
        for s in self.all_sent:
            mid, echo = s.message_id, f"echo: {s.text}"
            reactions = self.emu.reactions(mid)
            if len(reactions) != 1 or len(self.tracker.acks.get(mid, [])) != 1:
                problems.append(
                    f"{mid}: {len(reactions)} reactions shown, "
                    f"{len(self.tracker.acks.get(mid, []))} added"
                )
            if replies_in_world.get(mid, []).count(echo) != 1:
                problems.append(f"{mid}: replies {replies_in_world.get(mid, [])!r}")
            if not s.webhook_ok:
                problems.append(f"{mid}: webhook push failed")
        attempts = self.emu.deliveries()
        if len(attempts) != len(self.all_sent) or self.emu.redeliveries_pending:
            problems.append(f"{len(attempts)} pushes for {len(self.all_sent)} messages")
        return problems


def agent_pids(demo: Demo) -> list[int]:
    agents = demo.service.runtime.snapshot()["agents"]
    return [a["pid"] for a in agents if a["pid"] and a["alive"]]


def proc_kb(pid: int | str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if pid == "self" else 0


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def row(phase: Phase, tracker: Tracker, throughput: bool) -> tuple[str, dict[str, float]]:
    sent = phase.sent
    hook = [s.webhook_ms for s in sent]
    ack = [
        (tracker.acks[s.message_id][0] - s.pushed_at) * 1000
        for s in sent
        if s.message_id in tracker.acks
    ]
    reply = [
        (tracker.echoes[s.message_id][0] - s.pushed_at) * 1000
        for s in sent
        if s.message_id in tracker.echoes
    ]
    client = [(s.client_reply - s.client_start) * 1000 for s in sent if s.client_reply]
    figures = {
        "hook50": pct(hook, 50),
        "hook95": pct(hook, 95),
        "hookmax": max(hook, default=float("nan")),
        "ack50": pct(ack, 50),
        "ack95": pct(ack, 95),
        "reply50": pct(reply, 50),
        "reply95": pct(reply, 95),
        "client50": pct(client, 50),
        "rate": len(sent) / phase.wall_s if throughput and phase.wall_s else float("nan"),
        "cpu": phase.cpu_s * 1000 / len(sent) if throughput and sent else float("nan"),
    }
    f = figures
    line = (
        f"{phase.name:<14}{len(sent):>5}"
        f"{f['hook50']:>8.1f}{f['hook95']:>7.1f}{f['hookmax']:>7.1f}"
        f"{f['ack50']:>9.1f}{f['ack95']:>7.1f}"
        f"{f['reply50']:>9.1f}{f['reply95']:>8.1f}"
        f"{f['client50']:>9.1f}"
        + (f"{f['rate']:>8.0f}{f['cpu']:>7.1f}" if throughput else f"{'-':>8}{'-':>7}")
    )
    return line, figures


async def run(n: int, conversations: int, agents: int) -> int:
    base_rss = proc_kb("self", "VmHWM")
    with tempfile.TemporaryDirectory(prefix="e2e-bench-") as tmp:
        log_path = Path(tmp) / "bridge.log"
        configure_logging("INFO")
        handler = logging.getLogger().handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        log_file = log_path.open("w")
        handler.setStream(log_file)
        demo = await start_demo(
            data_dir=Path(tmp),
            settings={**PRODUCT_TIMINGS, "bridge_max_agents": agents},
            tuning=Tuning(),  # the product's
        )
        bench = Bench(demo, conversations)
        watcher = asyncio.create_task(bench.tracker.run())
        try:
            spawn, first = await bench.cold()
            pids = agent_pids(demo)
            agent_cpu = [cpu_s(p) for p in pids]
            serial = await bench.phase("serial", bench.serial(min(n, SERIAL_MAX)))
            paced = await bench.phase(f"paced (C={conversations})", bench.paced(n))
            burst = await bench.phase("burst", bench.burst(n))
            agent_cpu = [cpu_s(p) - c for p, c in zip(pids, agent_cpu, strict=True)]
            warm = len(serial.sent) + len(paced.sent) + len(burst.sent)
            await bench.settle()
            agent_rss = {p: (proc_kb(p, "VmHWM"), proc_kb(p, "VmRSS")) for p in agent_pids(demo)}
        finally:
            watcher.cancel()
            await demo.close()
            log_file.close()
        bridge_rss = proc_kb("self", "VmHWM")
        log_lines = sum(1 for _ in log_path.open())

    problems = bench.failures()
    tracker = bench.tracker
    print(
        f"N={n} messages per phase over {conversations} p2p chats, {agents} agent processes; "
        f"times from the emulator's records (ms); load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(
        f"{'phase':<14}{'msgs':>5}{'webhook p50':>12}{'p95':>7}{'max':>7}"
        f"{'ack p50':>9}{'p95':>7}{'reply p50':>10}{'p95':>7}{'client':>9}"
        f"{'msg/s':>8}{'cpu ms':>7}"
    )
    print(row(spawn, tracker, throughput=False)[0])
    print(row(first, tracker, throughput=False)[0])
    print(row(serial, tracker, throughput=True)[0])
    paced_line, paced_f = row(paced, tracker, throughput=True)
    burst_line, burst_f = row(burst, tracker, throughput=True)
    print(paced_line)
    print(burst_line)
    print(
        "  client = perf_counter round trip seen by this script, send → reply (p50); "
        "cpu ms = this process's CPU per message (bridge + emulator + script)"
    )
    queued = sum(len(texts) for texts in tracker.others.values())
    total = len(bench.all_sent)
    print(
        f"other replies: {queued} (queue notices while a turn runs); "
        f"log: {log_lines / total:.1f} INFO lines per message"
    )
    print(
        f"peak RSS: bridge process {bridge_rss / 1024:.0f} MiB "
        f"(+{(bridge_rss - base_rss) / 1024:.0f} MiB over the {base_rss / 1024:.0f} MiB "
        f"after imports; includes the emulator)"
    )
    for pid, (hwm, rss) in agent_rss.items():
        print(f"          agent pid {pid}: {hwm / 1024:.0f} MiB peak, {rss / 1024:.0f} MiB now")
    own_cpu = serial.cpu_s + paced.cpu_s + burst.cpu_s
    print(
        f"CPU per warm message: agents {sum(agent_cpu) * 1000 / warm:.2f} ms (all together), "
        f"this process {own_cpu * 1000 / warm:.1f} ms"
    )
    for problem in problems[:20]:
        print(f"FAIL {problem}")
    if problems:
        print(f"FAIL {len(problems)} problems over {total} messages")
        return 1
    cold_ms = max(row(spawn, tracker, throughput=False)[1]["reply95"], 0.0)
    print(
        f"OK {total} messages, each one ack and one reply; warm paced reply p50 "
        f"{paced_f['reply50']:.0f} ms / p95 {paced_f['reply95']:.0f} ms at "
        f"{paced_f['rate']:.0f} msg/s, burst {burst_f['rate']:.0f} msg/s "
        f"(webhook max {max(paced_f['hookmax'], burst_f['hookmax']):.0f} ms of 3000), "
        f"cold start {cold_ms:.0f} ms"
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=200, help="messages per phase (paced, burst)")
    parser.add_argument("--conversations", type=int, default=20, help="p2p chats (users)")
    parser.add_argument("--agents", type=int, default=2, help="BRIDGE_MAX_AGENTS")
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args.n, args.conversations, args.agents)))


if __name__ == "__main__":
    main()
