"""`realistic SEED SECONDS [LOG] [sizes=MIN-MAX] [code=P] [stream=S]`: a coding agent's turn
as Claude Code, Codex or Gemini stream it, for the streaming benchmarks
(bench/stream_bench.py, bench/long_answer.py).

Drawn from SEED: a pace of 30–80 updates a second and text chunks of 5–40 characters. For
the first part of SECONDS the agent thinks aloud (thought chunks) with a tool call every 2–5
seconds; then it streams its answer (2,000–6,000 characters of plain text, message chunks),
so the turn lasts about SECONDS. With LOG, one JSON line is appended to that file at the
end: the seed, the answer, each answer chunk's send time (wall clock) and the characters
sent by then, and how many updates the turn sent in all.

Options (any of them shapes the answer as a coding agent writes one, in paragraphs; without
them the answer is the single plain paragraph above, the same for a seed as ever):
- `sizes=MIN-MAX`: the answer's size in characters, drawn from MIN–MAX (2000-6000);
- `code=P`: with probability P the answer is Markdown: ```python fenced code blocks (a few
  hundred lines when the size leaves room), inline code, bold words and bullet lists;
- `stream=S`: the answer's chunks are spread evenly over S seconds instead of the turn's
  pace (the thinking before it fills the rest of SECONDS).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Shape:
    """How the answer is drawn (the `key=value` options); all None: the plain paragraph."""

    sizes: tuple[int, int] | None = None
    code: float | None = None
    stream: float | None = None

    @property
    def shaped(self) -> bool:
        return self.sizes is not None or self.code is not None


def parse(rest: str) -> tuple[list[str], Shape]:
    """The positional words (SEED SECONDS LOG) and the options of a `realistic` line."""
    words, options = [], {}
    for word in rest.split():
        key, sep, value = word.partition("=")
        if sep and key in ("sizes", "code", "stream"):
            options[key] = value
        else:
            words.append(word)
    sizes = None
    if "sizes" in options:
        low, _, high = options["sizes"].partition("-")
        sizes = (int(low), int(high or low))
    code = float(options["code"]) if "code" in options else None
    stream = float(options["stream"]) if "stream" in options else None
    return words, Shape(sizes, code, stream)


def answer_text(rng: random.Random) -> str:
    size = rng.randint(2000, 6000)
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size].rstrip() + "."


def shaped_answer(rng: random.Random, shape: Shape) -> str:
    """Paragraphs of about the drawn size; Markdown with code blocks for a share of turns."""
    low, high = shape.sizes or (2000, 6000)
    size = rng.randint(low, high)
    rich = rng.random() < (shape.code or 0.0)
    blocks: list[str] = []
    length = 0
    while length < size:
        room = size - length
        if rich and len(blocks) % 2 == 1:  # prose, code, prose, code, …
            budget = room if room < 600 else int(room * rng.uniform(0.4, 0.8))
            block = python_block(rng, max(80, budget))
        elif rich and rng.random() < 0.2:
            block = bullets(rng, min(room, rng.randint(150, 500)))
        else:
            block = paragraph(rng, min(room, rng.randint(200, 900)), rich=rich)
        blocks.append(block)
        length += len(block) + 2
    return "\n\n".join(blocks)


def paragraph(rng: random.Random, size: int, *, rich: bool = False) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        if rich and rng.random() < 0.04:
            word = f"`{rng.choice(NAMES)}()`"
        elif rich and rng.random() < 0.02:
            word = f"**{word}**"
        words.append(word)
        length += len(word) + 1
    text = " ".join(words)
    return text[:1].upper() + text[1:] + "."


def bullets(rng: random.Random, size: int) -> str:
    lines: list[str] = []
    length = 0
    while length < size:
        line = "- " + paragraph(rng, rng.randint(30, 120), rich=True)
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)


NAMES = ("parse_token", "load_cache", "resolve", "run_migration", "session_rows", "_plan")
# Snippets of Python a coding agent shows, with the characters Markdown cares about (`_`,
# `*`, `#`, `[`, `<`, quotes, backslashes) where code has them.
_SNIPPETS = (
    """def {f}({a}, *args, **kwargs) -> dict[str, int]:
    \"\"\"{w}.\"\"\"
    {v} = [x for x in {a} if x > {n}]  # {w}
    if not {v} or len({v}) < {n}:
        return {{"{k}": {n}, "items": []}}
    total = 0
    for i, item in enumerate({v}):
        total += item * {n} - (i << 1)
        log.debug("%s: %d <%s>", "{k}", i, item)
    return {{'count': len({v}), "total": total}}
""",
    """class {C}:
    _{k}: list[tuple[str, int]] = []

    def __init__(self, path: str = r"C:\\tmp\\{k}") -> None:
        self.pattern = re.compile(r"^(\\w+)_[0-9]{{2,}}$")
        self.{k} = {{}}  # type: ignore[var-annotated]

    def __len__(self) -> int:
        return len(self._{k}) ** 2 // {n}
""",
    """@pytest.mark.parametrize("{k}", [{n}, -{n}, None])
def test_{f}_{k}({k}: int | None) -> None:
    # {w}
    assert {f}([{k}] * {n}) == {{"count": 0, "total": 0}}
""",
)


def python_block(rng: random.Random, size: int) -> str:
    """A ```python block of about `size` characters: many lines when there is room."""
    lines = ["```python"]
    length = len(lines[0]) + 4
    while length < size:
        snippet = rng.choice(_SNIPPETS).format(
            f=rng.choice(NAMES).lstrip("_"),
            a=rng.choice(("rows", "tokens", "paths")),
            v=rng.choice(("kept", "found", "_seen")),
            n=rng.randint(1, 99),
            k=rng.choice(WORDS).strip(";"),
            w=" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))),
            C=rng.choice(WORDS).strip(";").capitalize() + "Store",
        )
        for line in snippet.splitlines():
            lines.append(line)
            length += len(line) + 1
            if length >= size:
                break
        else:
            lines.append("")
    lines.append("```")
    return "\n".join(lines)


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

    args, shape = parse(rest)
    seed, seconds = int(args[0]), float(args[1]) if len(args) > 1 else 60.0
    log = Path(args[2]) if len(args) > 2 else None
    rng = random.Random(seed)
    pace = rng.uniform(30.0, 80.0)
    answer = shaped_answer(rng, shape) if shape.shaped else answer_text(rng)
    answer_chunks = chunks(rng, answer)
    streaming = len(answer_chunks) / pace if shape.stream is None else shape.stream
    answer_pace = len(answer_chunks) / streaming if streaming > 0 else pace
    thinking = max(0.0, seconds - streaming)
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
    if shape.stream is not None:  # the answer on a grid of its own
        start, step, pace = time.monotonic(), 0, answer_pace
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
