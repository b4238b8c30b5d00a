"""Raw Feishu event JSON → typed inbound models.

One entry point, `parse_event`, used by both intake modes (the webhook hands it the decrypted
request body, the long connection the SDK's payload). It returns exactly one of

* `InboundMessage` — an `im.message.receive_v1` event (schema 2.0), any message type;
* `CardAction` — a `card.action.trigger` callback (schema 2.0);
* `UrlVerification` — the request-URL check, to be answered with its challenge;
* `IgnoredEvent` — a well-formed event the bridge does not handle (never a crash);

and raises `EventParseError(reason)` for a payload that is not a Feishu event at all or lacks
what its type requires. The reason is short and never contains message text.

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

from collections.abc import Mapping
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bridge.feishu.content import is_bot, message_attachments, message_text
from bridge.feishu.errors import EventParseError
from bridge.feishu.json_codec import MAX_DEPTH, decode_json, load_json
from bridge.feishu.models import CardAction, InboundMessage, Mention, MessageRecall

MESSAGE_RECEIVE: Final = "im.message.receive_v1"
CARD_ACTION_TRIGGER: Final = "card.action.trigger"
MESSAGE_RECALLED: Final = "im.message.recalled_v1"
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


ParsedEvent = InboundMessage | MessageRecall | CardAction | UrlVerification | IgnoredEvent


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
        return _message(header, event, bot_open_id=bot_open_id, bot_name=bot_name)
    if header.event_type == CARD_ACTION_TRIGGER:
        return _card_action(header, event)
    if header.event_type == MESSAGE_RECALLED:
        return _recall(header, event)
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


__all__ = [
    "CARD_ACTION_TRIGGER",
    "MAX_DEPTH",
    "MESSAGE_RECALLED",
    "MESSAGE_RECEIVE",
    "URL_VERIFICATION",
    "EventParseError",  # defined in errors.py; re-exported for the intake modules
    "IgnoredEvent",
    "UrlVerification",
    "decode_json",
    "event_token",
    "event_type_of",
    "parse_event",
]
