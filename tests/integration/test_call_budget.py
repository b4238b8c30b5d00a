"""Issue 33: many turns stream at once while the emulator enforces Feishu's rate limits (a
small app limit and 3 calls a second to one chat). Paced by the app's call budget, the
bridge meets no 429 at all, and every answer arrives exact; a bridge told the limits are
ten times higher meets the 429s, so the emulator's limits are real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
        "bridge_progress_interval_seconds": 0.05,
        "bridge_feishu_app_calls_per_second": APP * believed,
        "bridge_feishu_chat_calls_per_second": CHAT * believed,
        "bridge_feishu_budget_margin": 0.8,
    }


async def _stream_everywhere(stack: Stack) -> list[str]:
    emu: FeishuEmulator = stack.emu
    emu.set_rate_limits(app_per_second=APP, chat_per_second=CHAT)
    chats = [emu.open_chat("p2p", user_open_id=f"ou_user_{n}") for n in range(CHATS)]
    for chat in chats:
        await emu.send_user_message("tool Build\nstream 60 5\ntool Check", chat_id=chat)
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
    async with running_stack(tmp_path, settings=_settings(style, 1.0)) as stack:
        chats = await _stream_everywhere(stack)
        missing = [c for c in chats if not _answer_shown(stack, c, style)]
        assert missing == [], [stack.texts(c) for c in missing]
        assert stack.emu.limits.refused() == []
        counted = stack.emu.limits.counted
        assert len(counted) >= CHATS * 4, "too few calls to have tested the limits"


async def test_a_bridge_that_believes_higher_limits_meets_429s(tmp_path: Path) -> None:
    async with running_stack(tmp_path, settings=_settings("card", 10.0)) as stack:
        await _stream_everywhere(stack)
        assert stack.emu.limits.refused(), "the emulator refused nothing past its limits"
