"""The receiver gives an audio message its kind by BRIDGE_VOICE before the journal (so a
restart recovers it the same way): words to hear, refused, or a file; nothing else changes."""

from __future__ import annotations

import pytest

from bridge.engine.intake import journaled_input
from bridge.feishu.events import AttachmentRef, BotIdentity, InboundMessage
from bridge.receiver import AccessPolicy, Receiver
from bridge.store import MemoryStore
from tests.unit.receiver_fakes import AcceptingSink

NOW = 1_800_000_000.0
AUDIO = AttachmentRef(kind="audio", key="file_v3_a", resource_type="file")
MEDIA = AttachmentRef(kind="media", key="file_v3_m", resource_type="file")


class Keeping(AcceptingSink):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[InboundMessage] = []

    def accept(self, message: InboundMessage) -> None:
        super().accept(message)
        self.messages.append(message)


def message(mid: str, message_type: str, ref: AttachmentRef) -> InboundMessage:
    return InboundMessage(
        event_id=f"ev_{mid}",
        message_id=mid,
        chat_id="oc_p",
        chat_type="p2p",
        sender_open_id="ou_alice",
        message_type=message_type,
        attachments=(ref,),
    )


@pytest.mark.parametrize(
    ("kind", "expected"), [("voice", "voice"), ("voice_off", "voice_off"), ("audio", "audio")]
)
async def test_an_audio_message_gets_the_mode_s_kind_in_the_journal_too(
    kind: str, expected: str
) -> None:
    sink = Keeping()
    async with MemoryStore() as store:
        receiver = Receiver(
            store=store,
            sink=sink,
            policy=AccessPolicy(allow_all=True),
            bot=BotIdentity("ou_bot"),
            clock=lambda: NOW,
            voice_kind=lambda: kind,
        )
        await receiver.on_message(message("om_1", "audio", AUDIO))
        await receiver.on_message(message("om_2", "media", MEDIA))
        journaled = await store.message("om_1")
    assert [m.attachments[0].kind for m in sink.messages] == [expected, "media"]
    assert journaled is not None
    recovered = journaled_input(journaled)
    assert [a.kind for a in recovered.attachments] == [expected]  # type: ignore[union-attr]
