"""The bot's custom menu over the real stack (webhook mode): a click (`application.bot.menu_v6`,
no chat, no message) runs its command in the clicker's private chat as typing it would, its
answers new messages in that chat (no ack reaction: there is no message), and a stranger's
click gets the refusal a stranger's message gets. The long connection's side of the same
event is in tests/unit/test_longconn.py (a real socket to a server speaking lark's protocol)."""

from __future__ import annotations

from pathlib import Path

from bridge.devtools.emulator.records import ChatMessage, DeliveryAttempt
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack

T = Translator("zh_CN")
MESSAGES = "/open-apis/im/v1/messages"
FRIEND = "ou_the_friend"
STRANGER = "ou_a_stranger"


def new_messages(stack: Stack, chat_id: str | None = None) -> list[ChatMessage]:
    """The bot's posts that are no reply to anything."""
    return [m for m in stack.bot(chat_id) if m.parent_id is None]


def posts(stack: Stack, receive_id_type: str) -> list[dict[str, object]]:
    return [
        c.body
        for c in stack.emu.calls(path_prefix=MESSAGES, method="POST")
        if c.path == MESSAGES and c.query.get("receive_id_type") == receive_id_type
    ]


def reactions_added(stack: Stack) -> int:
    return sum(1 for c in stack.emu.calls(method="POST") if c.path.endswith("/reactions"))


async def click(stack: Stack, event_key: str, operator: str | None = None) -> DeliveryAttempt:
    attempt = await stack.emu.click_menu(event_key, operator)
    assert attempt is not None
    assert attempt.ok, attempt
    return attempt


async def test_status_help_new_from_the_menu_answer_as_new_messages(stack: Stack) -> None:
    await stack.say("echo hi")
    await stack.wait_text(lambda t: t == "echo: hi")
    await stack.settled()
    acks = reactions_added(stack)

    await click(stack, "status")
    status = await stack.wait_text(lambda t: t.startswith(T("status.idle")))
    await click(stack, "/New_Session")  # any case, a leading "/"
    await stack.wait_text(lambda t: t == T("command.new_session"))
    await click(stack, "frobnicate")
    await stack.wait_text(lambda t: t == T("menu.unknown", item="frobnicate"))
    await stack.settled()

    assert stack.texts() == [
        "echo: hi",
        status,
        T("command.new_session"),
        T("menu.unknown", item="frobnicate"),
    ]
    # Each answer is a new message in the private chat, posted by chat id: not a reply.
    assert [m.text for m in new_messages(stack)] == stack.texts()[1:]
    sent = posts(stack, "chat_id")
    assert [b["receive_id"] for b in sent] == [stack.chat] * 3
    assert reactions_added(stack) == acks  # a click has no message to react to


async def test_menu_new_starts_a_fresh_agent_session(stack: Stack) -> None:
    await stack.say("echo one")
    await stack.wait_text(lambda t: t == "echo: one")
    await stack.say("history")
    await stack.wait_text(lambda t: t == "history: 2 prompts")
    await stack.settled()

    await click(stack, "reset")
    await stack.wait_text(lambda t: t == T("command.new_session"))
    await stack.settled()
    await stack.say("history")
    await stack.wait_text(lambda t: t == "history: 1 prompts")
    await stack.settled()
    assert stack.texts()[-2:] == [T("command.new_session"), "history: 1 prompts"]


async def test_menu_stop_stops_the_running_round_once(stack: Stack) -> None:
    sent = await stack.say("tool Run tests\nhang")
    await stack.wait_text(lambda t: t == T("progress.tool", title="Run tests"))

    await click(stack, "stop")
    await stack.wait_text(lambda t: t == T("presence.stopped"))
    await stack.settled()

    texts = stack.texts()
    assert texts.count(T("presence.stopped")) == 1
    assert T("command.stop_idle") not in texts
    # The round's end answers the message that started it, as /stop typed would.
    stopped = next(m for m in stack.bot() if m.text == T("presence.stopped"))
    assert stopped.parent_id == sent.message_id
    assert await stack.demo.service.store.running_turns() == []

    await click(stack, "cancel")  # nothing runs now
    await stack.wait_text(lambda t: t == T("command.stop_idle"))


async def test_a_redelivered_click_does_nothing_twice(stack: Stack) -> None:
    await stack.say("echo hi")
    await stack.wait_text(lambda t: t == "echo: hi")
    attempt = await click(stack, "help")
    await stack.wait_texts(2)
    await stack.settled()
    again = await stack.emu.redeliver(attempt.event_id)
    assert again.ok
    await stack.say("echo after")
    await stack.wait_text(lambda t: t == "echo: after")
    await stack.settled()
    texts = stack.texts()
    assert len(texts) == 3
    assert (texts[0], texts[2]) == ("echo: hi", "echo: after")
    assert texts[1].startswith(T("command.help")[:4])  # help (the agent's commands or not)


async def test_a_click_before_any_message_opens_the_private_chat(stack: Stack) -> None:
    await click(stack, "status")
    await stack.wait_texts(2)
    await stack.settled()
    # The chat was never seen: the opening line goes to the user by open_id, and Feishu's
    # answer names the chat, where the status follows (and every later answer goes).
    (opening,) = posts(stack, "open_id")
    assert opening["receive_id"] == stack.emu.default_user_open_id
    texts = stack.texts()
    assert texts[0] == T("menu.first_contact")
    assert texts[1].startswith(T("status.idle"))
    assert await stack.demo.service.store.p2p_chat(stack.emu.default_user_open_id) == stack.chat

    await click(stack, "new")
    await stack.wait_text(lambda t: t == T("command.new_session"))
    assert len(posts(stack, "open_id")) == 1
    assert [b["receive_id"] for b in posts(stack, "chat_id")] == [stack.chat] * 2


async def test_a_strangers_click_gets_the_refusal_a_message_gets(tmp_path: Path) -> None:
    settings = {"bridge_allow_all": False, "bridge_allowed_users": FRIEND}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        await stack.say("hello")  # the emulator's default user is no friend
        await stack.wait_text(lambda t: t == T("access.refused"))
        await click(stack, "stop")
        await stack.wait_texts(2)
        # One who never wrote: refused in their private chat, found by their open id.
        await click(stack, "status", STRANGER)
        their_chat = stack.emu.open_chat("p2p", user_open_id=STRANGER)
        await stack.wait_texts(1, chat_id=their_chat)
        # A friend's click in the same bridge is answered.
        await stack.say("echo hi", sender_open_id=FRIEND)
        friend_chat = stack.emu.open_chat("p2p", user_open_id=FRIEND)
        await stack.wait_text(lambda t: t == "echo: hi", chat_id=friend_chat)
        await click(stack, "stop", FRIEND)
        await stack.wait_text(lambda t: t == T("command.stop_idle"), chat_id=friend_chat)
        await stack.settled()

        assert stack.texts() == [T("access.refused")] * 2
        assert [m.text for m in new_messages(stack)] == [T("access.refused")]  # the click's
        assert stack.texts(their_chat) == [T("access.refused")]
        assert [b["receive_id"] for b in posts(stack, "open_id")] == [STRANGER]
        assert stack.texts(friend_chat) == ["echo: hi", T("command.stop_idle")]
        assert await stack.demo.service.store.running_turns() == []


async def test_with_the_menu_off_a_click_is_ignored(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge", settings={"bridge_bot_menu": False}) as stack:
        await stack.say("echo hi")
        await stack.wait_text(lambda t: t == "echo: hi")
        await click(stack, "status")  # answered 200: a redelivery would be ignored the same
        await stack.say("echo after")
        await stack.wait_text(lambda t: t == "echo: after")
        await stack.settled()
        assert stack.texts() == ["echo: hi", "echo: after"]
