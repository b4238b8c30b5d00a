"""Restart recovery looks only at what predates this process: a message the new process
already took (webhook events can arrive while it is still starting) is not run twice."""

from __future__ import annotations

from bridge.i18n import Translator
from tests.integration.stack import Stack

t = Translator("zh_CN")


async def test_recovery_skips_what_this_process_already_took(stack: Stack) -> None:
    service = stack.demo.service
    started = service.readiness.started_at
    chat = stack.emu.open_chat("p2p")
    # Two messages that exist in the chat but were never delivered to this process.
    webhook, stack.emu.webhook_url = stack.emu.webhook_url, None
    before = await stack.emu.send_user_message("hello again", chat_id=chat)
    after = await stack.emu.send_user_message("taken already", chat_id=chat)
    stack.emu.webhook_url = webhook
    # The journal: one from before this process started, one from after its start.
    store = service.store
    await store.journal_message(chat, before.message_id, "ou_x", chat, "hello again", started - 60)
    await store.journal_message(chat, after.message_id, "ou_x", chat, "taken already", started + 1)

    await service.engine.recover(before=started)
    await stack.wait_text(lambda x: x == "echo: hello again", chat_id=chat)
    await stack.settled()

    assert stack.texts(chat) == [t("recovery.resumed"), "echo: hello again"]
