"""The demo's two bots (`feishu-bridge demo`): Claude and Codex, two Feishu apps of the
emulator in one bridge, each on its own webhook path with its own agent (the scripted agent
under the bot's name). In the group both are members: a message that @-mentions both is
answered by each in its own session, one that mentions one by that one alone; each has its
own private chat. The operator API tells them apart: /status `apps`, conversations keyed
and labelled by app, a turn of each, /sessions of each, /metrics by app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from bridge.devtools.emulator.records import ChatMessage
from tests.integration.stack import Stack, running_stack

CLAUDE, CODEX = "cli_demo_claude", "cli_demo_codex"


def _texts(messages: list[ChatMessage]) -> list[str]:
    return [m.text or "" for m in messages]


async def _get(stack: Stack, path: str) -> Any:
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        response = await http.get(f"{stack.ops_url}{path}")
    response.raise_for_status()
    return response.text if path == "/metrics" else response.json()


async def test_two_bots_in_one_group_each_answer_what_is_addressed_to_them(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, bots=2) as stack:
        emu = stack.emu
        assert emu.app_ids == (CLAUDE, CODEX)
        assert [emu.app(a).bot_name for a in emu.app_ids] == ["Claude", "Codex"]
        group = emu.group_chat_id
        assert emu.chat_bots(group) == (CLAUDE, CODEX)

        both = await emu.send_user_message(
            "whoami", chat_id=group, chat_type="group", mention_apps=[CLAUDE, CODEX]
        )

        def answered(app: str, count: int) -> bool:
            return len(emu.bot_messages(group, app_id=app)) >= count

        await emu.wait_for(lambda: answered(CLAUDE, 1) and answered(CODEX, 1), 15.0)
        claude = emu.bot_messages(group, app_id=CLAUDE)
        codex = emu.bot_messages(group, app_id=CODEX)
        assert _texts(claude) == ["Claude: resumed=0 title=-"]
        assert _texts(codex) == ["Codex: resumed=0 title=-"]
        assert {m.parent_id for m in claude + codex} == {both.message_id}

        only_codex = await emu.send_user_message(
            "history", chat_id=group, chat_type="group", mention_apps=[CODEX]
        )
        await emu.wait_for(lambda: answered(CODEX, 2), 15.0)
        await stack.settled()
        assert _texts(emu.bot_messages(group, app_id=CODEX))[-1] == "history: 2 prompts"
        assert len(emu.bot_messages(group, app_id=CLAUDE)) == 1  # not addressed to Claude

        # Each bot its own private chat.
        await emu.send_user_message("whoami", app_id=CODEX)
        chat = emu.p2p_chat(CODEX)
        await emu.wait_for(lambda: emu.bot_messages(chat, app_id=CODEX), 15.0)
        assert _texts(emu.bot_messages(chat, app_id=CODEX)) == ["Codex: resumed=0 title=-"]
        await stack.settled()

        status = await _get(stack, "/status")
        assert list(status["apps"]) == ["claude", "codex"]
        for name, bot in (("claude", "Claude"), ("codex", "Codex")):
            app = status["apps"][name]
            assert (app["healthy"], app["problem"], app["bot_name"]) == (True, None, bot)
        conversations = status["runtime_states"]["conversations"]
        # The first app's keys as a single app's; the other's prefixed with its name.
        assert conversations[group]["app"] == "claude"
        assert conversations[f"codex/{group}"]["app"] == "codex"
        assert conversations[f"codex/{chat}"]["app"] == "codex"

        # One message in the group is a turn of each bot: ?app= says whose.
        turn = await _get(stack, f"/turns/{both.message_id}?app=codex")
        assert (turn["app"], turn["conversation"], turn["outcome"]) == (
            "codex",
            f"codex/{group}",
            "completed",
        )
        assert (await _get(stack, f"/turns/{both.message_id}"))["app"] == "claude"
        turn = await _get(stack, f"/turns/{only_codex.message_id}")  # Codex's alone
        assert turn["app"] == "codex"

        # /sessions: every app's conversations, each by its key and app; a name and a
        # close go to the app the key says.
        sessions = {e["conversation"]: e for e in (await _get(stack, "/sessions"))["sessions"]}
        assert {key: e["app"] for key, e in sessions.items()} == {
            group: "claude",
            f"codex/{group}": "codex",
            f"codex/{chat}": "codex",
        }
        assert sessions[f"codex/{group}"]["session_id"] != sessions[group]["session_id"]
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
            named = await http.patch(
                f"{stack.ops_url}/sessions/codex/{group}", json={"display_name": "Codex room"}
            )
            closed = await http.post(f"{stack.ops_url}/sessions/codex/{group}/close")
            unknown = await http.post(f"{stack.ops_url}/sessions/nobody/{group}/close")
        assert (named.status_code, named.json()["display_name"]) == (200, "Codex room")
        assert (closed.status_code, closed.json()["session_id"]) == (200, None)
        assert unknown.status_code == 404
        states = (await _get(stack, "/runtime-states"))["conversations"]
        assert states[f"codex/{group}"]["display_name"] == "Codex room"
        assert "display_name" not in states[group]
        sessions = {e["conversation"]: e for e in (await _get(stack, "/sessions"))["sessions"]}
        assert sessions[group]["session_id"]  # Claude's session in the group goes on

        metrics = await _get(stack, "/metrics")
        assert 'bridge_conversations{app="claude",state="idle"} 1.0' in metrics
        assert 'bridge_conversations{app="codex",state="idle"} 2.0' in metrics
        assert 'bridge_turns_total{app="codex",ending="completed",outcome="completed"} 3.0' in (
            metrics
        )
