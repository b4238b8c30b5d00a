"""The receiver and a recall event: the journaled message's conversation is told once; a
recall of a message the bridge never took, or a redelivered recall, changes nothing."""

from __future__ import annotations

from bridge.feishu.events import BotIdentity, InboundMessage, MessageRecall, parse_event
from bridge.receiver import AccessPolicy, Receiver
from bridge.store import MemoryStore
from tests.unit.receiver_fakes import AcceptingSink, FateList

NOW = 1_800_000_000.0


async def test_a_recall_reaches_the_conversation_of_the_journaled_message_once() -> None:
    sink, fates = AcceptingSink(), FateList()
    async with MemoryStore() as store:
        receiver = Receiver(
            store=store,
            sink=sink,
            policy=AccessPolicy(allow_all=True),
            bot=BotIdentity("ou_bot"),
            clock=lambda: NOW,
            fates=fates,
        )
        await receiver.on_message(
            InboundMessage(
                event_id="ev_1",
                message_id="om_1",
                chat_id="oc_g",
                chat_type="group",
                thread_id="omt_7",
                sender_open_id="ou_alice",
                message_type="text",
                text="hello",
                mentions_bot=True,
            )
        )
        recall = MessageRecall(event_id="ev_r", message_id="om_1", chat_id="oc_g")
        await receiver.on_recall(recall)
        await receiver.on_recall(recall)  # Feishu delivers it again
        await receiver.on_recall(MessageRecall(event_id="ev_x", message_id="om_never"))
    assert sink.recalled == [("oc_g:omt_7", "om_1")]
    assert fates[-3:] == ["recalled", "duplicate", "recall_unknown"]


def test_the_recall_event_parses() -> None:
    payload = {
        "schema": "2.0",
        "header": {"event_id": "ev_r", "event_type": "im.message.recalled_v1", "token": "t"},
        "event": {
            "message_id": "om_1",
            "chat_id": "oc_g",
            "recall_time": "1800000000000",
            "recall_type": "message_owner",
        },
    }
    assert parse_event(payload) == MessageRecall(
        event_id="ev_r", message_id="om_1", chat_id="oc_g", recall_type="message_owner"
    )
