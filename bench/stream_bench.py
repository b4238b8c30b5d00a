"""Streaming turns at scale (issue 33): `feishu-bridge run` as its own process against the
emulator enforcing Feishu's rate limits, N chats each running a realistic coding-agent turn
at once (the scripted agent's `realistic`: 30–80 updates a second of 5–40 characters,
thoughts and a tool call every 2–5 s, then a 2,000–6,000 character answer).

    python bench/stream_bench.py                          # N = 1, 50, 100, 200; both styles
    python bench/stream_bench.py --n 1,50 --seconds 10    # a quick run
    python bench/stream_bench.py --n 200 --ramp 10        # arrivals spread over 10 s

Per style and N it prints:
- cpu: the bridge process's own CPU (from /proc; the agents are other processes) per agent
  update, and as % of one core over the run;
- 429: calls the emulator refused past a limit (50/s to each API, sends 1,000/min, sends
  to one chat 5/s: Feishu's documented figures, docs/scaling.md; with `--total 50` also
  50/s to all APIs together, and the bridge told so);
- exact: turns whose final answer is byte for byte the agent's;
- gap: the longest time a running turn's chat saw nothing new from the bridge (status card
  refresh, or a line), max over chats;
- hint: the latest first sign of work (hint line or card) after the message, max over
  chats; end: the latest final answer after the agent's last chunk, max over chats;
- chunk→visible p50 / p95: from the agent writing a chunk of the answer to Feishu showing it;
- calls/s: Feishu calls a second in all over the run, and per chat (mean over the turn, and
  the most in any one second).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spawned import BRIDGE, bridge_env, cpu_s, free_port, wait_healthy  # noqa: E402
from bridge.devtools.emulator import FeishuEmulator  # noqa: E402

FEISHU = {"app_per_second": 50, "sends_per_minute": 1000, "chat_per_second": 5}
FIRST_HINT = 5.0  # the product's default BRIDGE_FIRST_HINT_SECONDS


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _answer_of_card(body: Any) -> str | None:
    card = body.get("card") if isinstance(body, dict) else None
    data = card.get("data") if isinstance(card, dict) else None
    try:
        parsed = json.loads(data) if isinstance(data, str) else data
    except ValueError:
        return None
    for element in (parsed or {}).get("body", {}).get("elements", []):
        if element.get("element_id") == "answer":
            return str(element.get("content", ""))
    return None


def _prefix(shown: str, answer: str) -> int:
    size = min(len(shown), len(answer))
    return next((i for i in range(size) if shown[i] != answer[i]), size)


class Run:
    def __init__(self, emu: FeishuEmulator, style: str, n: int, seconds: float, log: Path):
        self.emu, self.style, self.n, self.seconds, self.log = emu, style, n, seconds, log
        self.offset = time.time() - time.monotonic()  # the emulator's clock → wall clock
        self.chats: list[str] = []
        self.asked: dict[str, float] = {}  # chat -> when the message was pushed (wall)
        # The emulator shares this process's loop: the poll reads only what is new, so the
        # bench's own bookkeeping never delays Feishu's answers to the bridge.
        self._records: dict[int, dict[str, Any]] = {}
        self._read = 0
        self._ended: set[str] = set()

    async def start(self, ramp: float = 0.0) -> None:
        """Every chat's message, all at once, or spread evenly over `ramp` seconds."""
        self.chats = [self.emu.open_chat("p2p", user_open_id=f"ou_u{i}") for i in range(self.n)]
        pushes = []
        begin = time.monotonic()
        for i, chat in enumerate(self.chats):
            if ramp > 0:
                await asyncio.sleep(max(0.0, begin + ramp * i / self.n - time.monotonic()))
            self.asked[chat] = time.time()
            text = f"realistic {i + 1} {self.seconds} {self.log}"
            pushes.append(asyncio.create_task(self.emu.send_user_message(text, chat_id=chat)))
        await asyncio.gather(*pushes)

    def records(self) -> dict[int, dict[str, Any]]:
        if self.log.exists():
            with self.log.open("rb") as log:
                log.seek(self._read)
                data = log.read()
            whole = data[: data.rfind(b"\n") + 1]  # a line being written waits for the next poll
            self._read += len(whole)
            for line in whole.splitlines():
                if line.strip():
                    record = json.loads(line)
                    self._records[record["seed"]] = record
        return self._records

    def shown(self, chat: str, answer: str) -> list[tuple[float, int, bool]]:
        """(wall time, characters of the answer visible, whole) for each change in `chat`."""
        out: list[tuple[float, int, bool]] = []
        cards: dict[str, str] = {}
        for call in self.emu.calls():
            if call.status != 200 or not isinstance(call.body, dict):
                continue
            text: str | None = None
            if call.path.endswith("/elements/answer/content"):
                text = str(call.body.get("content", ""))
                card_id = call.path.split("/cards/")[1].split("/")[0]
            elif "/cardkit/v1/cards/" in call.path and call.method == "PUT":
                text = _answer_of_card(call.body)
                card_id = call.path.split("/cards/")[1].split("/")[0]
            elif call.body.get("msg_type") == "text":
                card_id = ""
                content = json.loads(str(call.body.get("content", "{}")))
                text = str(content.get("text", ""))
            if text is None or self._chat_of(call, card_id, cards) != chat:
                continue
            out.append((call.at, _prefix(text, answer), text == answer))
        return out

    def _chat_of(self, call: Any, card_id: str, cards: dict[str, str]) -> str | None:
        if card_id:
            if card_id not in cards:
                entity = self.emu.cardkit.entities.get(card_id)
                ids = entity.message_ids if entity is not None else []
                cards[card_id] = self.emu.message(ids[0]).chat_id if ids else ""
            return cards[card_id]
        parts = call.path.split("/messages/")
        if len(parts) == 2:
            message_id = parts[1].split("/")[0]
            try:
                return self.emu.message(message_id).chat_id
            except KeyError:
                return None
        return None

    def done(self) -> bool:
        records = self.records()
        for i, chat in enumerate(self.chats):
            record = records.get(i + 1)
            if chat not in self._ended and record and self.exact(chat, record["answer"]):
                self._ended.add(chat)
        return len(self._ended) == self.n

    def exact(self, chat: str, answer: str) -> bool:
        """The answer, byte for byte: one message, the parts that follow a card's head, or
        the finished card's answer."""
        messages = self.emu.bot_messages(chat)
        texts = [m.text or "" for m in messages if m.msg_type == "text"]
        cards = [m.data for m in messages if m.msg_type == "interactive"]
        finished = [c for c in cards if (c or {}).get("config", {}).get("streaming_mode") is False]
        return (
            answer in texts
            or "".join(texts).strip() == answer
            or any(_answer_of_card({"card": {"data": c}}) == answer for c in finished)
        )


async def one(
    style: str, n: int, seconds: float, settle: float, total: int = 0, ramp: float = 0.0
) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="stream-bench-"))
    log = folder / "turns.jsonl"
    (folder / "work").mkdir()
    async with FeishuEmulator(time_scale=1.0) as emu:
        emu.set_rate_limits(**FEISHU, total_per_second=total or None)
        port = free_port()
        emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
        env = bridge_env(
            emu,
            folder,
            port,
            BRIDGE_ALLOW_ALL="true",
            BRIDGE_PRESENCE_STYLE=style,
            BRIDGE_MAX_RUNNING_TURNS=str(n + 10),
            BRIDGE_MAX_AGENTS="2",
            BRIDGE_LOG_LEVEL="WARNING",
            BRIDGE_FEISHU_TOTAL_CALLS_PER_SECOND=str(total),
        )
        with (folder / "bridge.log").open("wb") as out:
            process = subprocess.Popen(  # noqa: ASYNC220 - once per run
                [str(BRIDGE), "run"], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        lags: list[float] = []
        probe = asyncio.create_task(_lag(lags))
        try:
            await wait_healthy(port, process)
            run = Run(emu, style, n, seconds, log)
            cpu0, t0 = cpu_s(process.pid), time.time()
            agents0 = _children_cpu(process.pid)
            await run.start(ramp)
            deadline = t0 + ramp + seconds * 1.5 + settle
            while not run.done() and time.time() < deadline:
                await asyncio.sleep(0.5)
                agents0 = {**_children_cpu(process.pid), **agents0}
            cpu, wall = cpu_s(process.pid) - cpu0, time.time() - t0
            agents = _children_cpu(process.pid)
            agents_cpu = sum(agents.values()) - sum(agents0.get(pid, 0.0) for pid in agents)
            result = measure(run, cpu, wall, timed_out=not run.done())
            result["agents_core_pct"] = 100 * agents_cpu / wall
            result["emulator_lag_max_s"] = max(lags, default=0.0)
            return result
        finally:
            probe.cancel()
            process.terminate()
            await asyncio.to_thread(process.wait, 30)


async def _lag(lags: list[float]) -> None:
    """How late this process's loop (the emulator's) wakes: the machine's share of latency."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(0.05)
        lags.append(time.monotonic() - before - 0.05)


def _children_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each agent process the bridge started."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return {}
    return {int(child): cpu_s(int(child)) for child in children}


def measure(run: Run, cpu: float, wall: float, *, timed_out: bool) -> dict[str, Any]:
    records = run.records()
    limits = run.emu.limits
    updates = sum(r["updates"] for r in records.values())
    exact, gaps, hints, ends, latencies = 0, [], [], [], []
    per_chat_rate, per_chat_peak = [], []
    by_chat: dict[str | None, list[float]] = defaultdict(list)
    for counted in limits.counted:
        if counted.limited is None:
            by_chat[counted.chat].append(counted.at + run.offset)
    for i, chat in enumerate(run.chats):
        record = records.get(i + 1)
        if record is None:
            continue
        answer, sent = record["answer"], record["sent"]
        shown = run.shown(chat, answer)
        exact += run.exact(chat, answer)
        asked, last_chunk = run.asked[chat], sent[-1][0]
        times = [t for t in by_chat.get(chat, []) if t >= asked]
        visible = [t for t in times[1:]]  # the first call to the chat is the ack reaction
        if visible:
            hints.append(visible[0] - asked)
            ends.append(times[-1] - last_chunk)  # the ending: the chat's last call
            running = [asked + FIRST_HINT] + [t for t in visible if t <= last_chunk] + [last_chunk]
            gaps.append(max(b - a for a, b in itertools.pairwise(running)))
            span = max(1.0, times[-1] - asked)
            per_chat_rate.append(len(times) / span)
            per_chat_peak.append(max(sum(1 for u in times if t <= u < t + 1.0) for t in times))
        for at, chars in sent:
            seen = next((t for t, c, _ in shown if c >= chars), None)
            if seen is not None:
                latencies.append(seen - at)
    total = sum(len(v) for v in by_chat.values())
    return {
        "style": run.style,
        "n": run.n,
        "turns_done": len(records),
        "timed_out": timed_out,
        "updates": updates,
        "cpu_s": cpu,
        "us_per_update": cpu / updates * 1e6 if updates else float("nan"),
        "core_pct": 100 * cpu / wall,
        "rate_limited": len(limits.refused()),
        "exact": exact,
        "gap_max_s": max(gaps, default=float("nan")),
        "hint_max_s": max(hints, default=float("nan")),
        "end_max_s": max(ends, default=float("nan")),
        "chunk_p50_s": pct(latencies, 0.5),
        "chunk_p95_s": pct(latencies, 0.95),
        "calls_per_s": total / wall,
        "chat_calls_per_s": statistics.fmean(per_chat_rate) if per_chat_rate else float("nan"),
        "chat_peak_per_s": max(per_chat_peak, default=0),
    }


def show(r: dict[str, Any]) -> str:
    return (
        f"{r['style']:8} N={r['n']:<4} cpu {r['us_per_update']:6.0f} µs/update"
        f" {r['core_pct']:5.1f}% core | 429s {r['rate_limited']:4} | exact"
        f" {r['exact']}/{r['n']} | gap {r['gap_max_s']:5.1f}s | hint {r['hint_max_s']:5.1f}s"
        f" end {r['end_max_s']:5.1f}s | chunk→visible p50 {r['chunk_p50_s']:5.2f}s"
        f" p95 {r['chunk_p95_s']:5.2f}s | calls/s {r['calls_per_s']:5.1f} all,"
        f" {r['chat_calls_per_s']:4.2f}/chat (peak {r['chat_peak_per_s']}/s)"
        f"{' TIMED OUT' if r['timed_out'] else ''} [{r['turns_done']} turns,"
        f" {r['updates']} updates; agents {r['agents_core_pct']:.0f}% core,"
        f" emulator lag max {r['emulator_lag_max_s']:.2f}s]"
    )


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="1,50,100,200", help="turns at once, comma-separated")
    parser.add_argument("--styles", default="messages,card")
    parser.add_argument("--seconds", type=float, default=60.0, help="each turn's length")
    parser.add_argument("--settle", type=float, default=60.0, help="extra wait for the ends")
    parser.add_argument("--json", action="store_true", help="also print each row as JSON")
    parser.add_argument(
        "--total", type=int, default=0, help="also cap all calls together (a whole-app meter)"
    )
    parser.add_argument(
        "--ramp", type=float, default=0.0, help="spread the N messages over this many seconds"
    )
    args = parser.parse_args(argv)
    for n in (int(x) for x in args.n.split(",")):
        for style in args.styles.split(","):
            result = await one(style, n, args.seconds, args.settle, args.total, args.ramp)
            print(show(result), flush=True)
            if args.json:
                print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
