"""A card left unanswered reaches whoever may answer it, over the real stack (emulator +
bridge in webhook mode + scripted ACP agent): Feishu's in-app urgent notification (加急,
`PATCH /open-apis/im/v1/messages/:message_id/urgent_app`, which the emulator serves as
strictly as Feishu documents it) once, to exactly the requester and the approvers, never
after the card was answered or expired; without the scope im:message.urgent, a start-up
warning and one @-mention line instead. In a group the pause line names whose turn it is."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from bridge.devtools.emulator.records import ApiCall
from bridge.feishu.urgent import PROBE_MESSAGE
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack
from tests.integration.test_waiting_for_user import (
    ALLOW_ONCE,
    APPROVAL_CARD,
    APPROVAL_PROMPT,
    PAUSE_APPROVAL,
    button,
    like,
    only_card,
)

T = Translator("zh_CN")
APPROVER = "ou_approver_in_the_chat"  # sorted before ELSEWHERE, as the bridge lists them
ELSEWHERE = "ou_approver_not_in_the_chat"
MESSAGES = "/open-apis/im/v1/messages/"
URGENT = {
    "bridge_urgent": True,
    "bridge_approval_timeout_seconds": 0.6,  # the reminder, and the urge, at 0.3 s
    "bridge_approvers": f"{APPROVER},{ELSEWHERE}",
}


def tags(*open_ids: str) -> str:
    return "".join(f'<at user_id="{i}"></at> ' for i in open_ids)


def urgent_calls(stack: Stack) -> list[ApiCall]:
    """The bridge's urgent_app calls on its cards (the start-up probe left out)."""
    return [
        c
        for c in stack.emu.calls(path_prefix=MESSAGES, method="PATCH")
        if c.path.endswith("/urgent_app") and PROBE_MESSAGE not in c.path
    ]


async def probed(stack: Stack) -> ApiCall:
    """The start-up probe: an urge on a message no chat holds."""
    probe = f"{MESSAGES}{PROBE_MESSAGE}/urgent_app"
    calls = await stack.emu.wait_for(lambda: stack.emu.calls(path_prefix=probe))
    return calls[0]


async def ask_in_group(stack: Stack) -> str:
    group = stack.emu.group_chat_id
    stack.emu.add_chat_members(group, [APPROVER])  # ELSEWHERE is not in the group
    await stack.say(APPROVAL_PROMPT, chat_type="group", mention_bot=True)
    await stack.wait_text(lambda t: t.endswith(PAUSE_APPROVAL), chat_id=group)
    return group


async def test_an_approval_left_alone_is_urged_once_to_exactly_who_may_answer(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path / "b", settings=URGENT) as stack:
        assert (await probed(stack)).code == 230001  # granted: the message is not found
        group = await ask_in_group(stack)
        requester = stack.emu.default_user_open_id
        [card] = [m for m in stack.emu.bot_messages(group) if m.msg_type == "interactive"]
        await stack.wait_text(like("presence.approval_timed_out"), chat_id=group)
        await stack.settled()

        # One urgent notification on the card, naming exactly the requester and approvers.
        calls = urgent_calls(stack)
        assert [(c.path, dict(c.query), c.body) for c in calls] == [
            (
                f"{MESSAGES}{card.message_id}/urgent_app",
                {"user_id_type": "open_id"},
                {"user_id_list": [requester, APPROVER, ELSEWHERE]},
            )
        ]
        assert calls[0].ok
        assert calls[0].response["data"] == {"invalid_user_id_list": [ELSEWHERE]}
        [urged] = stack.emu.urgents()
        assert (urged.message_id, urged.user_ids) == (card.message_id, (requester, APPROVER))
        # The group's pause line names whose turn it is; the reminder mentions no one (the
        # urge is the notification), and nothing follows the end.
        texts = stack.texts(group)
        assert texts[:2] == [APPROVAL_CARD, tags(requester, APPROVER, ELSEWHERE) + PAUSE_APPROVAL]
        assert like("presence.approval_reminder")(texts[2]), texts
        assert like("presence.approval_timed_out")(texts[3]), texts
        assert len(texts) == 4, texts


async def test_an_approval_answered_before_the_urge_is_never_urged(tmp_path: Path) -> None:
    settings = {**URGENT, "bridge_approval_timeout_seconds": 30.0, "bridge_urgent_seconds": 0.3}
    async with running_stack(tmp_path / "b", settings=settings) as stack:
        await probed(stack)
        await stack.say(APPROVAL_PROMPT)
        await stack.wait_text(lambda t: t == PAUSE_APPROVAL)
        card = only_card(stack)
        clicked = await stack.emu.click_card(card.message_id, button(card, ALLOW_ONCE))
        assert clicked.ok, clicked.error
        await stack.wait_text(lambda t: t == "done")
        await stack.settled()
        assert stack.texts() == [APPROVAL_CARD, PAUSE_APPROVAL, "done"]
        assert urgent_calls(stack) == []
        assert stack.emu.urgents() == []


async def test_an_approval_urged_once_stays_urged_once_when_set_earlier(tmp_path: Path) -> None:
    settings = {**URGENT, "bridge_approval_timeout_seconds": 1.0, "bridge_urgent_seconds": 0.1}
    async with running_stack(tmp_path / "b", settings=settings) as stack:
        await stack.say(APPROVAL_PROMPT)
        await stack.wait_text(like("presence.approval_timed_out"))
        await stack.settled()
        [call] = urgent_calls(stack)
        assert call.body == {"user_id_list": [stack.emu.default_user_open_id, APPROVER, ELSEWHERE]}
        # In a private chat only its user is a member: the approvers come back invalid.
        assert call.response["data"] == {"invalid_user_id_list": [APPROVER, ELSEWHERE]}
        # Private chat: the pause line is as it always was.
        assert stack.texts()[:2] == [APPROVAL_CARD, PAUSE_APPROVAL]


async def test_without_the_scope_a_warning_at_start_and_one_mention_line_instead(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bridge.engine.urgency")
    async with running_stack(
        tmp_path / "b", settings=URGENT, emulator_options={"urgent_scope": False}
    ) as stack:
        probe = await probed(stack)
        assert probe.code == 99991672
        await stack.emu.wait_for(
            lambda: stack.demo.service.engine.urgent_mode.state()["by"] == "mention"
        )
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("im:message.urgent" in w for w in warnings), warnings
        group = await ask_in_group(stack)
        requester = stack.emu.default_user_open_id
        await stack.wait_text(like("presence.approval_timed_out"), chat_id=group)
        await stack.settled()

        # No urgent call on the card (the probe said no); exactly one line mentions them: the
        # reminder itself (the pause line names them in the group, as always).
        assert urgent_calls(stack) == []
        assert stack.emu.urgents() == []
        texts = stack.texts(group)
        everyone = tags(requester, APPROVER, ELSEWHERE)
        assert texts[1] == everyone + PAUSE_APPROVAL
        assert texts[2].startswith(everyone), texts
        assert like("presence.approval_reminder")(texts[2][len(everyone) :]), texts
        assert like("presence.approval_timed_out")(texts[3]), texts
        assert len(texts) == 4, texts
        async with httpx.AsyncClient(trust_env=False) as http:
            status = (await http.get(f"{stack.ops_url}/status")).json()
        assert status["urgent"] == {"enabled": True, "scope_missing": True, "by": "mention"}


async def test_a_refusal_at_run_time_becomes_one_mention_line(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "b", settings=URGENT) as stack:
        await probed(stack)  # granted at start-up…
        stack.emu.urgent.scope_granted = False  # …then revoked
        await stack.say(APPROVAL_PROMPT)
        await stack.wait_text(like("presence.approval_timed_out"))
        await stack.settled()
        [refused] = urgent_calls(stack)
        assert refused.code == 99991672
        assert stack.emu.urgents() == []
        texts = stack.texts()
        everyone = tags(stack.emu.default_user_open_id, APPROVER, ELSEWHERE)
        mentioning = [t for t in texts if "<at " in t]
        assert len(mentioning) == 1, texts
        # The reminder went out with the urge; the line after the refusal mentions them.
        assert like("presence.approval_reminder")(texts[2]), texts
        assert texts[3].startswith(everyone), texts
        assert like("presence.approval_reminder")(texts[3][len(everyone) :]), texts
        assert like("presence.approval_timed_out")(texts[4]), texts
        assert len(texts) == 5, texts
