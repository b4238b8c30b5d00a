"""The scripted agent's `realistic` turn (bridge/devtools/scripted_agent/realistic.py): the
options the streaming benchmarks draw answers with, and the turn a seed gave before them."""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path
from typing import Any

from bridge.devtools.scripted_agent.realistic import (
    Shape,
    answer_text,
    parse,
    play,
    shaped_answer,
)


async def _play(rest: str) -> list[dict[str, Any]]:
    updates: list[dict[str, Any]] = []

    async def update(u: dict[str, Any]) -> None:
        updates.append(u)

    async def tool(title: str) -> None:
        updates.append({"tool": title})

    await play(rest, update, tool, asyncio.Event())
    return updates


def _answer(updates: list[dict[str, Any]]) -> str:
    chunks = [u for u in updates if u.get("sessionUpdate") == "agent_message_chunk"]
    return "".join(u["content"]["text"] for u in chunks)


def test_options_are_read_beside_the_positional_words() -> None:
    words, shape = parse("7 20 /tmp/turns.jsonl sizes=500-20000 code=0.3 stream=20")
    assert words == ["7", "20", "/tmp/turns.jsonl"]
    assert shape == Shape((500, 20000), 0.3, 20.0)
    assert parse("7 20") == (["7", "20"], Shape())
    assert not Shape().shaped


def test_without_options_a_seed_draws_the_plain_paragraph_it_always_did() -> None:
    rng = random.Random(3)
    rng.uniform(30.0, 80.0)  # the pace is drawn first
    answer = answer_text(rng)
    assert len(answer) == 4230
    assert "\n" not in answer
    assert answer.startswith("cache the one lines per keeps token one the lines second the")


def test_sizes_are_drawn_from_the_range_and_code_is_fenced_python() -> None:
    for seed in range(20):
        text = shaped_answer(random.Random(seed), Shape((500, 20000), 1.0))
        assert 500 <= len(text) <= 21000
        fences = re.findall(r"^```.*$", text, re.MULTILINE)
        assert fences
        assert fences[::2] == ["```python"] * (len(fences) // 2)
        assert len(fences) % 2 == 0
        assert set(fences[1::2]) == {"```"}
    longest = shaped_answer(random.Random(4), Shape((20000, 20000), 1.0))
    block = longest.split("```python\n")[1].split("\n```")[0]
    assert block.count("\n") > 200  # hundreds of lines when the size leaves room
    assert "```" not in shaped_answer(random.Random(1), Shape((2000, 2000), 0.0))


async def test_stream_spreads_the_answer_over_its_seconds(tmp_path: Path) -> None:
    updates = await _play(f"5 0.5 {tmp_path / 'log'} sizes=3000-3000 code=1 stream=0.5")
    record = json.loads((tmp_path / "log").read_text())
    assert record["answer"] == _answer(updates)
    assert record["seed"] == 5
    assert record["updates"] == len(updates) + 2 * sum("tool" in u for u in updates)
    sent = record["sent"]
    assert sent[-1][1] == len(record["answer"])
    assert 0.3 <= sent[-1][0] - sent[0][0] <= 1.5
