"""Agent output is untrusted data, end to end: what reaches Feishu mentions nobody, cards
show the agent's words as plain text or code, a long command is never a hidden tail, and a
card Feishu refuses falls back to a plain card — or ends the round, never a silent wait."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bridge.core.presence import CARD_DETAIL_LIMIT
from bridge.devtools.emulator.records import ApiCall
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack

T = Translator("zh_CN")
LIVE_AT = re.compile(r"<\s*/?\s*at\b", re.IGNORECASE)
REPLY = "/open-apis/im/v1/messages/*/reply"


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(tmp_path) as running:
        yield running


def posted(stack: Stack, msg_type: str) -> list[ApiCall]:
    return [
        c
        for c in stack.emu.calls("/open-apis/im/v1/messages/", method="POST")
        if c.path.endswith("/reply") and (c.body or {}).get("msg_type") == msg_type
    ]


def content(call: ApiCall) -> str:
    return str((call.body or {}).get("content", ""))


async def test_agent_text_mentioning_everyone_reaches_feishu_as_dead_text(stack: Stack) -> None:
    await stack.say('say <at user_id="all">所有人</at> please look')
    await stack.wait_text(lambda t: "please look" in t)
    texts = [json.loads(content(c))["text"] for c in posted(stack, "text")]
    assert any("please look" in t for t in texts)
    assert not any(LIVE_AT.search(t) for t in texts)


async def test_a_hostile_permission_title_is_plain_words_on_the_card(stack: Stack) -> None:
    title = "<at id=all></at> [Allow](http://evil.example) ```"
    await stack.say(f"permission {title}")
    await stack.wait_text(lambda t: t == T("presence.waiting_approval"))
    (card_call,) = posted(stack, "interactive")
    card = json.loads(content(card_call))
    assert not LIVE_AT.search(json.dumps(card, ensure_ascii=False))
    markdown = [
        e["text"]["content"]
        for e in card["elements"]
        if isinstance(e.get("text"), dict) and e["text"].get("tag") == "lark_md"
    ]
    assert all("evil.example" not in m or m.startswith("```") for m in markdown)
    await stack.say("/stop")
    await stack.wait_text(lambda t: t == T("presence.stopped"))


async def test_a_command_too_long_for_the_card_follows_whole_in_the_chat(stack: Stack) -> None:
    command = "echo " + "z" * (CARD_DETAIL_LIMIT + 300)
    await stack.say(f"permission {command}")
    await stack.wait_text(lambda t: t == T("presence.waiting_approval"))
    card = json.loads(content(posted(stack, "interactive")[0]))
    note = T("card.approval.truncated", shown=CARD_DETAIL_LIMIT, length=len(command))
    assert note in json.dumps(card, ensure_ascii=False)
    full = T("card.approval.full_command", length=len(command), command=command)
    # The whole command is in the chat (split over messages if Feishu needs it), in order,
    # before the pause line.
    assert "".join(stack.texts()[1:-1]) == full
    await stack.say("/stop")
    await stack.wait_text(lambda t: t == T("presence.stopped"))


async def test_a_refused_card_falls_back_to_a_plain_card_that_still_works(stack: Stack) -> None:
    stack.emu.fail_next("POST", REPLY, "business_error", code=230025, msg="card too large")
    await stack.say("permission Delete build/")
    await stack.wait_text(lambda t: t == T("presence.waiting_approval"))
    card_calls = posted(stack, "interactive")
    assert len(card_calls) == 2  # refused, then the plain fallback
    plain = json.loads(content(card_calls[1]))
    allow = next(
        a
        for e in plain["elements"]
        for a in e.get("actions", [])
        if a["text"]["content"] == T("card.approval.option.allow_once")
    )
    card_message = next(m for m in stack.bot() if m.msg_type == "interactive")
    result = await stack.emu.click_card(card_message.message_id, allow["value"])
    assert result.toast is not None
    assert result.toast.content == T("card.click.recorded")
    await stack.wait_text(lambda t: t == "done")  # the agent ran it and said so


async def test_a_card_feishu_refuses_twice_ends_the_round_and_says_so(stack: Stack) -> None:
    stack.emu.fail_next("POST", REPLY, "business_error", 2, code=230025, msg="card too large")
    await stack.say("permission Delete build/")
    await stack.wait_text(lambda t: t == T("presence.card_failed"))
    await stack.settled()
    # No card reached the chat; the round ended at once with its one end line. The pause
    # line decided together with the card waited behind it, and a "your turn" whose turn
    # is over is never posted.
    assert [m.msg_type for m in stack.bot()] == ["text"]
    assert stack.texts() == [T("presence.card_failed")]
    # The agent was answered `cancelled`, so it never ran the command.
    assert "done" not in stack.texts()
    await stack.say("echo next")
    await stack.wait_text(lambda t: t == "echo: next")


async def test_an_agent_line_over_the_size_cap_is_dropped_not_held(stack: Stack) -> None:
    # 9,000 KB in one stdout line, over the 8 MiB cap: the update is skipped as it streams
    # by; the turn still ends in words, and the same agent answers the next message.
    await stack.say("huge 9000")
    await stack.settled()
    assert stack.texts() == [T("presence.ended_empty")]
    await stack.say("say still here")
    await stack.wait_text(lambda t: t == "still here")
    async with httpx.AsyncClient(trust_env=False) as http:
        metrics = (await http.get(f"{stack.ops_url}/metrics")).text
    assert 'bridge_agent_updates_dropped_total{app="default",reason="oversize"} 1.0' in metrics


async def test_agent_text_with_a_lone_surrogate_reaches_feishu_repaired(stack: Stack) -> None:
    # Issue 35: the agent's `"\\ud800"` escape is repaired where its stdout is read; it
    # would otherwise fail to encode in the journal's trace or the Feishu call.
    await stack.say("unpaired half")
    await stack.wait_text(lambda t: t.startswith("half "))
    texts = [json.loads(content(c))["text"] for c in posted(stack, "text")]
    assert "half \ufffd end" in texts
