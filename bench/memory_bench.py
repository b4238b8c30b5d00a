"""Memory that levels off: `feishu-bridge run` as its own process against the emulator, N
chats talking without pause (each sends its next message as soon as the last is answered),
the call budget raised so Feishu's pacing is not the limit. With a fixed set of chats, what
a finished turn leaves behind must be bounded: the bridge's resident memory should level off.

    python bench/memory_bench.py                              # 24 chats, 8 minutes
    python bench/memory_bench.py --minutes 30 --warmup 5      # the long run
    python bench/memory_bench.py --minutes 4 --dump /tmp/heap   # what grows

Each chat cycles through the scripted agent's turns: an echo, a short stream, an approval
(clicked "allow once" as soon as its card shows), a slow turn (silent past the running
hint, then the answer). Every message carries a token its answer repeats; a message counts
as answered when the token reaches Feishu.

Every `--every` seconds it prints the bridge's resident memory (VmRSS from /proc; in
brackets its anonymous part, the heaps without mapped files) and the messages answered; at
the end the growth after the first `--warmup` minutes, in MiB and in KiB per message
answered (the endpoints, and the slope of a least-squares line through the
samples after the warm-up, which a single noisy sample moves less).

The bridge runs as `feishu-bridge run` does (bridge.app's `run`: secrets taken, heap
settled, the same loop), from this checkout, with one change `run` does not offer: the
minute's sends raised past Feishu's 1,000 (`Tuning`), as BRIDGE_FEISHU_APP_CALLS_PER_SECOND
raises each API's second. `--dump DIR` has the bridge write, at each sample after the
warm-up, a census of its heap to DIR/NNN.txt (objects by type; every large container and the
attribute that holds it): what grows shows between two dumps. `--tracemalloc` adds what was
allocated since the warm-up and is still alive, by line and by traceback (slow: for finding
where, not for the curve).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spawned import (  # noqa: E402
    bridge_env,
    cpu_s,
    follow_calls,
    free_port,
    rss_mib,
    wait_healthy,
)

SENDS_PER_MINUTE = 60_000.0  # far past what 24 chats send
APP_CALLS_PER_SECOND = 1_000.0
# Each chat's turns, in turn (chats start at different places): mostly quick ones, a slow one
# in sixteen, so that the chats keep the bridge busy.
CYCLE = (
    *("echo", "stream", "echo", "approval", "echo", "stream", "echo", "approval"),
    *("echo", "stream", "echo", "approval", "echo", "stream", "echo", "slow"),
)
SLOW_MS = 6_000  # past the running hint (BRIDGE_FIRST_HINT_SECONDS, 5 s)
TOKEN = re.compile(r"memq(\d+)n(\d+)q")
_REPLY = re.compile(r"^/open-apis/im/v1/messages/([^/]+)/reply$")


def script(kind: str, token: str) -> str:
    """The user's message: what the scripted agent does, ending with the token."""
    if kind == "stream":
        return f"stream 8 30\nsay {token}"
    if kind == "approval":
        return f"permission Run the tests\nsay {token}"
    if kind == "slow":
        return f"sleep {SLOW_MS}\nsay {token}"
    return f"ping {token}"  # not a command: the agent answers "echo: ping TOKEN"


# --- the bridge's side (this file run with --bridge) ---------------------------------------


def serve_bridge() -> int:
    """`feishu-bridge run`, with the minute's sends raised and, when asked, tracemalloc."""
    import functools

    import bridge
    import bridge.running
    from bridge.app import main as bridge_main
    from bridge.config.tuning import Tuning

    if Path(bridge.__file__).resolve().parent != ROOT / "bridge":
        sys.exit(f"bridge imported from {bridge.__file__}, not from {ROOT}")
    tuning = Tuning(feishu_sends_per_minute=SENDS_PER_MINUTE)
    bridge.running.build_service = functools.partial(  # type: ignore[assignment]
        bridge.running.build_service, tuning=tuning
    )
    folder = os.environ.get("MEMORY_BENCH_DUMP")
    if folder:
        _dump_on_signal(Path(folder), trace=bool(os.environ.get("MEMORY_BENCH_TRACEMALLOC")))
    return bridge_main(["run"])


def _dump_on_signal(folder: Path, trace: bool) -> None:
    """At each SIGUSR2 (the first comes at the end of the warm-up), DIR/NNN.txt: a census of
    the heap (objects by type, and every large container with what holds it), to compare
    between dumps. With `trace`, the first signal also starts tracemalloc (tracing the
    start-up slows it past the agents' timeouts) and each later dump adds what is still
    alive of what was allocated since, by line and by traceback."""
    import gc
    import linecache
    import tracemalloc
    from collections import deque

    count = 0
    ignore = [
        tracemalloc.Filter(False, path)
        for path in (tracemalloc.__file__, linecache.__file__, __file__, "<unknown>")
    ] + [tracemalloc.Filter(False, "<frozen importlib._bootstrap*>")]

    def dump(signum: int, frame: Any) -> None:
        nonlocal count
        if count == 0:
            gc.unfreeze()  # frozen objects are invisible to gc.get_objects()
            if trace:
                tracemalloc.start(10)
        count += 1
        lines = census()
        if trace and count > 1:
            lines += allocations(tracemalloc.take_snapshot().filter_traces(ignore))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{count:03d}.txt").write_text("\n".join(lines) + "\n")

    def census() -> list[str]:
        gc.collect()
        objects = gc.get_objects()
        types: dict[str, int] = {}
        big: list[Any] = []
        for o in objects:
            name = f"{type(o).__module__}.{type(o).__qualname__}"
            types[name] = types.get(name, 0) + 1
            if isinstance(o, (dict, list, set, deque)) and len(o) >= 30:
                big.append(o)
        blocks = sys.getallocatedblocks()
        lines = [f"--- {len(objects)} objects tracked, {blocks} memory blocks allocated ---"]
        lines.append("--- types ---")
        lines += [f"{n:9d}  {t}" for t, n in sorted(types.items(), key=lambda i: -i[1])]
        lines.append("--- large containers ---")
        for o in sorted(big, key=len, reverse=True)[:150]:
            lines.append(f"{len(o):9d}  {type(o).__name__}  {holder(o)}")
        return lines

    def holder(o: Any) -> str:
        """Which attribute of which object holds `o` (or which module global)."""
        for ref in gc.get_referrers(o):
            if isinstance(ref, dict):
                key = next((k for k, v in ref.items() if v is o), None)
                if key is None:
                    continue
                if "__name__" in ref and "__file__" in ref:
                    return f"{ref['__name__']}.{key}"
                for owner in gc.get_referrers(ref):
                    if getattr(owner, "__dict__", None) is ref:
                        return f"{type(owner).__module__}.{type(owner).__qualname__}.{key}"
                return f"dict[{key!r}]"
            attrs = getattr(ref, "__dict__", None) or {
                name: getattr(ref, name, None) for name in getattr(type(ref), "__slots__", ())
            }
            if attrs and not isinstance(ref, type):
                key = next((k for k, v in attrs.items() if v is o), "?")
                return f"{type(ref).__module__}.{type(ref).__qualname__}.{key}"
        return "?"

    def allocations(snapshot: Any) -> list[str]:
        by_line = snapshot.statistics("lineno")
        total = sum(s.size for s in by_line)
        lines = [f"--- alive, allocated since tracing started: {total / 1024:.0f} KiB ---"]
        lines += [f"{s.size / 1024:9.1f} KiB {s.count:7d}  {s.traceback}" for s in by_line[:50]]
        lines.append("--- by traceback ---")
        for stat in snapshot.statistics("traceback")[:30]:
            lines.append(f"{stat.size / 1024:9.1f} KiB {stat.count:7d}")
            lines += [f"      {frame}" for frame in stat.traceback.format(most_recent_first=True)]
        return lines

    signal.signal(signal.SIGUSR2, dump)


# --- the users' side ------------------------------------------------------------------------


class Talk:
    """The chats, each sending its next message once the last is answered."""

    def __init__(self, emu: Any, chats: int) -> None:
        self.emu = emu
        self.chats = chats
        self.answered = 0
        self.clicked = 0
        self.stuck = 0
        self.sent = 0
        self.stopping = False
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._posted: set[str] = set()  # tokens a message the bridge posted carried
        self.twice = 0  # answers posted more than once
        self._clicks: set[asyncio.Task[Any]] = set()

    async def chat(self, i: int) -> None:
        user = f"ou_mem{i}"
        chat = self.emu.open_chat("p2p", user_open_id=user)
        loop = asyncio.get_running_loop()
        n = 0
        while not self.stopping:
            token = f"memq{i}n{n}q"
            answered = loop.create_future()
            self._waiting[token] = answered
            text = script(CYCLE[(i + n) % len(CYCLE)], token)
            self.sent += 1
            await self.emu.send_user_message(text, chat_id=chat, sender_open_id=user)
            try:
                await asyncio.wait_for(answered, 120)
                self.answered += 1
            except TimeoutError:
                self.stuck += 1
            self._waiting.pop(token, None)
            n += 1

    async def watch(self) -> None:
        """Reads each call the bridge made once (and lets the emulator forget it)."""
        await follow_calls(self.emu, self._made)

    def _made(self, call: Any) -> None:
        if call.status == 200 and call.method in ("POST", "PUT", "PATCH"):
            self._look(call)

    def _look(self, call: Any) -> None:
        text = json.dumps(call.body, ensure_ascii=False)
        reply = _REPLY.match(call.path)
        posts = call.method == "POST" and (reply is not None or call.path.endswith("/messages"))
        for token in {m.group(0) for m in TOKEN.finditer(text)}:
            future = self._waiting.get(token)
            if future is not None and not future.done():
                future.set_result(None)
            if posts:
                self.twice += token in self._posted
                self._posted.add(token)
        if reply is not None and '\\"approval\\"' in text:
            content = json.loads(call.body.get("content") or "{}")
            value = button_value(content, "approval", "allow-once")
            card = (call.response or {}).get("data", {}).get("message_id")
            if value is not None and card:
                asker = self.emu.message(reply.group(1)).sender_id  # only they may answer
                task = asyncio.create_task(self.emu.click_card(card, value, asker))
                self._clicks.add(task)
                task.add_done_callback(self._clicked)

    def _clicked(self, task: asyncio.Task[Any]) -> None:
        self._clicks.discard(task)
        if not task.cancelled() and task.exception() is None and task.result().card_replaced:
            self.clicked += 1


def button_value(card: Any, kind: str, choice: str | None = None) -> dict[str, Any] | None:
    """The value of the card's first button of `kind` ("approval", "question"), and of
    `choice` when given ("allow-once"), wherever it sits in the card."""
    if isinstance(card, dict):
        if card.get("kind") == kind and choice in (None, card.get("choice")):
            return card
        card = list(card.values())
    if isinstance(card, list):
        for inner in card:
            found = button_value(inner, kind, choice)
            if found is not None:
                return found
    return None


def anon_mib(pid: int) -> float:
    """The process's anonymous resident memory (its heaps, not mapped files), MiB."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    line = next((x for x in status.splitlines() if x.startswith("RssAnon:")), "")
    return int(line.split()[1]) / 1024 if line else float("nan")


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    if len(points) < 2:
        return float("nan")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else float("nan")


async def run(args: argparse.Namespace) -> None:
    from bridge.devtools.emulator import FeishuEmulator  # not in the bridge's process

    folder = Path(tempfile.mkdtemp(prefix="memory-bench-"))
    (folder / "work").mkdir()
    async with FeishuEmulator(time_scale=1.0) as emu:
        port = free_port()
        emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
        env = bridge_env(
            emu,
            folder,
            port,
            BRIDGE_ALLOW_ALL="true",
            BRIDGE_PRESENCE_STYLE=args.style,
            BRIDGE_MAX_RUNNING_TURNS=str(args.chats + 10),
            BRIDGE_LOG_LEVEL="WARNING",
            BRIDGE_FEISHU_APP_CALLS_PER_SECOND=str(APP_CALLS_PER_SECOND),
        )
        env["PYTHONPATH"] = str(ROOT)  # the scripted agent from this checkout too
        if args.dump:
            env["MEMORY_BENCH_DUMP"] = args.dump
            if args.tracemalloc:
                env["MEMORY_BENCH_TRACEMALLOC"] = "1"
        with (folder / "bridge.log").open("wb") as out:
            process = subprocess.Popen(  # noqa: ASYNC220 - once per run
                [sys.executable, __file__, "--bridge"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        talk = Talk(emu, args.chats)
        tasks: list[asyncio.Task[None]] = []
        main = asyncio.current_task()
        if main is not None:  # a SIGTERM stops the bridge too
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
        try:
            await wait_healthy(port, process)
            load = os.getloadavg()
            print(
                f"{args.chats} chats, {args.minutes:g} min, style {args.style}, pid"
                f" {process.pid}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
                f" ({os.cpu_count()} cores); log {folder / 'bridge.log'}",
                flush=True,
            )
            tasks.append(asyncio.create_task(talk.watch()))
            tasks += [asyncio.create_task(talk.chat(i)) for i in range(args.chats)]
            start = time.monotonic()
            samples: list[tuple[float, int, float]] = []  # (seconds, answered, MiB)
            cpu0 = cpu_s(process.pid)
            print("   time      RSS  (anon)  answered    msg/s  bridge cpu", flush=True)
            at, last = 0.0, (0.0, 0, cpu0)
            while at <= args.minutes * 60 + 1e-6:
                await asyncio.sleep(max(0.0, start + at - time.monotonic()))
                if process.poll() is not None:
                    raise RuntimeError(f"the bridge exited {process.returncode}")
                now, answered, cpu = time.monotonic() - start, talk.answered, cpu_s(process.pid)
                rss = rss_mib(process.pid)
                samples.append((now, answered, rss))
                rate = (answered - last[1]) / max(1e-9, now - last[0])
                core = 100 * (cpu - last[2]) / max(1e-9, now - last[0])
                print(
                    f"{int(now // 60):4d}:{int(now % 60):02d} {rss:7.1f} MiB"
                    f" ({anon_mib(process.pid):5.1f}) {answered:8d}"
                    f" {rate:8.1f} {core:9.0f}%",
                    flush=True,
                )
                if args.dump and now >= args.warmup * 60 - 1e-6:
                    process.send_signal(signal.SIGUSR2)
                last = (now, answered, cpu)
                at += args.every
            talk.stopping = True
            report(samples, args.warmup * 60, talk)
        finally:
            for task in tasks:
                task.cancel()
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()


def report(samples: list[tuple[float, int, float]], warmup: float, talk: Talk) -> None:
    after = [s for s in samples if s[0] >= warmup - 1e-6]
    first, end = samples[0], samples[-1]
    print(
        f"messages: sent {talk.sent}, answered {talk.answered}, approvals clicked"
        f" {talk.clicked}, unanswered after 120 s {talk.stuck}, answered twice {talk.twice}"
    )
    print(f"RSS {first[2]:.1f} -> {end[2]:.1f} MiB over {end[1]} messages")
    if len(after) < 2:
        print("too short for the growth after the warm-up")
        return
    w, messages = after[0], end[1] - after[0][1]
    grown = end[2] - w[2]
    per = grown * 1024 / messages if messages else float("nan")
    fit_per_msg = slope([(s[1], s[2]) for s in after]) * 1024
    fit_per_min = slope([(s[0], s[2]) for s in after]) * 60
    print(
        f"after the first {warmup / 60:g} min: RSS {w[2]:.1f} -> {end[2]:.1f} MiB"
        f" ({grown:+.2f} MiB over {messages} messages, {per:+.3f} KiB/message);"
        f" fitted {fit_per_msg:+.3f} KiB/message, {fit_per_min:+.3f} MiB/min"
    )


def main() -> None:
    if sys.argv[1:] == ["--bridge"]:
        sys.exit(serve_bridge())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--chats", type=int, default=24)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=2.0, help="minutes before growth counts")
    parser.add_argument("--style", choices=("messages", "card"), default="messages")
    parser.add_argument("--dump", default="", help="a folder for the bridge's heap dumps")
    parser.add_argument(
        "--tracemalloc", action="store_true", help="the dumps also say where it was allocated"
    )
    args = parser.parse_args()
    args.dump = os.path.abspath(args.dump) if args.dump else ""  # the bridge runs elsewhere
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
