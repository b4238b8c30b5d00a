"""Issue 33: many turns stream at once while the emulator enforces Feishu's rate limits (a
small app limit and 3 calls a second to one chat). Paced by the app's call budget, the
bridge meets no 429 at all, and every answer arrives exact; a bridge told the limits are
ten times higher meets the 429s, so the emulator's limits are real."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.devtools.emulator import FeishuEmulator

from .stack import Stack, running_stack

CHATS = 12
APP, CHAT = 20, 3  # calls a second: for the app, to one chat
ANSWER = " ".join(f"c{i}" for i in range(60))


def _settings(style: str, believed: float) -> dict[str, object]:
    return {
        "bridge_presence_style": style,
        "bridge_card_update_interval_seconds": 0.02,
        "bridge_first_hint_seconds": 0.05,
        "bridge_feishu_app_calls_per_second": APP * believed,
    }


def _tuning(believed: float, **more: object) -> dict[str, object]:
    """Feishu's limits as this test's emulator has them (the product's are constants)."""
    return {
        "progress_interval_seconds": 0.05,
        "feishu_chat_calls_per_second": CHAT * believed,
        **more,
    }


async def _stream_everywhere(stack: Stack, pause_ms: int = 20) -> list[str]:
    """Each chat's turn streams ANSWER in 60 chunks, `pause_ms` apart."""
    emu: FeishuEmulator = stack.emu
    emu.set_rate_limits(app_per_second=APP, chat_per_second=CHAT)
    chats = [emu.open_chat("p2p", user_open_id=f"ou_user_{n}") for n in range(CHATS)]
    script = f"tool Build\nstream 60 {pause_ms}\ntool Check"
    for chat in chats:
        await emu.send_user_message(script, chat_id=chat)
    await stack.settled(within=120.0)
    return chats


def _answer_shown(stack: Stack, chat: str, style: str) -> bool:
    texts = [m.text or "" for m in stack.bot(chat) if m.msg_type == "text"]
    if style == "messages":
        return ANSWER in [t.strip() for t in texts]
    cards = [m.data for m in stack.bot(chat) if m.msg_type == "interactive"]
    return any(_element(card, "answer") == ANSWER for card in cards)


def _element(card: Any, element_id: str) -> str:
    for element in (card or {}).get("body", {}).get("elements", []):
        if element.get("element_id") == element_id:
            return str(element.get("content", ""))
    return ""


@pytest.mark.parametrize("style", ["card", "messages"])
async def test_streaming_turns_inside_the_limits_meet_no_429_and_end_exact(
    tmp_path: Path, style: str
) -> None:
    tuning = _tuning(1.0)
    async with running_stack(tmp_path, settings=_settings(style, 1.0), tuning=tuning) as stack:
        chats = await _stream_everywhere(stack)
        missing = [c for c in chats if not _answer_shown(stack, c, style)]
        assert missing == [], [stack.texts(c) for c in missing]
        assert stack.emu.limits.refused() == []
        counted = stack.emu.limits.counted
        assert len(counted) >= CHATS * 3, "too few calls to have tested the limits"


async def test_a_bridge_that_believes_higher_limits_meets_429s(tmp_path: Path) -> None:
    settings, tuning = _settings("card", 10.0), _tuning(10.0)
    async with running_stack(tmp_path, settings=settings, tuning=tuning) as stack:
        await _stream_everywhere(stack)
        assert stack.emu.limits.refused(), "the emulator refused nothing past its limits"


async def test_progress_lines_the_budget_cannot_carry_give_way_to_newer_news(
    tmp_path: Path,
) -> None:
    """Messages style, sends scarce (2 a second for the app): each chat's ten tool calls
    would queue ten progress lines in front of its answer. A line still waiting for its
    turn when something newer of its turn is queued is not posted: the chats see fewer
    progress lines, each the newest, and every answer comes last and exact, with no 429."""
    tools = 10
    settings = _settings("messages", 1.0)
    tuning = _tuning(1.0, feishu_sends_per_minute=120, feishu_budget_margin=1.0)
    async with running_stack(tmp_path, settings=settings, tuning=tuning) as stack:
        emu: FeishuEmulator = stack.emu
        emu.set_rate_limits(sends_per_minute=120, chat_per_second=CHAT)
        chats = [emu.open_chat("p2p", user_open_id=f"ou_user_{n}") for n in range(3)]
        script = "\n".join([*(f"tool Step{i}\nsleep 30" for i in range(tools)), "say"])
        for n, chat in enumerate(chats):
            await emu.send_user_message(f"{script} answer-{n}", chat_id=chat)
        await stack.settled(within=60.0)
        posted = 0
        for n, chat in enumerate(chats):
            texts = stack.texts(chat)
            assert texts[-1] == f"answer-{n}", texts
            progress = [t for t in texts if t.startswith("正在执行：")]
            posted += len(progress)
            # The lines that went are in the order the tools ran: none is old news.
            steps = [int(t.removeprefix("正在执行：Step")) for t in progress]
            assert steps == sorted(steps), texts
        # Every tool call is a progress line the core decides (at most one per 0.05 s); at 2
        # sends a second for three chats, only a few can go before their answers.
        assert posted <= 2 * len(chats), [stack.texts(c) for c in chats]
        assert emu.limits.refused() == []
        # The operator sees the budget per API, and the lines that gave way.
        async with httpx.AsyncClient(trust_env=False) as http:
            metrics = (await http.get(f"{stack.ops_url}/metrics")).text
        assert 'bridge_feishu_budget_api_rate{api="send",app="default"} 20.0' in metrics
        assert (
            'bridge_feishu_budget_sends_ready{app="default"} ' in metrics
        )  # the minute's burst left
        superseded = 'bridge_status_lines_superseded_total{app="default"} '
        given_way = next(line for line in metrics.splitlines() if line.startswith(superseded))
        assert float(given_way.removeprefix(superseded)) >= len(chats)


async def test_cards_with_no_room_for_whole_updates_change_one_element_at_a_time(
    tmp_path: Path,
) -> None:
    """Card style with 3 whole updates a second for the app (Feishu meters each API on its
    own): a card whose tools changed goes on changing through the other API, one element
    at a time (the tools list here, streamed alone), instead of waiting for a whole update;
    every card still ends with its answer, with no 429."""
    settings = {**_settings("card", 1.0), "bridge_feishu_app_calls_per_second": 3}
    steps = "\n".join(f"tool Step{i}\nsleep 100" for i in range(16))
    async with running_stack(tmp_path, settings=settings, tuning=_tuning(1.0)) as stack:
        emu: FeishuEmulator = stack.emu
        emu.set_rate_limits(app_per_second=3, chat_per_second=CHAT)
        chats = [emu.open_chat("p2p", user_open_id=f"ou_user_{n}") for n in range(6)]
        for n, chat in enumerate(chats):
            await emu.send_user_message(f"{steps}\nsay done {n}", chat_id=chat)
        await stack.settled(within=120.0)
        for n, chat in enumerate(chats):
            cards = [m.data for m in stack.bot(chat) if m.msg_type == "interactive"]
            assert [_element(card, "answer") for card in cards] == [f"done {n}"]
        # The tools element changed alone, through whichever element API had room (its
        # content streamed, the element replaced or patched, or a batch of element actions).
        alone: set[str] = set()
        for call in emu.calls("/open-apis/cardkit/v1/cards/"):
            if call.status != 200:
                continue
            if "/elements/" in call.path:
                alone.add(call.path.split("/elements/", 1)[1].split("/")[0])
            elif call.path.endswith("/batch_update"):
                actions = json.loads(call.body["actions"])
                alone.update(a["params"]["element_id"] for a in actions)
        assert "tools" in alone, alone
        assert emu.limits.refused() == []


async def test_many_live_cards_with_a_tiny_interval_meet_no_429(tmp_path: Path) -> None:
    """12 cards streaming with a 0.02-s card interval and 20 calls a second to each API
    (16 after the margin): the live cards together ask for at most 4 APIs' worth, and
    every answer arrives exact, with no 429 and every card changing more than twice. How
    far apart a card's changes are is the simulator's rule (tests/sim/invariants.py
    `cards_keep_their_spacing`, which counts the cards live at each change): arrival
    times at a loaded machine's emulator are no measure of it."""
    settings, tuning = _settings("card", 1.0), _tuning(1.0)
    async with running_stack(tmp_path, settings=settings, tuning=tuning) as stack:
        emu: FeishuEmulator = stack.emu
        chats = await _stream_everywhere(stack, pause_ms=80)
        assert [c for c in chats if not _answer_shown(stack, c, "card")] == []
        changes: Counter[str] = Counter(
            call.path.split("/")[5]
            for call in emu.calls("/open-apis/cardkit/v1/cards/", method="PUT")
            if call.status == 200
        )
        assert len(changes) == CHATS, changes
        assert min(changes.values()) > 2, changes
        assert emu.limits.refused() == []
