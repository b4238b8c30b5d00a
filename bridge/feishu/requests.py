"""Every Feishu call the bridge makes, as a typed request: its API (method and path), its
body, what its answer holds, and whose it is (`CallTerms`: the chat, the budget's lane, a
token already paid for, whether it became moot). `FeishuSession.send` carries one through the
middlewares to the transport; a fake Feishu is a transport, not a copy of these.

The classes are the catalogue of what the bridge asks of Feishu (in the manner of aiogram's
methods); `FeishuClient`'s methods are the few conveniences over them (a text split into
several messages, a best-effort call that never raises)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Generic, TypeVar
from urllib.parse import quote

from bridge.core.delivery import Lane, Terms
from bridge.feishu.errors import ServerError
from bridge.feishu.json_codec import dumps

R = TypeVar("R")


@dataclass(frozen=True)
class BotInfo:
    open_id: str
    app_name: str


MESSAGES: Final = "/open-apis/im/v1/messages"
CARDS: Final = "/open-apis/cardkit/v1/cards"
BOT_INFO: Final = "/open-apis/bot/v3/info"
UUID_MAX_LEN: Final = 50  # Feishu dedups a message uuid for one hour; at most 50 characters


class Paid:
    """A budget token its caller already took, from `api`'s bucket (`CallBudget.try_take`,
    `take_unless`, `acquire`): the first try of the first request carrying it goes without
    waiting; any try after that (a retry, the next part of a long text) waits its turn."""

    __slots__ = ("_spent", "api")

    def __init__(self, api: str) -> None:
        self.api = api
        self._spent = False

    def spend(self) -> str | None:
        """The API it was taken from, the first time; None after."""
        if self._spent:
            return None
        self._spent = True
        return self.api


@dataclass(frozen=True, slots=True)
class CallTerms:
    """Whose a call is, carried on the request through every middleware: the chat it is
    for (a chat's sends are metered), the budget's lane (None: the API's default lane), a
    token already `paid`, and `moot`: asked before each retry (a post that became moot
    meanwhile is not retried: `delivery.Superseded`)."""

    chat: str | None = None
    lane: Lane | None = None
    paid: Paid | None = field(default=None, compare=False)
    moot: Callable[[], bool] | None = field(default=None, compare=False)

    @classmethod
    def of(
        cls, terms: Terms, *, paid: Paid | None = None, moot: Callable[[], bool] | None = None
    ) -> CallTerms:
        """A call made for a post the core gave `terms`: its chat, and the core's lane."""
        return cls(chat=terms.chat, lane=terms.lane, paid=paid, moot=moot)


NO_TERMS: Final = CallTerms()


def message_uuid(base: str, part: int = 1) -> str:
    """The uuid of part `part` of a message: `base`, then `base-2`, `base-3`…

    Feishu accepts at most 50 characters, so a longer result is replaced by a digest of
    `base` (stable, so a retry still dedups) followed by the same suffix."""
    if not base:
        raise ValueError("a message uuid is required (it is what makes retries safe)")
    suffix = "" if part == 1 else f"-{part}"
    candidate = base + suffix
    if len(candidate) <= UUID_MAX_LEN:
        return candidate
    digest = hashlib.sha256(base.encode("utf-8")).hexdigest()[: UUID_MAX_LEN - 8]
    return digest + suffix


def _id(value: str) -> str:
    return quote(value, safe="")


def data_of(answer: Mapping[str, Any]) -> dict[str, Any]:
    data = answer.get("data")
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True, slots=True, kw_only=True)
class FeishuRequest(Generic[R]):
    """One call. Subclasses say its `op` (its name in logs and metrics), `method`, `path`,
    `params`, `body` and how its answer's JSON becomes `R`."""

    op: ClassVar[str]
    method: ClassVar[str]
    # A refusal some callers expect (a missing scope) is logged lower by the session.
    failure_level: ClassVar[int] = logging.WARNING
    # Never raised to its caller, retried once at most and never through a rate limit, and
    # skipped while a rate limit's cool-down lasts (`session.Breaker`).
    best_effort: ClassVar[bool] = False
    terms: CallTerms = NO_TERMS

    @property
    def path(self) -> str:
        raise NotImplementedError

    def params(self) -> dict[str, str] | None:
        return None

    def body(self) -> dict[str, Any] | None:
        return None

    def answer(self, answer: dict[str, Any]) -> R:
        raise NotImplementedError

    def label(self) -> str:
        """Its name in logs and metrics."""
        return self.op


# --- messages -----------------------------------------------------------------------------


def _message_id(answer: dict[str, Any]) -> str:
    message_id = data_of(answer).get("message_id")
    if not isinstance(message_id, str):
        raise ServerError(0, "message response without data.message_id")
    return message_id


@dataclass(frozen=True, slots=True, kw_only=True)
class _Post(FeishuRequest[str]):
    """A new message: a reply to `reply_to` (in its thread when `in_thread`), or a post to
    `chat_id`. Its id is the answer."""

    uuid: str
    reply_to: str | None = None
    chat_id: str | None = None
    in_thread: bool = False
    method: ClassVar[str] = "POST"
    kind: ClassVar[str]

    def label(self) -> str:
        return ("reply_" if self.reply_to is not None else "send_") + self.kind

    @property
    def msg_type(self) -> str:
        raise NotImplementedError

    def content(self) -> str:
        """The message's content JSON, as Feishu wants it (a string)."""
        raise NotImplementedError

    @property
    def path(self) -> str:
        return MESSAGES if self.reply_to is None else f"{MESSAGES}/{_id(self.reply_to)}/reply"

    def params(self) -> dict[str, str] | None:
        return None if self.reply_to is not None else {"receive_id_type": "chat_id"}

    def body(self) -> dict[str, Any]:
        if self.reply_to is not None:
            return {
                "msg_type": self.msg_type,
                "content": self.content(),
                "reply_in_thread": self.in_thread,
                "uuid": self.uuid,
            }
        return {
            "receive_id": self.chat_id,
            "msg_type": self.msg_type,
            "content": self.content(),
            "uuid": self.uuid,
        }

    def answer(self, answer: dict[str, Any]) -> str:
        return _message_id(answer)


@dataclass(frozen=True, slots=True, kw_only=True)
class PostText(_Post):
    """One text message (`FeishuClient.reply_text` splits a long text into several)."""

    text: str
    op: ClassVar[str] = "send_text"
    kind: ClassVar[str] = "text"

    @property
    def msg_type(self) -> str:
        return "text"

    def content(self) -> str:
        return dumps({"text": self.text})


@dataclass(frozen=True, slots=True, kw_only=True)
class PostCard(_Post):
    """An interactive card, sent whole (`card`) or naming a card entity (`card_id`)."""

    card: dict[str, Any] | None = None
    card_id: str | None = None
    op: ClassVar[str] = "send_card"

    def label(self) -> str:
        kind = "card" if self.card_id is None else "card_entity"
        return ("reply_" if self.reply_to is not None else "send_") + kind

    @property
    def msg_type(self) -> str:
        return "interactive"

    def content(self) -> str:
        if self.card_id is not None:
            return dumps({"type": "card", "data": {"card_id": self.card_id}})
        return dumps(self.card)


@dataclass(frozen=True, slots=True, kw_only=True)
class PostFile(_Post):
    """An uploaded image or file, posted by its key (`FileTransfer.upload`)."""

    file_type: str  # "image" or "file"
    key: dict[str, Any]  # {"image_key": …} or {"file_key": …}
    op: ClassVar[str] = "reply_file"

    def label(self) -> str:
        return f"reply_{self.file_type}"

    @property
    def msg_type(self) -> str:
        return self.file_type

    def content(self) -> str:
        return json.dumps(self.key)


@dataclass(frozen=True, slots=True)
class TextToUser(FeishuRequest[tuple[str, str]]):
    """A short line to a user's private chat with the bot (receive_id_type=open_id), which
    need not be known yet: the answer is the message's id and the chat's."""

    open_id: str
    text: str
    uuid: str
    op: ClassVar[str] = "send_to_user"
    method: ClassVar[str] = "POST"

    @property
    def path(self) -> str:
        return MESSAGES

    def params(self) -> dict[str, str]:
        return {"receive_id_type": "open_id"}

    def body(self) -> dict[str, Any]:
        content = dumps({"text": self.text})
        return {
            "receive_id": self.open_id,
            "msg_type": "text",
            "content": content,
            "uuid": self.uuid,
        }

    def answer(self, answer: dict[str, Any]) -> tuple[str, str]:
        data = data_of(answer)
        message_id, chat_id = data.get("message_id"), data.get("chat_id")
        if not isinstance(message_id, str) or not isinstance(chat_id, str) or not chat_id:
            raise ServerError(0, "message response without data.message_id and data.chat_id")
        return message_id, chat_id


@dataclass(frozen=True, slots=True)
class UpdateCard(FeishuRequest[None]):
    """PATCH an interactive card the bot sent (a whole card, not a card entity)."""

    message_id: str
    card: dict[str, Any]
    op: ClassVar[str] = "update_card"
    method: ClassVar[str] = "PATCH"

    @property
    def path(self) -> str:
        return f"{MESSAGES}/{_id(self.message_id)}"

    def body(self) -> dict[str, Any]:
        return {"content": dumps(self.card)}

    def answer(self, answer: dict[str, Any]) -> None:
        return None


@dataclass(frozen=True, slots=True)
class EditText(FeishuRequest[None]):
    """PUT a new text into a text message the bot sent (Feishu's message edit)."""

    message_id: str
    text: str
    op: ClassVar[str] = "edit_text"
    method: ClassVar[str] = "PUT"

    @property
    def path(self) -> str:
        return f"{MESSAGES}/{_id(self.message_id)}"

    def body(self) -> dict[str, Any]:
        return {"msg_type": "text", "content": dumps({"text": self.text})}

    def answer(self, answer: dict[str, Any]) -> None:
        return None


@dataclass(frozen=True, slots=True)
class UrgentApp(FeishuRequest[list[str]]):
    """Feishu's in-app urgent notification (加急) on a message the bot sent; the answer is
    the ids Feishu found invalid. Logged at INFO: its caller expects some refusals (the
    start-up probe, a missing scope) and says what they mean."""

    message_id: str
    open_ids: Sequence[str]
    op: ClassVar[str] = "urgent_app"
    method: ClassVar[str] = "PATCH"
    failure_level: ClassVar[int] = logging.INFO

    @property
    def path(self) -> str:
        return f"{MESSAGES}/{_id(self.message_id)}/urgent_app"

    def params(self) -> dict[str, str]:
        return {"user_id_type": "open_id"}

    def body(self) -> dict[str, Any]:
        return {"user_id_list": list(self.open_ids)}

    def answer(self, answer: dict[str, Any]) -> list[str]:
        invalid = data_of(answer).get("invalid_user_id_list")
        return [i for i in invalid if isinstance(i, str)] if isinstance(invalid, list) else []


@dataclass(frozen=True, slots=True)
class MessageContent(FeishuRequest["tuple[str, str] | None"]):
    """(msg_type, content) of a message in a chat the bot is in (a quoted one); None when
    Feishu will not say (recalled, not visible to the bot)."""

    message_id: str
    op: ClassVar[str] = "get_message"
    method: ClassVar[str] = "GET"

    @property
    def path(self) -> str:
        return f"{MESSAGES}/{_id(self.message_id)}"

    def answer(self, answer: dict[str, Any]) -> tuple[str, str] | None:
        items = data_of(answer).get("items") or []
        if not items or not isinstance(items[0], dict):
            return None
        item = items[0]
        content = (item.get("body") or {}).get("content")
        msg_type = item.get("msg_type")
        if not isinstance(content, str) or not isinstance(msg_type, str):
            return None
        return msg_type, content


# --- reactions (best effort: `FeishuClient` never lets them raise) ------------------------


@dataclass(frozen=True, slots=True)
class AddReaction(FeishuRequest["str | None"]):
    message_id: str
    emoji_type: str
    op: ClassVar[str] = "add_reaction"
    method: ClassVar[str] = "POST"
    failure_level: ClassVar[int] = logging.INFO
    best_effort: ClassVar[bool] = True

    @property
    def path(self) -> str:
        return f"{MESSAGES}/{_id(self.message_id)}/reactions"

    def body(self) -> dict[str, Any]:
        return {"reaction_type": {"emoji_type": self.emoji_type}}

    def answer(self, answer: dict[str, Any]) -> str | None:
        reaction_id = data_of(answer).get("reaction_id")
        return reaction_id if isinstance(reaction_id, str) else None


@dataclass(frozen=True, slots=True)
class RemoveReaction(FeishuRequest[bool]):
    message_id: str
    reaction_id: str
    op: ClassVar[str] = "remove_reaction"
    method: ClassVar[str] = "DELETE"
    failure_level: ClassVar[int] = logging.INFO
    best_effort: ClassVar[bool] = True

    @property
    def path(self) -> str:
        return f"{MESSAGES}/{_id(self.message_id)}/reactions/{_id(self.reaction_id)}"

    def answer(self, answer: dict[str, Any]) -> bool:
        return True


# --- card entities (CardKit) --------------------------------------------------------------
# A card entity is created from card JSON 2.0 and posted as a message that names it; from
# then on it is changed through CardKit with a `sequence` that grows with every change of
# that card. Feishu allows 10 changes a second per card; the caller spaces them.


@dataclass(frozen=True, slots=True)
class CreateCard(FeishuRequest[str]):
    card: dict[str, Any]
    op: ClassVar[str] = "create_card"
    method: ClassVar[str] = "POST"

    @property
    def path(self) -> str:
        return CARDS

    def body(self) -> dict[str, Any]:
        return {"type": "card_json", "data": dumps(self.card)}

    def answer(self, answer: dict[str, Any]) -> str:
        card_id = data_of(answer).get("card_id")
        if not isinstance(card_id, str) or not card_id:
            raise ServerError(0, "card create response without data.card_id")
        return card_id


@dataclass(frozen=True, slots=True, kw_only=True)
class _CardChange(FeishuRequest[None]):
    """One change of a card entity, with its `sequence` and the uuid that makes a retry of
    it count once."""

    card_id: str
    sequence: int

    @property
    def tail(self) -> str:
        return ""

    @property
    def path(self) -> str:
        return f"{CARDS}/{_id(self.card_id)}{self.tail}"

    def fields(self) -> dict[str, Any]:
        raise NotImplementedError

    def body(self) -> dict[str, Any]:
        uuid = f"{self.card_id[-32:]}-{self.sequence}"  # one change, whatever the retries
        return {**self.fields(), "sequence": self.sequence, "uuid": uuid}

    def answer(self, answer: dict[str, Any]) -> None:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateCardEntity(_CardChange):
    """The whole card anew."""

    card: dict[str, Any]
    op: ClassVar[str] = "update_card_entity"
    method: ClassVar[str] = "PUT"

    def fields(self) -> dict[str, Any]:
        return {"card": {"type": "card_json", "data": dumps(self.card)}}


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamCardText(_CardChange):
    """The whole text of one element; Feishu types out what was added."""

    element_id: str
    text: str
    op: ClassVar[str] = "stream_card_text"
    method: ClassVar[str] = "PUT"

    @property
    def tail(self) -> str:
        return f"/elements/{_id(self.element_id)}/content"

    def fields(self) -> dict[str, Any]:
        return {"content": self.text}


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateCardElement(_CardChange):
    """Replace one element (found by its `element_id`) with `element`."""

    element: dict[str, Any]
    op: ClassVar[str] = "update_card_element"
    method: ClassVar[str] = "PUT"

    @property
    def tail(self) -> str:
        return f"/elements/{_id(str(self.element['element_id']))}"

    def fields(self) -> dict[str, Any]:
        return {"element": dumps(self.element)}


@dataclass(frozen=True, slots=True, kw_only=True)
class PatchCardElement(_CardChange):
    """Change some properties of one element (its `content`, say)."""

    element_id: str
    partial: dict[str, Any]
    op: ClassVar[str] = "patch_card_element"
    method: ClassVar[str] = "PATCH"

    @property
    def tail(self) -> str:
        return f"/elements/{_id(self.element_id)}"

    def fields(self) -> dict[str, Any]:
        return {"partial_element": dumps(self.partial)}


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchUpdateCard(_CardChange):
    """CardKit's batch of element (and settings) actions, applied in order."""

    actions: list[dict[str, Any]]
    op: ClassVar[str] = "batch_update_card"
    method: ClassVar[str] = "POST"

    @property
    def tail(self) -> str:
        return "/batch_update"

    def fields(self) -> dict[str, Any]:
        return {"actions": dumps(self.actions)}


@dataclass(frozen=True, slots=True, kw_only=True)
class CardSettings(_CardChange):
    settings: dict[str, Any]
    op: ClassVar[str] = "card_settings"
    method: ClassVar[str] = "PATCH"

    @property
    def tail(self) -> str:
        return "/settings"

    def fields(self) -> dict[str, Any]:
        return {"settings": dumps(self.settings)}


# --- speech, the bot ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recognize(FeishuRequest[dict[str, Any]]):
    """One speech-recognition call (`speech.calls`: one file, or a piece of a stream)."""

    name: str
    api_path: str
    payload: dict[str, Any]
    method: ClassVar[str] = "POST"
    op: ClassVar[str] = "recognize_speech"

    def label(self) -> str:
        return self.name

    @property
    def path(self) -> str:
        return self.api_path

    def body(self) -> dict[str, Any]:
        return self.payload

    def answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        return answer


@dataclass(frozen=True, slots=True)
class GetBotInfo(FeishuRequest[BotInfo]):
    op: ClassVar[str] = "bot_info"
    method: ClassVar[str] = "GET"

    @property
    def path(self) -> str:
        return BOT_INFO

    def answer(self, answer: dict[str, Any]) -> BotInfo:
        bot = answer.get("bot")
        if not isinstance(bot, dict) or not isinstance(bot.get("open_id"), str):
            raise ServerError(0, "bot info response without bot.open_id")
        return BotInfo(open_id=bot["open_id"], app_name=str(bot.get("app_name", "")))
