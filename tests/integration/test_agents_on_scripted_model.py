"""Claude Code, Codex, Qwen Code, Gemini CLI and OpenCode doing real work through the bridge,
offline.

Each agent is the real program at a pinned version (scripts/fetch-real-agents.sh), in a
network namespace of its own with a scripted model on its loopback (bridge/devtools/
fake_model): the model's turn is decided by the user's words, so a chat message like
`WRITE <path> <text>` makes the model call the agent's own file-write tool, and the agent
asks the bridge for permission as it would for any user. What each agent must show:

1. hello: an answer, one ack, nothing else;
2. approval, allow once: the card shows what will be written, the click lets it run, the file
   exists, the answer follows;
3. approval, reject: no file, and a line for the user;
4. a long streamed answer arrives whole and in order;
5. the agent killed mid-turn: the recovering line, the resend line, and the next message works;
6. /stop mid-turn: the stopped line, and the next message works, answered by the same
   agent process (cancelled in place, issue 36).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from bridge.devtools.emulator.records import ChatMessage
from bridge.devtools.fake_model.script import HELLO, long_text
from bridge.i18n import Translator
from tests.integration.model_agents import AGENTS, ModelAgent, require
from tests.integration.stack import Stack, running_stack

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(240)]

T = Translator("zh_CN")
WITHIN = 45.0  # seconds for one step; an agent's start is most of it
STOPPED = T("presence.stopped")
RECOVERING = T("presence.recovering")
RESEND = "请重发上一条消息"  # the end of both resend lines (context kept, or lost)
SETTINGS = {
    "bridge_first_hint_seconds": 30.0,  # no hint races the answers these tests read
    "bridge_heartbeat_seconds": 60.0,
    "bridge_approval_timeout_seconds": 120.0,
}


@pytest.fixture(params=[pytest.param(a, id=a.name) for a in AGENTS])
def agent(request: pytest.FixtureRequest) -> ModelAgent:
    chosen: ModelAgent = request.param
    require(chosen)
    return chosen


class Run:
    """One agent behind the bridge, and what its model was asked."""

    def __init__(self, stack: Stack, record: Path, workdir: Path) -> None:
        self.stack, self.record, self.workdir = stack, record, workdir

    def asked(self) -> list[dict[str, Any]]:
        """Every request the agent made of its model (path and JSON body), as far as the
        record is written: the model's process may be writing a long one as it is read,
        so only lines it has ended count."""
        if not self.record.exists():
            return []
        written = self.record.read_text(encoding="utf-8")
        lines = written[: written.rfind("\n") + 1].splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    async def model_heard(self, words: str) -> None:
        """Until the agent has asked its model for a turn on `words` (a request offering
        tools: side requests such as a title for the session offer none). The record is a
        file written in the agent's namespace, so it is read every 20 ms."""

        def heard() -> bool:
            return any(
                words in r["body"] and json.loads(r["body"]).get("tools") for r in self.asked()
            )

        async with asyncio.timeout(WITHIN):
            while not heard():  # noqa: ASYNC110 - another process's file: nothing to await
                await asyncio.sleep(0.02)

    async def said(self, text: str) -> str:
        """Sends `text` and waits for the next thing the bot shows."""
        count = len(self.stack.texts())
        await self.stack.say(text)
        await self.stack.wait_texts(count + 1, within=WITHIN)
        return self.stack.texts()[count]

    def approval_card(self) -> ChatMessage | None:
        return next(
            (
                m
                for m in self.stack.bot()
                if m.msg_type == "interactive" and "action" in json.dumps(m.card or {})
            ),
            None,
        )

    async def wait_card(self) -> ChatMessage:
        card: ChatMessage = await self.stack.emu.wait_for(self.approval_card, timeout=WITHIN)
        return card


def buttons(card: ChatMessage) -> dict[str, dict[str, Any]]:
    data = card.card or {}
    return {
        action["text"]["content"]: action["value"]
        for element in data.get("elements", [])
        if element.get("tag") == "action"
        for action in element.get("actions", [])
        if action.get("tag") == "button"
    }


def agent_pids(stack: Stack) -> list[int]:
    """The agent's processes: the runtime's process group (wrapper, agent, its children)."""
    (process,) = stack.demo.service.runtime.running_processes()
    pgid = process.pid
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


async def run_agent(agent: ModelAgent, tmp_path: Path) -> Any:
    record = tmp_path / "model-requests.jsonl"
    command = agent.command(tmp_path / "agent-home", record)
    return running_stack(tmp_path / "bridge", agent_command=command, settings=SETTINGS), record


# --- 1. hello ------------------------------------------------------------------------------------


async def test_hello_gets_one_answer_and_one_ack(agent: ModelAgent, tmp_path: Path) -> None:
    stacked, record = await run_agent(agent, tmp_path)
    async with stacked as stack:
        run = Run(stack, record, tmp_path / "bridge")
        sent = await stack.say("hello")
        await stack.wait_text(lambda shown: HELLO in shown, within=WITHIN)
        await stack.settled(within=WITHIN)
        assert stack.texts() == [HELLO]
        assert stack.reactions(sent.message_id) == ["OnIt"]
        assert any("hello" in r["body"] for r in run.asked())


# --- 2 and 3. approval ---------------------------------------------------------------------------


@pytest.mark.parametrize("choice", ["allow_once", "reject_once"])
async def test_the_agents_own_write_tool_asks_first(
    agent: ModelAgent, tmp_path: Path, choice: str
) -> None:
    stacked, record = await run_agent(agent, tmp_path)
    async with stacked as stack:
        run = Run(stack, record, tmp_path / "bridge")
        target = tmp_path / "bridge" / "notes.txt"
        if agent.approval_mode is not None:
            mode_set = T("command.mode_set", mode=agent.approval_mode)
            assert await run.said(f"/mode {agent.approval_mode}") == mode_set
        shown_before = len(stack.texts())
        sent = await stack.say(f"WRITE {target} written-by-the-agent")
        card = await run.wait_card()
        shown = json.dumps(card.card, ensure_ascii=False)
        # The card says which file the agent's tool writes, and what it will write there.
        assert str(target) in shown, shown
        assert "written-by-the-agent" in shown, shown
        assert not target.exists()  # nothing is written before the click
        label = T(f"card.approval.option.{choice}")
        options = buttons(card)
        assert label in options, f"{agent.name} offered {list(options)}"
        clicked = await stack.emu.click_card(card.message_id, options[label])
        assert clicked.ok
        refused_end = T("presence.ended_rejected")
        await stack.wait_text(
            lambda shown: shown.startswith("the tool said") or shown == refused_end,
            within=WITHIN,
        )
        await stack.settled(within=WITHIN)
        shown = stack.texts()[shown_before:]
        if choice == "allow_once":
            assert target.read_text().strip() == "written-by-the-agent"
            assert shown[-1].startswith("the tool said"), shown  # the model's answer follows
        else:
            assert not target.exists()
            if agent.refusal_ends_round:  # the user is told why the round ended
                assert shown[-1] == refused_end, shown
            else:  # the model hears the refusal and answers
                assert shown[-1].startswith("the tool said"), shown
        assert stack.reactions(sent.message_id) == ["OnIt"]


# --- 4. a long stream ----------------------------------------------------------------------------


async def test_a_long_streamed_answer_arrives_whole_and_in_order(
    agent: ModelAgent, tmp_path: Path
) -> None:
    stacked, _ = await run_agent(agent, tmp_path)
    async with stacked as stack:
        await stack.say("LONG 600")
        last = long_text(600).splitlines()[-1]
        await stack.wait_text(lambda shown: last in shown, within=WITHIN)
        await stack.settled(within=WITHIN)
        whole = "\n".join(stack.texts())
        lines = [line for line in whole.splitlines() if line.startswith("line ")]
        assert lines == long_text(600).splitlines()


# --- 5. the agent killed mid-turn ---------------------------------------------------------------


async def test_the_agent_killed_mid_turn_is_told_restarted_and_works_again(
    agent: ModelAgent, tmp_path: Path
) -> None:
    stacked, record = await run_agent(agent, tmp_path)
    async with stacked as stack:
        run = Run(stack, record, tmp_path / "bridge")
        await stack.say("HANG")
        await run.model_heard("HANG")
        for pid in agent_pids(stack):
            # One of the group's short-lived children (Qwen spawns some) may be gone already.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await stack.wait_text(lambda shown: RESEND in shown, within=WITHIN)
        await stack.settled(within=WITHIN)
        shown = stack.texts()
        # What the model had streamed may be shown first; then the fault, then the resend line.
        assert shown[-2] == RECOVERING, shown
        assert RESEND in shown[-1], shown
        assert shown[:-2] in ([], ["working on it"]), shown
        assert await run.said("ECHO again") == "echo: again"


# --- 6. /stop mid-turn --------------------------------------------------------------------------


async def test_stop_mid_turn_cancels_tells_and_the_next_messages_work(
    agent: ModelAgent, tmp_path: Path
) -> None:
    stacked, record = await run_agent(agent, tmp_path)
    async with stacked as stack:
        run = Run(stack, record, tmp_path / "bridge")
        plain = await _timed(run.said("ECHO warm"))  # a plain answer from a warm agent
        assert plain[0] == "echo: warm"
        sent = await stack.say("HANG")
        await run.model_heard("HANG")
        served = [p.pid for p in stack.demo.service.runtime.running_processes()]
        await stack.say("/stop")
        await stack.wait_text(lambda shown: shown == STOPPED, within=WITHIN)
        await stack.settled(within=WITHIN)
        first = await _timed(run.said("ECHO next"))
        second = await _timed(run.said("ECHO then"))
        assert (first[0], second[0]) == ("echo: next", "echo: then")  # each its own, in order
        now = [p.pid for p in stack.demo.service.runtime.running_processes()]
        if agent.restarted_after_stop:  # in the cancel-tail table: a new process answers
            assert now != served, (now, served)
        else:  # cancelled in place: the process that served the stopped turn answers
            assert now == served, (now, served)
        # What the model had streamed before the stop may be shown first, never after.
        assert stack.texts() in (
            ["echo: warm", STOPPED, "echo: next", "echo: then"],
            ["echo: warm", "working on it", STOPPED, "echo: next", "echo: then"],
        ), stack.texts()
        assert stack.reactions(sent.message_id) == ["OnIt"]
        # Seconds from each message to its answer, printed (`-rP`), not judged: timing is
        # the bench's; issue 36 asks the first within 1.5x the warm plain answer.
        print(
            f"{agent.name}: plain {plain[1]:.2f} s, after /stop {first[1]:.2f} s, {second[1]:.2f} s"
        )


async def _timed(answer: Awaitable[str]) -> tuple[str, float]:
    started = time.perf_counter()
    text = await answer
    return text, time.perf_counter() - started
