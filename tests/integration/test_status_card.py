"""Card style over the real stack: the live status card through CardKit (emulated as Feishu
checks it), its last state after every end path, strictly growing sequences, bounded
updates under a burst, and the fallback chain down to lines."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.devtools.emulator.records import ChatMessage
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack
from tests.integration.test_faults_and_restart import _crash_and_restart

T = Translator("zh_CN")
CARD_STYLE: dict[str, object] = {
    "bridge_presence_style": "card",
    "bridge_card_update_interval_seconds": 0.02,
    "bridge_first_hint_seconds": 0.05,
    "bridge_heartbeat_seconds": 30.0,
}
WORKING = T("presence.running_hint")  # "正在处理…"
CARDS = "/open-apis/cardkit/v1/cards"


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(tmp_path, settings=CARD_STYLE) as running:
        await running.demo.service.runtime.start()  # timers do not race the agent's start
        yield running


def status_cards(stack: Stack) -> list[ChatMessage]:
    return [m for m in stack.bot() if m.msg_type == "interactive" and _is_status(m.data)]


def _is_status(card: Any) -> bool:
    elements = (card or {}).get("body", {}).get("elements", [])
    return any(e.get("element_id") == "answer" for e in elements)


def element(card: dict[str, Any], element_id: str) -> str:
    found = [e for e in card["body"]["elements"] if e.get("element_id") == element_id]
    return str(found[0]["content"]) if found else ""


def title(card: dict[str, Any]) -> str:
    return str(card["header"]["title"]["content"])


def plain_texts(stack: Stack) -> list[str]:
    return [m.text or "" for m in stack.bot() if m.msg_type == "text"]


def sequences(stack: Stack) -> list[int]:
    return [c.sequence for c in stack.emu.cardkit.changes if c.sequence is not None]


def final_card(stack: Stack) -> dict[str, Any]:
    (card,) = status_cards(stack)
    data: dict[str, Any] = card.data
    assert data["config"]["streaming_mode"] is False, "streaming was not switched off"
    assert WORKING not in json.dumps(data, ensure_ascii=False), "an ended card says working"
    return data


async def test_a_long_turn_is_one_card_that_ends_with_the_answer(stack: Stack) -> None:
    # The stream outlasts the stdout batch window (issue 33): the typewriter shows text early
    await stack.say("tool Read README.md\nplan Look | Write\nstream 5 100\nsay done here")
    await stack.settled()
    card = final_card(stack)
    assert title(card) == T("card.status.ended")
    assert element(card, "answer") == "c0 c1 c2 c3 c4 done here"
    assert "Read README.md" in element(card, "tools")
    assert "Look" in element(card, "plan")
    assert plain_texts(stack) == []  # no "正在处理…", no progress line, no separate answer
    kinds = [(c.method, c.path.removeprefix(CARDS)) for c in stack.emu.calls(CARDS)]
    assert kinds[0] == ("POST", "")
    # The last change is the whole final view, streaming off with it: no settings call.
    assert kinds[-1][0] == "PUT"
    assert not any(path.endswith("/settings") for _, path in kinds)
    assert any(path.endswith("/elements/answer/content") for _, path in kinds)
    seq = sequences(stack)
    assert seq == sorted(set(seq)), "sequences must strictly increase"


async def test_a_fast_answer_gets_no_card(stack: Stack) -> None:
    await stack.say("say quick one")
    await stack.settled()
    assert stack.texts() == ["quick one"]
    assert stack.emu.calls(CARDS) == []


@pytest.mark.parametrize(
    ("script", "stop", "line"),
    [
        ("tool Build\nhang", True, T("presence.stopped")),
        ("tool Build\nstop max_tokens", False, T("presence.max_tokens")),
        ("tool Build\nerror boom", False, T("presence.unrecoverable")),
        ("tool Build\nsilent", False, T("presence.ended_empty")),
    ],
    ids=["stop", "max-tokens", "agent-error", "empty"],
)
async def test_every_end_finalizes_the_card_and_says_it_as_a_message(
    stack: Stack, script: str, stop: bool, line: str
) -> None:
    await stack.say(script)
    await stack.emu.wait_for(lambda: status_cards(stack))
    if stop:
        await stack.say("/stop")
    await stack.settled()
    card = final_card(stack)
    assert line in element(card, "status")
    assert plain_texts(stack)[-1] == line


async def test_a_crash_ends_the_card_with_the_resend_line(stack: Stack) -> None:
    await stack.say("tool Build\ncrash")
    await stack.settled()
    card = final_card(stack)
    assert "请重发" in element(card, "status")


async def test_waiting_for_approval_pauses_the_card_and_expiry_ends_it(tmp_path: Path) -> None:
    settings = {**CARD_STYLE, "bridge_approval_timeout_seconds": 0.3}
    async with running_stack(tmp_path, settings=settings) as stack:
        await stack.say("tool Prepare\npermission rm -rf build")
        waiting = T("presence.waiting_approval")
        await stack.wait_text(lambda t: t == waiting)
        await stack.emu.wait_for(
            lambda: status_cards(stack) and title(status_cards(stack)[0].data) == waiting
        )
        paused = element(status_cards(stack)[0].data, "status")
        assert paused.startswith("已用时 ")
        assert paused.endswith("，暂停计时中")
        await stack.settled()
        card = final_card(stack)
        assert element(card, "status").startswith("审批已超时（等了 ")
        assert "本轮已取消" in element(card, "status")
        assert plain_texts(stack)[0] == waiting


async def test_a_long_answer_continues_on_cards_below_and_is_shown_once(stack: Stack) -> None:
    words = "word " * 5000  # 25,000 characters: three cards' worth (10,000 each at most)
    await stack.say(f"tool Write\nsay {words.strip()}")
    await stack.settled()
    shown = status_cards(stack)
    assert len(shown) == 3
    assert [title(c.data) for c in shown[1:]] == [
        T("card.status.continued", page=2),
        T("card.status.continued", page=3),
    ]
    assert all(c.data["config"]["streaming_mode"] is False for c in shown)
    assert "".join(element(c.data, "answer") for c in shown) == words.strip()
    assert all(len(json.dumps(c.data, ensure_ascii=False).encode()) < 30 * 1024 for c in shown)
    assert plain_texts(stack) == []  # the answer once: nothing follows as messages


async def test_a_burst_of_500_chunks_makes_a_bounded_number_of_updates(stack: Stack) -> None:
    await stack.say("tool Generate\nstream 500")
    await stack.settled()
    card = final_card(stack)
    assert element(card, "answer") == " ".join(f"c{i}" for i in range(500))
    changes = len(stack.emu.cardkit.changes)
    assert changes < 60, f"{changes} card changes for 500 chunks"
    seq = sequences(stack)
    assert seq == sorted(set(seq))


async def test_cardkit_refused_falls_back_to_a_patched_card(stack: Stack) -> None:
    stack.emu.fail_next("POST", CARDS, "business_error", code=99991672, msg="no cardkit scope")
    await stack.say("tool Build\nsay built")
    await stack.settled()
    (card,) = [m for m in stack.bot() if m.msg_type == "interactive"]
    assert card.updated  # patched in place
    assert element(card.data, "answer") == "built"
    assert title(card.data) == T("card.status.ended")
    assert plain_texts(stack) == []
    async with httpx.AsyncClient(trust_env=False) as http:
        metrics = (await http.get(f"{stack.ops_url}/metrics")).text
    assert 'bridge_status_card_calls_total{app="default",call="fallback_patch"} 1.0' in metrics


async def test_every_card_refused_falls_back_to_lines_losing_nothing(stack: Stack) -> None:
    stack.emu.fail_next("POST", CARDS, "business_error", code=99991672, msg="no cardkit scope")
    reply = "/open-apis/im/v1/messages/*/reply"
    stack.emu.fail_next("POST", reply, "business_error", code=230099, msg="card refused")
    await stack.say("think\nsleep 200\nsay still answered")
    await stack.settled()
    assert [m for m in stack.bot() if m.msg_type == "interactive"] == []
    assert plain_texts(stack) == [WORKING, "still answered"]


async def test_a_restart_finalizes_the_card_of_the_turn_that_died(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge", settings=CARD_STYLE) as stack:
        await stack.demo.service.runtime.start()
        await stack.say("tool Build\nhang")
        await stack.emu.wait_for(lambda: status_cards(stack))
        await _crash_and_restart(stack)
        await stack.settled()
        card = final_card(stack)
        assert T("presence.unrecoverable") in element(card, "status")


async def test_a_closed_stream_is_carried_on_by_whole_updates(stack: Stack) -> None:
    # Feishu closes a card's streaming mode by itself after ten minutes (300309 / 200850).
    content = f"{CARDS}/*/elements/answer/content"
    stack.emu.fail_next("PUT", content, "business_error", times=50, code=300309, msg="closed")
    # Three seconds of streaming: the card is up well before the end even on a slow
    # machine (a stream done before its card was posted leaves only the final update).
    await stack.say("tool Build\nstream 60 50\nsay finished")
    await stack.settled()
    card = final_card(stack)
    assert element(card, "answer").endswith("c59 finished")
    kinds = [c.kind for c in stack.emu.cardkit.changes]
    assert "content" not in kinds
    assert kinds.count("update") >= 2


async def test_the_usage_footer_is_the_cards_last_line(tmp_path: Path) -> None:
    settings = {**CARD_STYLE, "bridge_usage_footer": True}
    async with running_stack(tmp_path, settings=settings) as stack:
        await stack.say("tool Read README.md\nsay done here")
        await stack.settled()
        card = final_card(stack)
        assert element(card, "answer") == "done here"
        used = len("tool Read README.md\nsay done here") + len("done here")
        footer = f"上下文 {used} / 200k（0%）· 累计费用 0.01 USD"
        assert element(card, "usage") == footer
        assert card["body"]["elements"][-1]["element_id"] == "usage"
        assert plain_texts(stack) == []


async def test_a_markdown_answer_is_laid_out_in_the_card(stack: Stack) -> None:
    await stack.say("tool Build\n" + r"md ## Done\n\n- built `app`\n\n```sh\nmake\n```")
    await stack.settled()
    card = final_card(stack)
    assert element(card, "answer") == "### Done\n\n- built `app`\n\n```sh\nmake\n```"
