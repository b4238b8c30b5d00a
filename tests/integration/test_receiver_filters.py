"""Issue 4, receiver: who gets an answer (groups only when @-mentioned, allow-lists with one
polite refusal) and what kinds of message start a turn."""

from __future__ import annotations

import json
from pathlib import Path

from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack

t = Translator("zh_CN")


async def test_group_message_without_mention_is_ignored(stack: Stack) -> None:
    group = stack.emu.group_chat_id
    ignored = await stack.say("just chatting", chat_type="group")
    answered = await stack.say("hello bot", chat_type="group", mention_bot=True)

    await stack.wait_texts(1, chat_id=group)
    await stack.settled()
    assert stack.texts(group) == ["echo: hello bot"]  # the @-mention is stripped
    assert stack.reactions(ignored.message_id) == []
    assert stack.reactions(answered.message_id) == ["OnIt"]


async def test_group_thread_is_its_own_conversation(stack: Stack) -> None:
    group = stack.emu.group_chat_id
    root = await stack.say("hang", chat_type="group", mention_bot=True)
    await stack.emu.wait_for(lambda: stack.reactions(root.message_id) == ["OnIt"])
    # A message in a thread of the group is another conversation: not queued behind `hang`.
    await stack.say("in a thread", chat_type="group", mention_bot=True, thread_id="omt_thread1")
    reply = await stack.wait_text(lambda x: x == "echo: in a thread", chat_id=group)
    assert reply
    assert t("presence.queued", position=1) not in stack.texts(group)
    await stack.say("/stop", chat_type="group", mention_bot=True)
    await stack.wait_text(lambda x: x == t("presence.stopped"), chat_id=group)


async def test_rich_text_post_becomes_the_prompt(stack: Stack) -> None:
    content = {
        "title": "Plan",
        "content": [[{"tag": "text", "text": "step one"}], [{"tag": "text", "text": "two"}]],
    }
    await stack.say("", message_type="post", content=json.dumps(content))
    reply = await stack.wait_text(lambda x: x.startswith("echo:"))
    assert reply == "echo: Plan\nstep one\ntwo"


async def test_outside_the_allow_list_gets_one_polite_refusal(tmp_path: Path) -> None:
    settings = {"bridge_allowed_users": "ou_someone_else"}
    async with running_stack(tmp_path, settings=settings) as stack:
        sent = await stack.say("let me in")
        await stack.wait_text(lambda x: x == t("access.refused"))
        await stack.settled()
        await stack.emu.redeliver(sent.event_id)
        await stack.settled()
        assert stack.texts() == [t("access.refused")]
        assert stack.reactions(sent.message_id) == []  # no ack: nothing is being worked on
        assert await stack.demo.service.store.running_turns() == []


async def test_quote_reply_in_a_group_answers_the_question(stack: Stack) -> None:
    """A reply (root_id, no thread) stays in the chat's conversation: it is the answer."""
    group = stack.emu.group_chat_id
    asked = await stack.say(
        "ask Which env? staging|production", chat_type="group", mention_bot=True
    )
    # In a group the pause line names whose turn it is (an @-mention ahead of it).
    await stack.wait_text(lambda x: x.endswith(t("presence.waiting_reply")), chat_id=group)
    await stack.say(
        "staging",
        chat_type="group",
        mention_bot=True,
        root_id=asked.message_id,
        parent_id=asked.message_id,
    )
    await stack.wait_text(lambda x: x == "answer: staging", chat_id=group)
    await stack.settled()
    assert [x for x in stack.texts(group) if x.startswith("echo:")] == []


async def test_past_the_concurrency_limit_the_user_is_told_at_once(tmp_path: Path) -> None:
    async with running_stack(tmp_path, settings={"bridge_max_running_turns": 1}) as stack:
        await stack.say("tool Working\nhang")
        # The progress line shows the first round holds the only slot.
        await stack.wait_text(lambda x: x == t("progress.tool", title="Working"))
        other = stack.emu.open_chat("p2p", user_open_id="ou_second_user")
        await stack.say("hello", chat_id=other, sender_open_id="ou_second_user")
        line = await stack.wait_text(lambda x: x == t("presence.runtime_busy"), chat_id=other)
        assert line
        assert HINT not in stack.texts(other)
        await stack.say("/stop")
        await stack.wait_text(lambda x: x == t("presence.stopped"))


HINT = t("presence.running_hint")


async def test_when_every_agent_process_is_full_the_user_is_told_at_once(tmp_path: Path) -> None:
    settings = {"bridge_max_agents": 1, "bridge_sessions_per_agent": 1}
    async with running_stack(tmp_path, settings=settings) as stack:
        await stack.say("hello")
        await stack.wait_text(lambda x: x == "echo: hello")
        other = stack.emu.open_chat("p2p", user_open_id="ou_second_user")
        await stack.say("hello", chat_id=other, sender_open_id="ou_second_user")
        line = await stack.wait_text(lambda x: x == t("presence.runtime_busy"), chat_id=other)
        assert line
        await stack.settled()
        assert stack.texts(other) == [t("presence.runtime_busy")]
