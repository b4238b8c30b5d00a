"""The live status card against the message lines, on the real stack (emulator → bridge in
webhook mode → the scripted ACP agent), with the product's own timings.

    python bench/card_bench.py [--chunks 200] [--chunk-ms 10] [--turns 3]   (about 20 s)

The turn is the demo's long kind: a tool call, then an answer streamed in `--chunks` chunks
`--chunk-ms` apart, then a last sentence. For each style it prints the Feishu calls per turn
(token calls left out). For card style it also prints:

- chunk → card: for every chunk, the time from the bridge reading it off the agent's stdout
  (a tap on the ACP connection) to the first card change (emulator record) whose answer
  shows it; p50 / p95 / max. Throttling (`BRIDGE_CARD_UPDATE_INTERVAL_SECONDS`, 0.5 s by
  default) dominates it by design;
- changes per second per card: over the card's life, and the most in any one second
  (Feishu allows 10).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.config import Tuning, env_fields  # noqa: E402
from bridge.demo import DEMO_TIMINGS, start_demo  # noqa: E402
from bridge.runtime.acp.runtime import AcpRuntime  # noqa: E402

PRODUCT_TIMINGS = {key: env_fields()[key.upper()][2].default for key in DEMO_TIMINGS}


def _answer(card_json: str) -> str:
    card = json.loads(card_json)
    for element in card.get("body", {}).get("elements", []):
        if element.get("element_id") == "answer":
            return str(element.get("content", ""))
    return ""


async def run(style: str, chunks: int, chunk_ms: int, turns: int) -> dict[str, Any]:
    arrivals: dict[str, float] = {}  # chunk text -> when the bridge read it
    tap = AcpRuntime._observe

    def observe(self: AcpRuntime, event: Any) -> None:
        update = ((event.message or {}).get("params") or {}).get("update") or {}
        if update.get("sessionUpdate") == "agent_message_chunk":
            text = str((update.get("content") or {}).get("text", "")).strip()
            arrivals.setdefault(text, time.time())
        tap(self, event)

    AcpRuntime._observe = observe  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as folder:
            settings = {**PRODUCT_TIMINGS, "bridge_presence_style": style}
            demo = await start_demo(data_dir=Path(folder), settings=settings, tuning=Tuning())
            try:
                return await _turns(demo, style, chunks, chunk_ms, turns, arrivals)
            finally:
                await demo.close()
    finally:
        AcpRuntime._observe = tap  # type: ignore[method-assign]


async def _turns(
    demo: Any, style: str, chunks: int, chunk_ms: int, turns: int, arrivals: dict[str, float]
) -> dict[str, Any]:
    emu = demo.emulator
    await demo.service.runtime.start()
    calls_per_turn: list[int] = []
    delays: list[float] = []
    rates: list[tuple[float, int]] = []
    for turn in range(turns):
        before = len(emu.calls())
        changes_before = len(emu.cardkit.changes)
        arrivals.clear()
        done = f"Tests passed ({turn})."
        sent = await emu.send_user_message(
            f"tool Run tests\nstream {chunks} {chunk_ms}\nsay {done}"
        )
        mid = sent.message_id
        await emu.wait_for(lambda mid=mid, done=done: _ended(emu, mid, style, done), timeout=60)
        await demo.service.engine.wait_idle()
        calls = [c for c in emu.calls()[before:] if "tenant_access_token" not in c.path]
        calls_per_turn.append(len(calls))
        if style == "card":
            changes = emu.cardkit.changes[changes_before:]
            delays += _delays(changes, arrivals, chunks)
            rates.append(_rate(changes))
    return {"calls": calls_per_turn, "delays": delays, "rates": rates}


def _ended(emu: Any, message_id: str, style: str, done: str) -> bool:
    for message in emu.bot_messages():
        if message.parent_id != message_id:
            continue
        if style == "messages" and (message.text or "").endswith(done):
            return True
        if style == "card" and message.msg_type == "interactive":
            card = message.data or {}
            if not card.get("config", {}).get("streaming_mode", True) and done in message.content:
                return True
    return False


def _delays(changes: list[Any], arrivals: dict[str, float], chunks: int) -> list[float]:
    shown = [(c.at, _answer(c.card)) for c in changes if c.card]
    out = []
    for k in range(chunks):
        text = f"c{k}"
        arrived = arrivals.get(text)
        if arrived is None:
            continue
        seen = next((at for at, answer in shown if f"{text} " in answer + " "), None)
        if seen is not None:
            out.append(max(0.0, seen - arrived))
    return out


def _rate(changes: list[Any]) -> tuple[float, int]:
    """(changes per second over the card's life, the most changes within one second)."""
    times = sorted(c.at for c in changes)
    if len(times) < 2:
        return 0.0, len(times)
    life = times[-1] - times[0]
    most = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    return (len(times) - 1) / life if life > 0 else 0.0, most


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--chunk-ms", type=int, default=10)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args(argv)
    print(
        f"turn: a tool call, {args.chunks} chunks {args.chunk_ms} ms apart, a last sentence;"
        f" {args.turns} turns per style, product timings"
    )
    for style in ("messages", "card"):
        result = await run(style, args.chunks, args.chunk_ms, args.turns)
        calls = result["calls"]
        print(f"{style:9} Feishu calls per turn: {calls} (mean {statistics.mean(calls):.1f})")
        if style == "card":
            delays = result["delays"]
            print(
                f"          chunk → card: n={len(delays)} p50 {_pct(delays, 0.5):.0f} ms,"
                f" p95 {_pct(delays, 0.95):.0f} ms, max {_pct(delays, 1.0):.0f} ms"
            )
            for per_second, most in result["rates"]:
                print(
                    f"          card changes: {per_second:.1f}/s over its life,"
                    f" at most {most} in any one second"
                )


if __name__ == "__main__":
    asyncio.run(main())
