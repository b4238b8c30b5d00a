"""In-process fakes of what the receiver talks to: the engine and the inbound counter."""

from __future__ import annotations

from bridge.feishu.events import CardAction, CardActionReply, InboundMessage, MenuClick


class AcceptingSink:
    """Records what the receiver hands over; nothing here is refused or clicked."""

    def __init__(self) -> None:
        self.accepted: list[str] = []
        self.recalled: list[tuple[str, str]] = []
        self.clicks: list[tuple[str, str | None, bool]] = []  # event id, chat, admitted

    def accept(self, message: InboundMessage) -> None:
        self.accepted.append(message.message_id)

    def refuse(self, message: InboundMessage) -> None:
        raise AssertionError("nobody is refused here")

    async def card_action(self, action: CardAction) -> CardActionReply:
        raise AssertionError("no card here")

    def recall(self, conversation_key: str, message_id: str) -> None:
        self.recalled.append((conversation_key, message_id))

    def menu(self, click: MenuClick, chat_id: str | None, admitted: bool) -> None:
        self.clicks.append((click.event_id, chat_id, admitted))


class FateList(list[str]):
    """The inbound counter's fates, in the order counted."""

    def labels(self, fate: str) -> FateList:
        self.append(fate)
        return self

    def inc(self) -> None:
        pass
