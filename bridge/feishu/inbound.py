"""The inbound port: where both intake modes (webhook, long connection) hand events."""

from __future__ import annotations

from typing import Protocol

from bridge.feishu.events import (
    CardAction,
    CardActionReply,
    InboundMessage,
    MenuClick,
    MessageRecall,
)


class RetryLater(Exception):
    """A transient reason to have Feishu deliver this event again later (the intake answers
    503, or an error to the long connection), e.g. the bot's identity is not known yet."""


class InboundHandler(Protocol):
    async def on_message(self, message: InboundMessage) -> None:
        """Journal the message and schedule its handling; returns in milliseconds, so the
        intake can answer Feishu well inside its 3-second limit. Never raises for bad input;
        raises `RetryLater` for a message it cannot judge yet."""

    async def on_card_action(self, action: CardAction) -> CardActionReply:
        """Decide a button click; must return within Feishu's 3-second callback limit."""

    async def on_recall(self, recall: MessageRecall) -> None:
        """A message was recalled: drop it if it waits, stop the round it started. Returns
        in milliseconds; never raises for bad input."""

    async def on_menu(self, click: MenuClick) -> None:
        """A click in the bot's custom menu: the command it names, for the clicker's private
        chat. Returns in milliseconds; never raises for bad input."""
