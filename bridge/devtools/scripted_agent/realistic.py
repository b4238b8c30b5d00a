"""`realistic SEED SECONDS [LOG]`: a coding agent's turn as Claude Code, Codex or Gemini
stream it, for the streaming benchmark (bench/stream_bench.py).

Drawn from SEED: a pace of 30–80 updates a second and text chunks of 5–40 characters. For
the first part of SECONDS the agent thinks aloud (thought chunks) with a tool call every 2–5
seconds; then it streams its answer (2,000–6,000 characters of plain text, message chunks),
so the turn lasts about SECONDS. With LOG, one JSON line is appended to that file at the
end: the seed, the answer, each answer chunk's send time (wall clock) and the characters
sent by then, and how many updates the turn sent in all.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bridge.devtools.scripted_agent.wire import text_block

_PROSE = (
    "the parser reads each token and checks the cache before it calls the resolver so a"
    " second pass finds nothing new; tests cover the edge cases of empty input long lines"
    " and unicode names while the store keeps one row per session and a migration adds"
    " the index the query planner wanted"
)
WORDS = tuple(_PROSE.split())


def answer_text(rng: random.Random) -> str:
    size = rng.randint(2000, 6000)
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size].rstrip() + "."


def chunks(rng: random.Random, text: str) -> list[str]:
    out, at = [], 0
    while at < len(text):
        size = rng.randint(5, 40)
        out.append(text[at : at + size])
        at += size
    return out


async def play(
    rest: str,
    update: Callable[[dict[str, Any]], Awaitable[None]],
    tool: Callable[[str], Awaitable[None]],
    cancelled: asyncio.Event,
) -> None:
    async def thought(text: str) -> None:
        await update({"sessionUpdate": "agent_thought_chunk", "content": text_block(text)})

    async def say(text: str) -> None:
        await update({"sessionUpdate": "agent_message_chunk", "content": text_block(text)})

    args = rest.split()
    seed, seconds = int(args[0]), float(args[1]) if len(args) > 1 else 60.0
    log = Path(args[2]) if len(args) > 2 else None
    rng = random.Random(seed)
    pace = rng.uniform(30.0, 80.0)
    answer = answer_text(rng)
    answer_chunks = chunks(rng, answer)
    thinking = max(0.0, seconds - len(answer_chunks) / pace)
    start = time.monotonic()
    updates, step = 0, 0
    next_tool = rng.uniform(2.0, 5.0)

    async def tick() -> None:  # the next update's time on the turn's own grid: no drift
        nonlocal step
        step += 1
        delay = start + step / pace - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    while time.monotonic() - start < thinking and not cancelled.is_set():
        if time.monotonic() - start >= next_tool:
            await tool(f"Run step {step}")
            updates += 3  # pending, in progress, completed
            next_tool += rng.uniform(2.0, 5.0)
        else:
            await thought(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))[:40])
            updates += 1
        await tick()
    sent: list[tuple[float, int]] = []
    chars = 0
    for chunk in answer_chunks:
        if cancelled.is_set():
            return
        await say(chunk)
        chars += len(chunk)
        sent.append((time.time(), chars))
        updates += 1
        await tick()
    if log is not None:
        record = {"seed": seed, "answer": answer, "sent": sent, "updates": updates}
        with log.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
