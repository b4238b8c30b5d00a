"""The agent's Markdown reaches the chat as rich content over the real stack: a card with
card markdown (exact body checked at the emulator), plain text stays a text message, and a
long answer arrives as several cards, in order, each with its own idempotency key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.stack import Stack, running_stack

REPLY = "/open-apis/im/v1/messages/"


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(tmp_path / "bridge") as running:
        yield running


async def test_a_markdown_answer_is_one_card_with_card_markdown(stack: Stack) -> None:
    await stack.say(
        r"md ## 结果\n\n- 改了 `a.py`\n- 见 [文档](https://x.example/d)\n\n```py\nprint(1)\n```"
    )
    await stack.settled()
    (answer,) = [m for m in stack.bot() if m.msg_type == "interactive"]
    assert answer.data == {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {
            "elements": [
                {
                    "tag": "markdown",
                    "content": "### 结果\n\n- 改了 `a.py`\n"
                    "- 见 文档 ([https://x.example/d](https://x.example/d))\n\n"
                    "```py\nprint(1)\n```",
                }
            ]
        },
    }
    assert [m.msg_type for m in stack.bot()] == ["interactive"]  # the answer is the end


async def test_plain_text_stays_a_text_message(stack: Stack) -> None:
    await stack.say("say 好的，已经改完了。")
    await stack.settled()
    assert [(m.msg_type, m.text) for m in stack.bot()] == [("text", "好的，已经改完了。")]


async def test_a_long_answer_is_several_cards_in_order_with_their_own_keys(
    stack: Stack,
) -> None:
    rows = r"\n".join(f"| {i} | {'y' * 60} |" for i in range(900))  # 65 KB: three cards
    await stack.say(rf"md # Report\n\n| n | text |\n|---|---|\n{rows}\n\nDone **ok**.")
    await stack.settled()
    cards = [m for m in stack.bot() if m.msg_type == "interactive"]
    assert len(cards) == 3
    contents = [c.data["body"]["elements"][0]["content"] for c in cards]
    assert contents[0].startswith("## Report\n\n| n | text |\n| --- | --- |\n| 0 |")
    assert all(c.startswith("| n | text |\n| --- | --- |") for c in contents[1:2])
    assert contents[-1].endswith("Done **ok**.")
    numbers = [
        int(line.split("|")[1])
        for c in contents
        for line in c.splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().isdigit()
    ]
    assert numbers == list(range(900))  # every row once, in order
    uuids = [
        c.body["uuid"]
        for c in stack.emu.calls(REPLY, "POST")
        if c.path.endswith("/reply")
        and isinstance(c.body, dict)
        and c.body.get("msg_type") == "interactive"
    ]
    assert len(set(uuids)) == 3
