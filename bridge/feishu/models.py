"""Typed, frozen inbound models. Parsers in `bridge.feishu.parse` build them from raw JSON."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Mention(_Frozen):
    key: str  # the placeholder in the text, e.g. "@_user_1"
    open_id: str | None = None
    name: str = ""


class AttachmentRef(_Frozen):
    """An image or file a message carries, fetched with the message-resource API."""

    kind: str  # image, file, audio, media
    key: str  # image_key or file_key
    resource_type: str  # the API's `type`: image or file
    name: str = ""  # the file's name as sent (files only)
    from_message: str = ""  # the message that carries it, when not this one (a quote-reply)


def refs_for_journal(refs: tuple[AttachmentRef, ...]) -> str:
    """Attachment refs as the journal keeps them (JSON; "" for none)."""
    return json.dumps([r.model_dump() for r in refs]) if refs else ""


def refs_from_journal(raw: str) -> tuple[AttachmentRef, ...]:
    """The journal's JSON back as refs; raises ValueError when it is not that."""
    return tuple(AttachmentRef.model_validate(item) for item in json.loads(raw or "[]"))


class InboundMessage(_Frozen):
    """One `im.message.receive_v1` event, reduced to what the bridge uses."""

    event_id: str
    message_id: str
    chat_id: str
    chat_type: Literal["p2p", "group"] | str
    thread_id: str | None = None
    root_id: str | None = None
    parent_id: str | None = None
    sender_open_id: str
    sender_type: str = "user"  # "user" or "app"
    message_type: str  # text, post, image, file, sticker, interactive, …
    # The text with @-mentions of the bot stripped and other mentions resolved to "@Name".
    text: str = ""
    mentions: tuple[Mention, ...] = ()
    mentions_bot: bool = False
    attachments: tuple[AttachmentRef, ...] = ()
    create_time_ms: int = 0
    app_id: str | None = None  # the event header's: the app Feishu delivered it for

    @property
    def conversation_key(self) -> str:
        """A p2p chat, or a group chat, or a topic thread inside a group, is one conversation.
        A quote-reply (root_id without thread_id) stays in its chat's conversation: it is
        how people answer the bot's question in a group."""
        if self.chat_type == "group" and self.thread_id:
            return f"{self.chat_id}:{self.thread_id}"
        return self.chat_id


class MessageRecall(_Frozen):
    """One `im.message.recalled_v1` event: a message was taken back in its chat."""

    event_id: str
    message_id: str
    chat_id: str = ""
    recall_type: str = ""  # message_owner, group_owner, group_manager, enterprise_manager


class CardAction(_Frozen):
    """One `card.action.trigger` callback (a button click on an interactive card)."""

    event_id: str
    operator_open_id: str
    open_message_id: str
    open_chat_id: str | None = None
    value: dict[str, Any] = Field(default_factory=dict)
    token: str = ""


class CardActionReply(_Frozen):
    """What the card callback answers within 3 s: an optional toast and an optional new card."""

    toast_type: Literal["info", "success", "error", "warning"] | None = None
    toast_text: str | None = None
    card: dict[str, Any] | None = None

    def to_response(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.toast_text is not None:
            body["toast"] = {"type": self.toast_type or "info", "content": self.toast_text}
        if self.card is not None:
            body["card"] = {"type": "raw", "data": self.card}
        return body
