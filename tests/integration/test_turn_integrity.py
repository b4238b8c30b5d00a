"""Turn integrity against agents that misbehave: each answer belongs to its own message.

Each test runs the scripted agent (a real subprocess, real ACP over stdio) with one quirk of a
real agent switched on (`--quirk`, docs/agents.md "Known agent quirks"), behind the real
bridge and the Feishu emulator, and asserts what the user sees: which lines, in what order,
how many. Agent pids and counters come from the operator listener.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack

T = Translator("zh_CN")
STOPPED = T("presence.stopped")
WORKING = T("progress.tool", title="Working")


# A row of the cancel-tail table (bridge/runtime/acp/cancel_tails.py, docs/agents.md).
CLAUDE_0_23 = ("@zed-industries/claude-agent-acp", "0.23.1")


def agent(*quirks: str, no_load: bool = False, info: tuple[str, str] | None = None) -> str:
    """The scripted agent with `quirks`; `info`: the agentInfo (name, version) it reports."""
    argv = [sys.executable, "-m", "bridge.devtools.scripted_agent"]
    for quirk in quirks:
        argv += ["--quirk", quirk]
    if no_load:
        argv.append("--no-load")
    if info is not None:
        argv += ["--name", info[0], "--version", info[1]]
    return shlex.join(argv)


async def ops(stack: Stack, path: str) -> Any:
    async with httpx.AsyncClient(base_url=stack.ops_url) as client:
        response = await client.get(path)
        response.raise_for_status()
        return response.json() if path != "/metrics" else response.text


async def agent_pids(stack: Stack) -> list[int]:
    status = await ops(stack, "/status")
    return [a["pid"] for a in status["runtime"]["agents"] if a["alive"]]


async def answered(stack: Stack, text: str, line: str) -> None:
    await stack.say(text)
    await stack.wait_text(lambda shown: shown == line)


async def stop_a_running_turn(stack: Stack) -> None:
    """A turn that shows it works, then hangs; /stop; the stopped line (once more each call)."""
    stops = stack.texts().count(STOPPED)
    await stack.say("tool Working\nhang")
    await stack.emu.wait_for(lambda: stack.texts().count(WORKING) > stops)
    await stack.say("/stop")
    await stack.emu.wait_for(lambda: stack.texts().count(STOPPED) > stops)


async def test_after_stop_the_next_message_goes_to_the_same_agent_and_session(
    tmp_path: Path,
) -> None:
    """An agent that settles a cancel cleanly (issue 36): after /stop the next message is
    answered by the same process, in the same session, with no restart."""
    async with running_stack(tmp_path, agent_command=agent()) as stack:
        await answered(stack, "first", "echo: first")
        await stop_a_running_turn(stack)
        before = await agent_pids(stack)

        # first, tool+hang, history: the same session, so the agent counts all three.
        await answered(stack, "history", "history: 3 prompts")
        await stack.settled()

        assert stack.texts() == ["echo: first", WORKING, STOPPED, "history: 3 prompts"]
        assert await agent_pids(stack) == before
        status = await ops(stack, "/status")
        assert [a["restarts"] for a in status["runtime"]["agents"] if a["alive"]] == [0]
        assert cancel_tails(await ops(stack, "/metrics")) == 0


async def test_after_stop_a_session_gemini_cannot_reload_is_not_reloaded(tmp_path: Path) -> None:
    """load-fails, not in the cancel-tail table (Gemini CLI, issue 36): nothing is
    restarted or reloaded after /stop, so the next message goes on in its own session."""
    command = agent("load-fails") + " --no-resume"
    async with running_stack(tmp_path, agent_command=command) as stack:
        await answered(stack, "first", "echo: first")
        await stop_a_running_turn(stack)
        before = await agent_pids(stack)
        await answered(stack, "history", "history: 3 prompts")
        await stack.settled()

        assert T("session.fresh") not in stack.texts()
        assert await agent_pids(stack) == before


async def test_after_stop_each_next_message_gets_its_own_answer(tmp_path: Path) -> None:
    """cancel-tail on an agent in the cancel-tail table (claude-agent-acp 0.23.1): the agent
    owes the cancelled prompt a second result and hands it to the next prompt. The bridge
    restarts the agent and reloads the session before the next prompt goes out, so hello is
    answered by hello, and the next by the next; no tail ever reaches it."""
    command = agent("cancel-tail", info=CLAUDE_0_23)
    async with running_stack(tmp_path, agent_command=command) as stack:
        await stop_a_running_turn(stack)
        before = await agent_pids(stack)

        # Each answer takes a moment, as a model's does: a result handed to the wrong prompt
        # would end that round before its text came.
        await answered(stack, "sleep 200\nsay hello", "hello")
        await answered(stack, "sleep 200\nsay and again", "and again")
        await stack.settled()

        assert stack.texts() == [WORKING, STOPPED, "hello", "and again"]
        assert T("presence.ended_empty") not in stack.texts()
        assert set(await agent_pids(stack)).isdisjoint(before)  # a new process after the stop
        assert cancel_tails(await ops(stack, "/metrics")) == 0  # restarted before the prompt


async def test_a_tail_from_an_agent_not_in_the_table_is_caught_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """cancel-tail on an agent the table does not name: the prompt after the stop goes to the
    same process and is answered by the leftover `end_turn`. The bridge sees it, restarts
    the agent, reloads the session and sends the prompt again: each message still gets its
    own answer, shown once; the tail is logged and counted."""
    async with running_stack(tmp_path, agent_command=agent("cancel-tail")) as stack:
        await stop_a_running_turn(stack)
        before = await agent_pids(stack)

        await answered(stack, "sleep 200\nsay hello", "hello")
        await answered(stack, "sleep 200\nsay and again", "and again")
        await stack.settled()

        assert stack.texts() == [WORKING, STOPPED, "hello", "and again"]
        assert cancel_tails(await ops(stack, "/metrics")) == 1
        assert set(await agent_pids(stack)).isdisjoint(before)
        assert "leftover result" in caplog.text

        # Now known to leave a tail: the next stop restarts it before the prompt goes out.
        await stop_a_running_turn(stack)
        await answered(stack, "sleep 200\nsay third", "third")
        assert cancel_tails(await ops(stack, "/metrics")) == 1


async def test_a_history_survives_the_restart_after_a_stop(tmp_path: Path) -> None:
    """The restart after a cancel reloads the session: the agent still knows the chat."""
    command = agent("cancel-tail", info=CLAUDE_0_23)
    async with running_stack(tmp_path, agent_command=command) as stack:
        await answered(stack, "first", "echo: first")
        await stop_a_running_turn(stack)
        await stack.say("history")
        # first, tool+hang, history: the cancelled prompt is in the history too.
        line = await stack.wait_text(lambda shown: shown.startswith("history:"))
        assert line == "history: 3 prompts"


async def test_without_session_load_an_immediate_empty_end_turn_is_not_the_answer(
    tmp_path: Path,
) -> None:
    """cancel-tail on an agent that cannot load sessions: the leftover `end_turn` that comes
    before any update is absorbed instead of ending hello's round with an 'ended' line. The
    agent is one turn behind from then on until a new process: the next message goes to one,
    in a fresh session (said so), and is answered as usual."""
    command = agent("cancel-tail", no_load=True)
    settings = {"bridge_stale_seconds": 2.0}  # the absorbed round ends by the stall rule
    async with running_stack(tmp_path, agent_command=command, settings=settings) as stack:
        await answered(stack, "warm up", "echo: warm up")  # the agent's start is not a stall
        await stop_a_running_turn(stack)
        await stack.say("sleep 200\nsay hello")
        await stack.wait_text(lambda shown: shown == "hello", within=5)
        # The agent owes this round a result it will never send: /stop still ends it.
        await stack.say("/stop")
        await stack.emu.wait_for(lambda: stack.texts().count(STOPPED) == 2)
        assert T("presence.ended_empty") not in stack.texts()
        shown = len(stack.texts())
        await answered(stack, "after", "echo: after")
        await stack.settled()
        assert stack.texts()[shown:] == [T("session.fresh"), "echo: after"]


async def test_without_session_load_a_stop_costs_only_its_own_chat_its_session(
    tmp_path: Path,
) -> None:
    """An agent in the cancel-tail table that cannot load sessions, one process for two
    chats: after /stop in one, its next message goes on in a new session, said so; the
    process is not restarted, so the other chat's session and its history stay."""
    command = agent("cancel-tail", no_load=True, info=CLAUDE_0_23)
    settings = {"bridge_max_agents": 1, "bridge_stale_seconds": 2.0}
    async with running_stack(tmp_path, agent_command=command, settings=settings) as stack:
        other = stack.emu.open_chat("p2p", user_open_id="ou_other")
        await stack.say("say kept", sender_open_id="ou_other")
        await stack.wait_text(lambda shown: shown == "kept", chat_id=other)
        pids = await agent_pids(stack)
        await stop_a_running_turn(stack)
        shown = len(stack.texts())
        await answered(stack, "after", "echo: after")
        await stack.say("history", sender_open_id="ou_other")
        await stack.wait_text(lambda shown: shown.startswith("history"), chat_id=other)
        await stack.settled()
        assert stack.texts()[shown:] == [T("session.fresh"), "echo: after"]
        assert stack.texts(other) == ["kept", "history: 2 prompts"]
        assert await agent_pids(stack) == pids


BUSY = T("progress.tool", title="Busy")


@asynccontextmanager
async def one_process_for_two_chats(
    tmp_path: Path, info: tuple[str, str] | None = CLAUDE_0_23
) -> AsyncIterator[tuple[Stack, str]]:
    """An agent that leaves a tail after a cancel (in the cancel-tail table as `info`; None:
    not in it), one process for the stack's chat and another."""
    command = agent("cancel-tail", info=info)
    settings = {"bridge_max_agents": 1}
    async with running_stack(tmp_path, agent_command=command, settings=settings) as stack:
        yield stack, stack.emu.open_chat("p2p", user_open_id="ou_other")


async def keep_busy(stack: Stack, other: str, ms: int) -> None:
    """A turn of the other chat on the process, under way (its tool line shown)."""
    await stack.say(f"tool Busy\nsleep {ms}\nsay other done", sender_open_id="ou_other")
    await stack.wait_text(lambda shown: shown == BUSY, chat_id=other)


async def hello_once_after_the_other_turn(
    stack: Stack, other: str, *, prompts: int, tails: int
) -> None:
    """/stop in `stack`'s chat, then hello while `other`'s turn keeps the shared process
    busy: hello is answered once, only after the other turn ended, by a new process whose
    session was reloaded (`prompts` in its history); `tails` cancel tails counted."""
    await stop_a_running_turn(stack)
    pids = await agent_pids(stack)
    await keep_busy(stack, other, 1500)
    await answered(stack, "sleep 200\nsay hello", "hello")
    await answered(stack, "history", f"history: {prompts} prompts")
    await stack.settled()

    assert stack.texts() == [WORKING, STOPPED, "hello", f"history: {prompts} prompts"]
    assert stack.texts(other) == [BUSY, "other done"]
    in_order = [m.text for m in stack.emu.bot_messages() if m.text in ("other done", "hello")]
    assert in_order == ["other done", "hello"]  # hello waited for the other turn
    assert set(await agent_pids(stack)).isdisjoint(pids)
    assert cancel_tails(await ops(stack, "/metrics")) == tails


async def test_after_stop_on_an_agent_another_chat_keeps_busy_the_restart_waits_its_turn(
    tmp_path: Path,
) -> None:
    """An agent in the cancel-tail table, one process for two chats: after /stop in one,
    its next message comes while the other chat's turn runs there. Restarting now would
    cost the other chat its turn; prompting now would get the tail (one turn behind, each
    time the process is busy). The message waits for the other turn to end, then the agent
    is restarted and the session reloaded: each chat gets its own answer, once."""
    async with one_process_for_two_chats(tmp_path) as (stack, other):
        # The session reloaded: tool+hang, hello, history.
        await hello_once_after_the_other_turn(stack, other, prompts=3, tails=0)


async def test_a_stop_while_the_restart_waits_for_another_chats_turn_stops_it(
    tmp_path: Path,
) -> None:
    """The same wait, stopped: the round says stopped at once, not when the other chat's turn
    ends. (The core holds a stop that comes before the prompt reached the agent, and cancels
    the prompt as it goes out.) The next message still gets its own answer."""
    async with one_process_for_two_chats(tmp_path) as (stack, other):
        await stop_a_running_turn(stack)
        await keep_busy(stack, other, 3000)
        await stack.say("say never")
        await stack.say("/stop")
        await stack.emu.wait_for(lambda: stack.texts().count(STOPPED) == 2)
        assert "other done" not in stack.texts(other)  # stopped before the other turn ended
        await stack.wait_text(lambda shown: shown == "other done", chat_id=other)
        await answered(stack, "sleep 200\nsay hello", "hello")
        await stack.settled()
        assert "never" not in stack.texts()
        assert T("presence.ended_empty") not in stack.texts()
        assert stack.texts(other) == [BUSY, "other done"]


async def test_a_tail_caught_while_another_chat_keeps_the_agent_busy_is_sent_again_after(
    tmp_path: Path,
) -> None:
    """cancel-tail on an agent the table does not name, one process for two chats: the
    prompt after /stop goes out while the other chat's turn runs there, and is answered by
    the leftover `end_turn`. Restarting now would cost the other chat its turn: the prompt
    waits for it to end (what the old process streams for hello meanwhile is not shown),
    then the agent is restarted, the session reloaded and hello sent again. Hello is shown
    once and its round ends as answered; it is not kept open for a result the agent owes
    the next prompt, until the stall rules end it as unresponsive (simulator seeds 7 and
    6011)."""
    async with one_process_for_two_chats(tmp_path, info=None) as (stack, other):
        # The session reloaded: tool+hang, hello twice (its run on the old process, then
        # again), history.
        await hello_once_after_the_other_turn(stack, other, prompts=4, tails=1)


async def test_a_stop_answered_end_turn_is_still_a_stop(tmp_path: Path) -> None:
    """cancel-end-turn (copilot-cli, opencode): the stopped round says stopped, and the next
    message is answered as usual."""
    async with running_stack(tmp_path, agent_command=agent("cancel-end-turn")) as stack:
        await stop_a_running_turn(stack)
        await answered(stack, "hello", "echo: hello")
        await stack.settled()
        assert stack.texts() == [WORKING, STOPPED, "echo: hello"]


async def test_an_agent_that_ignores_the_stop_is_told_then_ended_and_restarted(
    tmp_path: Path,
) -> None:
    """ignore-cancel: 'still stopping' after the notice interval; past the limit the bridge
    ends the round itself, kills and restarts the agent, says so; the next message works."""
    settings = {"bridge_cancel_notice_seconds": 0.1, "bridge_cancel_limit_seconds": 0.4}
    async with running_stack(
        tmp_path, agent_command=agent("ignore-cancel"), settings=settings
    ) as stack:
        await stack.say("tool Working\nhang")
        await stack.wait_text(lambda shown: shown == WORKING)
        before = await agent_pids(stack)
        await stack.say("/stop")
        await stack.wait_text(lambda shown: shown == T("presence.stop_forced"))

        await answered(stack, "hello", "echo: hello")
        await stack.settled()
        assert stack.texts() == [
            WORKING,
            T("presence.stopping"),
            T("presence.stop_forced"),
            "echo: hello",
        ]
        assert set(await agent_pids(stack)).isdisjoint(before)


async def test_an_answer_whose_result_never_comes_is_shown_and_the_round_ended(
    tmp_path: Path,
) -> None:
    """no-result: the answer streamed whole, the prompt's result never came. The stall rules
    end the round (the text shown, then the line saying the system ended it), never a round
    left running."""
    # The agent's cold start may draw the stall hint first; the answer's chunk then restarts
    # the clock, and 2 x stale of silence after it ends the round.
    settings = {"bridge_stale_seconds": 1.0, "bridge_cancel_limit_seconds": 5.0}
    async with running_stack(tmp_path, agent_command=agent("no-result"), settings=settings) as s:
        await s.say("say the whole answer")
        await s.wait_text(lambda shown: shown == T("presence.stalled_ended"))
        texts = s.texts()
        assert texts.index("the whole answer") < texts.index(T("presence.stalled_ended"))
        assert texts[-1] == T("presence.stalled_ended")
        assert texts.count(T("presence.stalled_ended")) == 1


async def test_updates_after_the_result_are_dropped_and_counted(tmp_path: Path) -> None:
    """late-updates: a chunk 20 ms after each result is never shown as a new answer; the
    operator sees it counted."""
    async with running_stack(tmp_path, agent_command=agent("late-updates")) as stack:
        await answered(stack, "hello", "echo: hello")

        async with asyncio.timeout(10):
            while late_updates(await ops(stack, "/metrics")) < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # a counter has nothing to await; re-read it

        await answered(stack, "again", "echo: again")
        await stack.settled()
        assert stack.texts() == ["echo: hello", "echo: again"]


def cancel_tails(metrics: str) -> float:
    match = re.search(r'^bridge_agent_cancel_tails_total\{app="default"\} (\S+)$', metrics, re.M)
    assert match, "the cancel-tail counter is exported"
    return float(match[1])


def late_updates(metrics: str) -> float:
    match = re.search(
        r'^bridge_agent_updates_dropped_total\{app="default",reason="late"\} (\S+)$', metrics, re.M
    )
    return float(match[1]) if match else 0.0


async def test_after_stop_a_session_the_agent_cannot_load_goes_on_in_a_new_one(
    tmp_path: Path,
) -> None:
    """load-fails (Gemini CLI's; issues 34 and 35) on an agent restarted after /stop (one in
    the cancel-tail table): the agent answers the reload -32603 'No previous sessions found'.
    The next message is still answered, in a new session (its first prompt), told so first."""
    command = agent("load-fails", info=CLAUDE_0_23) + " --no-resume"
    async with running_stack(tmp_path, agent_command=command) as stack:
        await answered(stack, "first", "echo: first")
        await stop_a_running_turn(stack)
        before = await agent_pids(stack)
        await answered(stack, "history", "history: 1 prompts")
        await stack.settled()

        assert stack.texts() == [
            "echo: first",
            WORKING,
            STOPPED,
            T("session.fresh"),
            "history: 1 prompts",
        ]
        assert set(await agent_pids(stack)).isdisjoint(before)  # restarted after the stop


async def test_a_tail_whose_reload_fails_ends_its_round_and_the_next_goes_on(
    tmp_path: Path,
) -> None:
    """cancel-tail and load-fails, not in the table: the tail is caught, the restarted agent
    cannot reload the session. That round ends with the fault line (never a hang), and the
    next message goes on in a new session, told so first."""
    command = agent("cancel-tail", "load-fails") + " --no-resume"
    async with running_stack(tmp_path, agent_command=command) as stack:
        await stop_a_running_turn(stack)
        await stack.say("sleep 200\nsay hello")  # a model's moment: the tail comes first
        await stack.wait_text(lambda shown: shown == T("presence.unrecoverable"))
        await answered(stack, "history", "history: 1 prompts")  # a new session's first
        await stack.settled()

        assert stack.texts() == [
            WORKING,
            STOPPED,
            T("presence.unrecoverable"),
            T("session.fresh"),
            "history: 1 prompts",
        ]
