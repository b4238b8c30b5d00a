"""A Feishu event, raw JSON → its typed, frozen model.

One entry point, `parse_event`, used by both intake modes (the webhook hands it the decrypted
request body, the long connection the SDK's payload). It returns exactly one of

* `InboundMessage` — an `im.message.receive_v1` event (schema 2.0), any message type;
* `CardAction` — a `card.action.trigger` callback (schema 2.0);
* `MessageRecall` — an `im.message.recalled_v1` event;
* `MenuClick` — an `application.bot.menu_v6` event (a click in the bot's custom menu);
* `UrlVerification` — the request-URL check, to be answered with its challenge;
* `IgnoredEvent` — a well-formed event the bridge does not handle (never a crash);

and raises `EventParseError(reason)` for a payload that is not a Feishu event at all or lacks
what its type requires. The reason is short and never contains message text.

What a message says, as plain text (`message_text`): text and post content flattened, the
bot's own @-mention removed, every other mention resolved to "@Name"; what it carries
(`message_attachments`): its images and files. The models are frozen; parsing is pure.

Mentions. Feishu puts a placeholder per mention into the text (`@_user_1`) and lists the
mentions beside it. The bot's own placeholder is removed, every other one becomes `@Name`,
and `@_all` becomes `@all`. Which mention is the bot:

* `bot_open_id` known (the normal case: the composition root asks the bot-info API once) —
  a mention is the bot exactly when its open_id matches. This is the only reliable test.
* `bot_open_id` unknown, `bot_name` known — a mention whose name equals the bot's name counts
  as the bot. Names are not unique, so this is a fallback for the minutes before bot info
  arrives, not a design.
* both unknown — no mention counts as the bot (`mentions_bot=False`). In a group this makes
  the bridge stay quiet rather than answer every message that mentions anybody; a private
  chat does not need a mention, so it is unaffected.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bridge.feishu.errors import EventParseError
from bridge.feishu.json_codec import decode_json, load_json


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


class MenuClick(_Frozen):
    """One `application.bot.menu_v6` event: a click in the bot's custom menu, shown in the
    user's private chat with the bot. It names no chat and no message: only who clicked and
    the `event_key` the menu item was configured with."""

    event_id: str
    operator_open_id: str
    event_key: str
    app_id: str | None = None
    create_time_ms: int = 0


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


# --- what a message says ---

ALL_PLACEHOLDER: Final = "@_all"
ALL_TEXT: Final = "@all"


def message_text(
    message_type: str, content: str, mentions: tuple[Mention, ...], bot_keys: set[str]
) -> str:
    """The text of a text or post message; "" for every other type (image, file, audio,
    media, sticker, interactive, share_chat, system, …), which the receiver answers from
    `message_type`."""
    if message_type == "text":
        raw_text = _content_object(content).get("text", "")
        if not isinstance(raw_text, str):
            raise EventParseError("text content has no string `text`")
        return _resolve_mentions(raw_text, mentions, bot_keys)
    if message_type == "post":
        return _flatten_post(_content_object(content), mentions, bot_keys)
    return ""


# Message types that are one attachment, and the resource `type` Feishu serves them as.
_ONE_ATTACHMENT: Final = {"image": "image", "file": "file", "audio": "file", "media": "file"}


def message_attachments(message_type: str, content: str) -> tuple[AttachmentRef, ...]:
    """The images and files a message carries: an image, file, audio or media message is
    one; a post carries its images and media. Content that does not say is no attachment."""
    if message_type not in _ONE_ATTACHMENT and message_type != "post":
        return ()
    try:
        value = _content_object(content)
    except EventParseError:
        return ()
    if message_type == "post":
        found: list[AttachmentRef] = []
        for paragraph in _post_body(value).get("content") or []:
            for element in paragraph if isinstance(paragraph, list) else []:
                ref = _post_attachment(element)
                if ref is not None:
                    found.append(ref)
        return tuple(found)
    key_field = "image_key" if message_type == "image" else "file_key"
    key = value.get(key_field)
    if not isinstance(key, str) or not key:
        return ()
    name = value.get("file_name")
    return (
        AttachmentRef(
            kind=message_type,
            key=key,
            resource_type=_ONE_ATTACHMENT[message_type],
            name=name if isinstance(name, str) else "",
        ),
    )


def _post_attachment(element: Any) -> AttachmentRef | None:
    if not isinstance(element, Mapping):
        return None
    if element.get("tag") == "img" and isinstance(element.get("image_key"), str):
        return AttachmentRef(kind="image", key=element["image_key"], resource_type="image")
    if element.get("tag") == "media" and isinstance(element.get("file_key"), str):
        return AttachmentRef(kind="media", key=element["file_key"], resource_type="file")
    return None


@dataclass
class BotIdentity:
    """Who the bot is, as Feishu knows it: unknown at first, filled in once the bot-info API
    answers. The listeners and the receiver read it for every event (who was @-mentioned)."""

    open_id: str | None = None
    name: str | None = None
    # The other bots this bridge serves (its other apps), in the same groups: a message
    # that @-mentions several of them names them first, and to each that is no content.
    siblings: list[BotIdentity] = field(default_factory=list, repr=False)

    def sibling_names(self) -> frozenset[str]:
        return frozenset(bot.name for bot in self.siblings if bot.name)


def is_bot(mention: Mention, bot_open_id: str | None, bot_name: str | None) -> bool:
    if bot_open_id:
        return mention.open_id == bot_open_id
    if bot_name:
        return mention.name == bot_name
    return False


def _content_object(content: str) -> dict[str, Any]:
    # The same decoder as the body's: depth-checked, lone surrogates repaired.
    return decode_json(content, "message content") if content else {}


def _unaddressed(text: str, bots: frozenset[str]) -> str:
    """`text` without the @-mentions of `bots` it starts with ("@Claude @Codex history": the
    bots it was addressed to, which each get it as "history")."""
    found = True
    while found:
        found = False
        for name in bots:
            if text.startswith(f"@{name}") and text[len(name) + 1 : len(name) + 2] in ("", " "):
                text, found = text[len(name) + 1 :].lstrip(), True
    return text


def _resolve_mentions(text: str, mentions: Iterable[Mention], bot_keys: set[str]) -> str:
    # Longest keys first so "@_user_1" never eats the front of "@_user_10".
    for mention in sorted(mentions, key=lambda m: len(m.key), reverse=True):
        if not mention.key:
            continue
        if mention.key in bot_keys:
            text = text.replace(f"{mention.key} ", "").replace(mention.key, "")
        elif mention.key == ALL_PLACEHOLDER:
            text = text.replace(mention.key, ALL_TEXT)
        else:
            text = text.replace(mention.key, f"@{mention.name}" if mention.name else "@")
    return text.replace(ALL_PLACEHOLDER, ALL_TEXT).strip()


_LOCALE_PREFERENCE: Final = ("zh_cn", "en_us", "ja_jp")


def _post_body(content: Mapping[str, Any]) -> Mapping[str, Any]:
    """Received posts are usually `{"title", "content"}`; some paths wrap them in a locale
    key (`zh_cn`, `en_us`, …) or in `post`. Pick the first body that has content."""
    if "content" in content or "title" in content:
        return content
    inner = content.get("post")
    if isinstance(inner, Mapping):
        return _post_body(inner)
    for locale in _LOCALE_PREFERENCE:
        body = content.get(locale)
        if isinstance(body, Mapping):
            return body
    for body in content.values():
        if isinstance(body, Mapping) and ("content" in body or "title" in body):
            return body
    return {}


def _flatten_post(
    content: Mapping[str, Any], mentions: tuple[Mention, ...], bot_keys: set[str]
) -> str:
    body = _post_body(content)
    lines: list[str] = []
    title = body.get("title")
    if isinstance(title, str) and title.strip():
        lines.append(title.strip())
    paragraphs = body.get("content") or []
    if not isinstance(paragraphs, list):
        raise EventParseError("post content is not a list of paragraphs")
    by_key = {m.key: m for m in mentions}
    by_open_id = {m.open_id: m for m in mentions if m.open_id}
    for paragraph in paragraphs:
        if not isinstance(paragraph, list):
            raise EventParseError("post paragraph is not a list")
        parts = [_post_element(el, by_key, by_open_id, bot_keys) for el in paragraph]
        line = "".join(parts).strip()
        if line:
            lines.append(line)
    return "\n".join(lines)


def _post_element(
    element: Any,
    by_key: Mapping[str, Mention],
    by_open_id: Mapping[str, Mention],
    bot_keys: set[str],
) -> str:
    if not isinstance(element, Mapping):
        return ""
    tag = element.get("tag")
    text = element.get("text")
    text = text if isinstance(text, str) else ""
    if tag in ("text", "md", "code_block"):
        if tag == "code_block":
            return f"\n{text}\n"
        return text
    if tag == "a":
        href = element.get("href")
        if isinstance(href, str) and href and href != text:
            return f"{text} ({href})" if text else href
        return text
    if tag == "at":
        user_id = element.get("user_id")
        user_id = user_id if isinstance(user_id, str) else ""
        if user_id in ("all", ALL_PLACEHOLDER):
            return ALL_TEXT
        mention = by_key.get(user_id) or by_open_id.get(user_id)
        if mention is not None and mention.key in bot_keys:
            return ""
        name = element.get("user_name")
        if not isinstance(name, str) or not name:
            name = mention.name if mention is not None else ""
        return f"@{name}" if name else ""
    if tag == "emotion":
        emoji = element.get("emoji_type")
        return f"[{emoji}]" if isinstance(emoji, str) and emoji else ""
    # img, media, hr and future tags carry no text.
    return ""


# --- parsing ---

MESSAGE_RECEIVE: Final = "im.message.receive_v1"
CARD_ACTION_TRIGGER: Final = "card.action.trigger"
MESSAGE_RECALLED: Final = "im.message.recalled_v1"
BOT_MENU: Final = "application.bot.menu_v6"
URL_VERIFICATION: Final = "url_verification"


class UrlVerification(BaseModel):
    """The request-URL check Feishu sends when the URL is saved in the console."""

    model_config = ConfigDict(frozen=True)

    challenge: str
    token: str | None = None


class IgnoredEvent(BaseModel):
    """A well-formed payload the bridge does not act on; `reason` is safe to log."""

    model_config = ConfigDict(frozen=True)

    event_type: str
    reason: str
    event_id: str | None = None


ParsedEvent = (
    InboundMessage | MessageRecall | CardAction | MenuClick | UrlVerification | IgnoredEvent
)


# --- wire models (tolerant: unknown fields ignored, everything optional that may be absent) ---


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Header(_Wire):
    event_id: str = ""
    event_type: str = ""
    token: str | None = None
    create_time: str | int | None = None
    app_id: str | None = None
    tenant_key: str | None = None


class _UserId(_Wire):
    open_id: str | None = None
    union_id: str | None = None
    user_id: str | None = None


class _Sender(_Wire):
    sender_id: _UserId = Field(default_factory=_UserId)
    sender_type: str = "user"


class _WireMention(_Wire):
    key: str
    id: _UserId = Field(default_factory=_UserId)
    name: str = ""


class _Message(_Wire):
    message_id: str
    chat_id: str
    chat_type: str = ""
    message_type: str
    content: str = ""
    root_id: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    create_time: str | int | None = None
    mentions: list[_WireMention] | None = None


class _MessageEvent(_Wire):
    sender: _Sender = Field(default_factory=_Sender)
    message: _Message


class _RecallEvent(_Wire):
    message_id: str = ""
    chat_id: str = ""
    recall_type: str = ""


class _Operator(_Wire):
    open_id: str | None = None
    user_id: str | None = None
    union_id: str | None = None


class _MenuOperator(_Wire):
    operator_name: str = ""
    operator_id: _UserId = Field(default_factory=_UserId)


class _MenuEvent(_Wire):
    operator: _MenuOperator = Field(default_factory=_MenuOperator)
    event_key: str = ""
    timestamp: str | int | None = None


class _Action(_Wire):
    value: dict[str, Any] | str | None = None
    tag: str | None = None


class _CardContext(_Wire):
    open_message_id: str | None = None
    open_chat_id: str | None = None


class _CardEvent(_Wire):
    operator: _Operator = Field(default_factory=_Operator)
    token: str = ""
    action: _Action = Field(default_factory=_Action)
    context: _CardContext = Field(default_factory=_CardContext)
    # Older callback payloads carried these at the top of `event`.
    open_message_id: str | None = None
    open_chat_id: str | None = None


# --- public API ----------------------------------------------------------------------------


def event_token(payload: Mapping[str, Any]) -> str | None:
    """The verification token a payload carries: `header.token` in schema 2.0, `token` in
    schema 1.0 events and in `url_verification`."""
    header = payload.get("header")
    if isinstance(header, Mapping) and isinstance(header.get("token"), str):
        return str(header["token"])
    token = payload.get("token")
    return token if isinstance(token, str) else None


def event_type_of(payload: Mapping[str, Any]) -> str:
    """Best-effort type for logs: `header.event_type`, `event.type` (v1) or top-level `type`."""
    header = payload.get("header")
    if isinstance(header, Mapping) and isinstance(header.get("event_type"), str):
        return str(header["event_type"])
    event = payload.get("event")
    if isinstance(event, Mapping) and isinstance(event.get("type"), str):
        return str(event["type"])
    kind = payload.get("type")
    return kind if isinstance(kind, str) else ""


def parse_event(
    payload: Mapping[str, Any],
    *,
    bot_open_id: str | None = None,
    bot_name: str | None = None,
    sibling_names: frozenset[str] = frozenset(),
) -> ParsedEvent:
    """Turn one decrypted Feishu payload into a typed model (see the module docstring)."""
    if not isinstance(payload, Mapping):
        raise EventParseError("payload is not a JSON object")
    if payload.get("type") == URL_VERIFICATION:
        challenge = payload.get("challenge")
        if not isinstance(challenge, str):
            raise EventParseError("url_verification without a challenge")
        token = payload.get("token")
        return UrlVerification(challenge=challenge, token=token if isinstance(token, str) else None)

    if "schema" not in payload:
        if "uuid" in payload and isinstance(payload.get("event"), Mapping):
            return IgnoredEvent(
                event_type=event_type_of(payload) or "unknown",
                reason="schema 1.0 events are not handled; subscribe to the 2.0 version",
            )
        if "action" in payload and "open_message_id" in payload:
            return IgnoredEvent(
                event_type="card.action.legacy",
                reason="legacy card callback; configure the card.action.trigger callback",
            )
        raise EventParseError("neither a schema 2.0 event nor url_verification")

    header = _validate(_Header, payload.get("header"), "header")
    if not header.event_type:
        raise EventParseError("header.event_type is missing")
    event = payload.get("event")
    if header.event_type == MESSAGE_RECEIVE:
        message = _message(header, event, bot_open_id=bot_open_id, bot_name=bot_name)
        if sibling_names and message.mentions_bot:
            message = message.model_copy(update={"text": _unaddressed(message.text, sibling_names)})
        return message
    if header.event_type == CARD_ACTION_TRIGGER:
        return _card_action(header, event)
    if header.event_type == MESSAGE_RECALLED:
        return _recall(header, event)
    if header.event_type == BOT_MENU:
        return _menu_click(header, event)
    return IgnoredEvent(
        event_type=header.event_type,
        reason="event type not handled",
        event_id=header.event_id or None,
    )


# --- messages ------------------------------------------------------------------------------


def _message(
    header: _Header, raw_event: Any, *, bot_open_id: str | None, bot_name: str | None
) -> InboundMessage:
    event = _validate(_MessageEvent, raw_event, "event")
    if not header.event_id:
        raise EventParseError("header.event_id is missing")
    msg = event.message
    sender_open_id = event.sender.sender_id.open_id
    if not sender_open_id:
        raise EventParseError("event.sender.sender_id.open_id is missing")

    mentions = tuple(
        Mention(key=m.key, open_id=m.id.open_id, name=m.name) for m in msg.mentions or ()
    )
    bot_keys = {m.key for m in mentions if is_bot(m, bot_open_id, bot_name)}
    text = message_text(msg.message_type, msg.content, mentions, bot_keys)
    attachments = message_attachments(msg.message_type, msg.content)

    return InboundMessage(
        event_id=header.event_id,
        message_id=msg.message_id,
        chat_id=msg.chat_id,
        chat_type=msg.chat_type,
        thread_id=msg.thread_id or None,
        root_id=msg.root_id or None,
        parent_id=msg.parent_id or None,
        sender_open_id=sender_open_id,
        sender_type=event.sender.sender_type,
        message_type=msg.message_type,
        text=text,
        mentions=mentions,
        mentions_bot=bool(bot_keys),
        attachments=attachments,
        create_time_ms=_int_or_zero(msg.create_time),
        app_id=header.app_id or None,
    )


def _recall(header: _Header, raw_event: Any) -> MessageRecall:
    event = _validate(_RecallEvent, raw_event, "event")
    if not header.event_id:
        raise EventParseError("header.event_id is missing")
    if not event.message_id:
        raise EventParseError("event.message_id is missing")
    return MessageRecall(
        event_id=header.event_id,
        message_id=event.message_id,
        chat_id=event.chat_id,
        recall_type=event.recall_type,
    )


# --- the bot menu --------------------------------------------------------------------------


def _menu_click(header: _Header, raw_event: Any) -> MenuClick:
    event = _validate(_MenuEvent, raw_event, "event")
    if not header.event_id:
        raise EventParseError("header.event_id is missing")
    operator = event.operator.operator_id.open_id
    if not operator:
        raise EventParseError("event.operator.operator_id.open_id is missing")
    if not event.event_key.strip():
        raise EventParseError("event.event_key is missing")
    return MenuClick(
        event_id=header.event_id,
        operator_open_id=operator,
        event_key=event.event_key,
        app_id=header.app_id or None,
        create_time_ms=_int_or_zero(header.create_time),
    )


# --- card callbacks ------------------------------------------------------------------------


def _card_action(header: _Header, raw_event: Any) -> CardAction:
    event = _validate(_CardEvent, raw_event, "event")
    if not header.event_id:
        raise EventParseError("header.event_id is missing")
    operator = event.operator.open_id
    if not operator:
        raise EventParseError("event.operator.open_id is missing")
    message_id = event.context.open_message_id or event.open_message_id
    if not message_id:
        raise EventParseError("event.context.open_message_id is missing")
    return CardAction(
        event_id=header.event_id,
        operator_open_id=operator,
        open_message_id=message_id,
        open_chat_id=event.context.open_chat_id or event.open_chat_id,
        value=_action_value(event.action.value),
        token=event.token,
    )


def _action_value(value: dict[str, Any] | str | None) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    # Cards of the 1.0 schema may carry a JSON string (or a bare string) as the value.
    try:
        decoded = load_json(value, "card value")
    except EventParseError:
        return {"value": value}
    return decoded if isinstance(decoded, dict) else {"value": decoded}


# --- helpers -------------------------------------------------------------------------------


_M = TypeVar("_M", bound=BaseModel)


def _validate(model: type[_M], raw: Any, where: str) -> _M:
    if not isinstance(raw, Mapping):
        raise EventParseError(f"{where} is missing or not an object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in err["loc"]) for err in exc.errors()})
        raise EventParseError(f"{where} is malformed ({', '.join(fields)})") from None


def _int_or_zero(value: str | int | None) -> int:
    if value is None:
        return 0
    try:
        return int(value)
    except ValueError:
        return 0
