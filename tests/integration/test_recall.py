"""A message the user recalls in Feishu (`im.message.recalled_v1`), over the real stack:
queued, it never runs and its queue line says so; the running round's own message, the round
is stopped and one line in the chat says why; an answered one changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack

T = Translator("zh_CN")


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(tmp_path / "bridge") as running:
        yield running


def prompts_seen(stack: Stack) -> list[str]:
    """The echo answers: what reached the agent as a plain prompt."""
    return [t for t in stack.texts() if t.startswith("echo: ")]


async def test_a_recalled_queued_message_never_runs_and_its_queue_line_says_so(
    stack: Stack,
) -> None:
    await stack.say("hang")
    await stack.emu.wait_for(lambda: stack.emu.calls("/open-apis/im/v1/messages", "POST"))
    second = await stack.say("second message")
    queued = await stack.wait_text(lambda t: t == T("presence.queued", position=1))
    notice = next(m for m in stack.bot() if m.text == queued)
    await stack.say("third message")
    await stack.wait_text(lambda t: t == T("presence.queued", position=2))
    await stack.emu.recall_message(second.message_id)
    await stack.emu.wait_for(lambda: stack.emu.message(notice.message_id).updated)
    assert stack.emu.message(notice.message_id).text == T("presence.recalled_queued")
    await stack.say("/stop")
    await stack.wait_text(lambda t: t == T("presence.stopped"))
    await stack.settled()
    assert prompts_seen(stack) == ["echo: third message"]
    edits = stack.emu.calls("/open-apis/im/v1/messages/", "PUT")
    assert len(edits) == 1


async def test_recalling_the_running_rounds_message_stops_it_with_one_line_in_the_chat(
    stack: Stack,
) -> None:
    running = await stack.say("tool Build\nhang")
    await stack.wait_text(lambda t: t == T("progress.tool", title="Build"))
    await stack.emu.recall_message(running.message_id)
    line = await stack.wait_text(lambda t: t == T("presence.recalled"))
    await stack.settled()
    posted = next(m for m in stack.bot() if m.text == line)
    assert posted.parent_id is None  # sent to the chat: the recalled message takes no reply
    assert stack.texts().count(line) == 1
    # Operators see why it ended: the typed ending, in the snapshot and in /turns/{id}.
    state = await stack.runtime_state()
    assert state["last_terminal"]["ending"] == "recall"
    async with httpx.AsyncClient(trust_env=False) as http:
        turn = (await http.get(f"{stack.ops_url}/turns/{running.message_id}")).json()
    assert (turn["outcome"], turn["ending"]) == ("cancelled", "recall")
    await stack.say("after")
    await stack.wait_text(lambda t: t == "echo: after")


async def test_recalling_an_answered_message_changes_nothing_and_a_redelivery_is_ignored(
    stack: Stack,
) -> None:
    answered = await stack.say("say done")
    await stack.wait_text(lambda t: t == "done")
    await stack.settled()
    before = stack.texts()
    recall = await stack.emu.recall_message(answered.message_id)
    await stack.emu.redeliver(recall.event_id)
    await stack.say("next")
    await stack.wait_text(lambda t: t == "echo: next")
    await stack.settled()
    assert stack.texts() == [*before, "echo: next"]
