"""The emulated Feishu world: chats, their message timelines, reactions and uuid dedup.

Pure in-memory logic with Feishu's validation rules; it raises `FeishuError` the way the real
API answers, and knows nothing about HTTP. `on_change` is called after every mutation so
waiters (tests, the chat page) wake up without polling.

Several apps share the world, and every call is one app's: a bot acts only in the chats it
is in (a group may hold several bots; a private chat is one person's with one bot, so the
same person has a different chat with each bot), changes only what it posted itself, and
knows people by its own open_ids (`people.People`).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bridge.devtools.emulator import codes
from bridge.devtools.emulator.emoji import EMOJI_TYPES
from bridge.devtools.emulator.people import People
from bridge.devtools.emulator.records import ChatMessage, Reaction

# msg_type values the im/v1 send API accepts.
MSG_TYPES = frozenset(
    {
        "text",
        "post",
        "image",
        "file",
        "audio",
        "media",
        "sticker",
        "interactive",
        "share_chat",
        "share_user",
    }
)


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Chat:
    chat_id: str
    chat_type: str  # "p2p" or "group"
    user_open_id: str | None = None  # the other party of a p2p chat (the person)
    bots: frozenset[str] = frozenset()  # the app_ids of the bots in it


class ChatWorld:
    def __init__(
        self,
        *,
        app_ids: Sequence[str],
        people: People,
        tenant_key: str,
        idempotency_window_seconds: float,
        clock: Callable[[], float],
        on_change: Callable[[], None],
    ) -> None:
        self.app_ids = tuple(app_ids)  # the first is the one a private chat has by default
        self.people = people
        self.tenant_key = tenant_key
        self._window = idempotency_window_seconds
        self._clock = clock
        self._on_change = on_change
        self.chats: dict[str, Chat] = {}
        self.messages: dict[str, ChatMessage] = {}  # insertion order = timeline order
        self.reactions: dict[str, Reaction] = {}
        self.resources: dict[str, tuple[bytes, str]] = {}  # key -> (bytes, mime)
        # A group's members, as far as the emulator knows: whoever wrote there, and whoever
        # a test added (`add_members`). A p2p chat's member is its user.
        self._members: dict[str, set[str]] = {}
        # (app_id, uuid) -> (message_id, clock()): each app's requests are its own
        self._uuids: dict[tuple[str, str], tuple[str, float]] = {}

    # --- chats ---------------------------------------------------------------------------
    def open_chat(
        self,
        chat_type: str,
        chat_id: str | None = None,
        user_open_id: str | None = None,
        *,
        bots: Sequence[str] | None = None,
    ) -> Chat:
        """The chat, made when new: a group with `bots` (default: every app's), or the
        private chat of `user_open_id` (any app's open_id for them) with the one bot of
        `bots` (default: the first app's)."""
        if chat_type not in ("p2p", "group"):
            raise ValueError(f"chat_type must be 'p2p' or 'group', not {chat_type!r}")
        members = self._bots(chat_type, bots)
        person = self.people.person(user_open_id) if user_open_id is not None else None
        if chat_id is None and chat_type == "p2p" and person is not None:
            for chat in self.chats.values():
                if chat.chat_type == "p2p" and (chat.user_open_id, chat.bots) == (person, members):
                    return chat
        chat_id = chat_id or new_id("oc_")
        existing = self.chats.get(chat_id)
        if existing is not None:
            return existing
        chat = Chat(chat_id, chat_type, person if chat_type == "p2p" else None, members)
        self.chats[chat_id] = chat
        return chat

    def _bots(self, chat_type: str, bots: Sequence[str] | None) -> frozenset[str]:
        if bots is None:
            return frozenset(self.app_ids[:1] if chat_type == "p2p" else self.app_ids)
        unknown = [b for b in bots if b not in self.app_ids]
        if unknown:
            raise ValueError(f"no app {unknown[0]!r} in the emulator (apps: {self.app_ids})")
        if chat_type == "p2p" and len(set(bots)) != 1:
            raise ValueError("a private chat is with one bot")
        return frozenset(bots)

    def add_bots(self, chat_id: str, app_ids: Sequence[str]) -> Chat:
        """More bots join a group."""
        chat = self.chats[chat_id]
        if chat.chat_type != "group":
            raise ValueError("only a group takes more bots")
        chat = replace(chat, bots=chat.bots | self._bots("group", app_ids))
        self.chats[chat_id] = chat
        self._on_change()
        return chat

    def add_members(self, chat_id: str, open_ids: Sequence[str]) -> None:
        people = {self.people.person(open_id) for open_id in open_ids}
        self._members.setdefault(chat_id, set()).update(people)

    def members_of(self, chat_id: str) -> frozenset[str]:
        """The people in the chat (as the first app knows them)."""
        chat = self.chats.get(chat_id)
        own = {chat.user_open_id} if chat is not None and chat.user_open_id else set()
        return frozenset(own | self._members.get(chat_id, set()))

    def in_chat(self, app_id: str, chat_id: str) -> bool:
        chat = self.chats.get(chat_id)
        return chat is not None and app_id in chat.bots

    def visible(self, app_id: str, message_id: str) -> ChatMessage:
        """A message of a chat `app_id`'s bot is in (230001 for any other: the bot cannot
        see it, as if it did not exist)."""
        message = self.messages.get(message_id)
        if message is None or not self.in_chat(app_id, message.chat_id):
            raise codes.MESSAGE_INVALID_PARAM.with_detail(f"invalid message_id: {message_id}")
        return message

    def touched(self) -> None:
        """Something of the world changed outside the messages (an urgent notification)."""
        self._on_change()

    # --- messages ------------------------------------------------------------------------
    def add_user_message(
        self,
        *,
        chat: Chat,
        sender_open_id: str,
        msg_type: str,
        content: str,
        mentions: Sequence[Mapping[str, Any]],
        root_id: str | None,
        parent_id: str | None,
        thread_id: str | None,
    ) -> ChatMessage:
        self.add_members(chat.chat_id, (sender_open_id,))
        message = self._store(
            chat,
            sender_type="user",
            sender_id=sender_open_id,
            msg_type=msg_type,
            content=content,
            root_id=root_id,
            parent_id=parent_id,
            thread_id=thread_id,
            mentions=tuple(mentions),
        )
        self._on_change()
        return message

    def send(
        self, app_id: str, receive_id_type: str | None, body: Mapping[str, Any]
    ) -> ChatMessage:
        """POST /im/v1/messages."""
        if receive_id_type is None:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("receive_id_type is required")
        receive_id = body.get("receive_id")
        if not isinstance(receive_id, str) or not receive_id:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("receive_id is required")
        msg_type, content, uuid = self._validated(body)
        hit = self._dedup(app_id, uuid)
        if hit is not None:
            return hit
        if receive_id_type == "chat_id":
            chat = self.chats.get(receive_id)
            if chat is None or app_id not in chat.bots:
                raise codes.BOT_NOT_IN_CHAT.with_detail(f"chat {receive_id} not found")
        elif receive_id_type == "open_id":
            chat = self.open_chat("p2p", user_open_id=receive_id, bots=(app_id,))
        else:
            raise codes.MESSAGE_INVALID_PARAM.with_detail(
                f"receive_id_type {receive_id_type} is not emulated (use chat_id or open_id)"
            )
        return self._post_bot(app_id, chat, msg_type, content, uuid, None, None, None)

    def reply(self, app_id: str, message_id: str, body: Mapping[str, Any]) -> ChatMessage:
        """POST /im/v1/messages/{message_id}/reply."""
        msg_type, content, uuid = self._validated(body)
        hit = self._dedup(app_id, uuid)
        if hit is not None:
            return hit
        parent = self.visible(app_id, message_id)
        if parent.recalled:
            raise codes.MESSAGE_RECALLED
        chat = self.chats[parent.chat_id]
        in_thread = bool(body.get("reply_in_thread")) or parent.thread_id is not None
        thread_id = (parent.thread_id or new_id("omt_")) if in_thread else None
        root_id = parent.root_id or parent.message_id
        return self._post_bot(app_id, chat, msg_type, content, uuid, root_id, message_id, thread_id)

    def patch_card(self, app_id: str, message_id: str, body: Mapping[str, Any]) -> ChatMessage:
        """PATCH /im/v1/messages/{message_id}: only the bot's own interactive cards."""
        content = body.get("content")
        if not isinstance(content, str):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("content is required")
        current = self.visible(app_id, message_id)
        if current.msg_type != "interactive":
            raise codes.MESSAGE_INVALID_PARAM.with_detail("This message is NOT a card.")
        if current.app_id != app_id:
            raise codes.MESSAGE_INVALID_PARAM.with_detail("the bot did not send this card")
        self._check_content("interactive", content)
        return self.replace_card(message_id, content)

    def edit_text(self, app_id: str, message_id: str, body: Mapping[str, Any]) -> ChatMessage:
        """PUT /im/v1/messages/{message_id}: the bot edits a text it sent."""
        current = self.visible(app_id, message_id)
        if current.app_id != app_id or current.msg_type != "text":
            raise codes.MESSAGE_INVALID_PARAM.with_detail("only the bot's own texts are edited")
        if body.get("msg_type") != "text" or not isinstance(body.get("content"), str):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("msg_type text and content needed")
        content = str(body["content"])
        self._check_content("text", content)
        return self.replace_card(message_id, content)

    def add_resource(self, data: bytes, mime: str, kind: str) -> str:
        """An image or file a user uploads with a message; its key."""
        key = new_id("img_v3_" if kind == "image" else "file_v3_")
        self.resources[key] = (data, mime)
        return key

    def resource(
        self, app_id: str, message_id: str, key: str, resource_type: str
    ) -> tuple[bytes, str]:
        """GET …/messages/{message_id}/resources/{key}?type=image|file."""
        message = self.visible(app_id, message_id)
        if resource_type not in ("image", "file"):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("type must be image or file")
        if key not in self.resources or key not in message.content:
            raise codes.RESOURCE_NOT_IN_MESSAGE
        if key.startswith("img_") != (resource_type == "image"):
            raise codes.RESOURCE_TYPE_MISMATCH
        return self.resources[key]

    def recall(self, message_id: str) -> ChatMessage:
        """The sender takes a message back."""
        recalled = replace(self.messages[message_id], recalled=True, update_time_ms=now_ms())
        self.messages[message_id] = recalled
        self._on_change()
        return recalled

    def replace_card(self, message_id: str, content: str) -> ChatMessage:
        updated = replace(
            self.messages[message_id], content=content, update_time_ms=now_ms(), updated=True
        )
        self.messages[message_id] = updated
        self._on_change()
        return updated

    def _validated(self, body: Mapping[str, Any]) -> tuple[str, str, str | None]:
        msg_type = body.get("msg_type")
        content = body.get("content")
        uuid = body.get("uuid")
        if not isinstance(msg_type, str) or not msg_type:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("msg_type is required")
        if not isinstance(content, str):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("content is required (a JSON string)")
        if uuid is not None and (not isinstance(uuid, str) or len(uuid) > codes.UUID_MAX_CHARS):
            raise codes.FIELD_VALIDATION_FAILED.with_detail(
                f"uuid must be a string of at most {codes.UUID_MAX_CHARS} characters"
            )
        if msg_type not in MSG_TYPES:
            raise codes.MESSAGE_INVALID_PARAM.with_detail(f"invalid msg_type: {msg_type}")
        self._check_content(msg_type, content)
        return msg_type, content, uuid or None

    @staticmethod
    def _check_content(msg_type: str, content: str) -> None:
        limit = codes.TEXT_LIMIT_BYTES if msg_type == "text" else codes.CARD_LIMIT_BYTES
        if len(content.encode("utf-8")) > limit:
            raise codes.MESSAGE_TOO_LONG
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        if msg_type == "interactive":
            if not isinstance(data, dict):
                raise codes.CARD_CONTENT_FAILED.with_detail(
                    "ErrCode: 200621; ErrMsg: parse card json err, please check whether the "
                    "card json is correct"
                )
        elif msg_type == "text":
            if not isinstance(data, dict) or not isinstance(data.get("text"), str):
                raise codes.MESSAGE_INVALID_PARAM.with_detail("invalid message content")
        elif not isinstance(data, dict):
            raise codes.MESSAGE_INVALID_PARAM.with_detail("invalid message content")

    def _dedup(self, app_id: str, uuid: str | None) -> ChatMessage | None:
        """Feishu: requests with the same uuid post at most one message within an hour."""
        if uuid is None:
            return None
        seen = self._uuids.get((app_id, uuid))
        if seen is None or self._clock() - seen[1] > self._window:
            return None
        return self.messages.get(seen[0])

    def _post_bot(
        self,
        app_id: str,
        chat: Chat,
        msg_type: str,
        content: str,
        uuid: str | None,
        root_id: str | None,
        parent_id: str | None,
        thread_id: str | None,
    ) -> ChatMessage:
        message = self._store(
            chat,
            sender_type="app",
            sender_id=app_id,
            msg_type=msg_type,
            content=content,
            root_id=root_id,
            parent_id=parent_id,
            thread_id=thread_id,
            uuid=uuid,
        )
        if uuid is not None:
            self._uuids[app_id, uuid] = (message.message_id, self._clock())
        self._on_change()
        return message

    def _store(self, chat: Chat, **fields: Any) -> ChatMessage:
        """A new message in `chat`, stamped now, from a user or the bot."""
        stamp = now_ms()
        message = ChatMessage(
            message_id=new_id("om_"),
            chat_id=chat.chat_id,
            chat_type=chat.chat_type,
            create_time_ms=stamp,
            update_time_ms=stamp,
            **fields,
        )
        self.messages[message.message_id] = message
        return message

    # --- reactions -----------------------------------------------------------------------
    def add_reaction(self, app_id: str, message_id: str, body: Mapping[str, Any]) -> Reaction:
        reaction_type = body.get("reaction_type")
        emoji = reaction_type.get("emoji_type") if isinstance(reaction_type, Mapping) else None
        if not isinstance(emoji, str) or not emoji:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("reaction_type.emoji_type is required")
        message = self.messages.get(message_id)
        if message is None or not self.in_chat(app_id, message.chat_id):
            raise codes.REACTION_MESSAGE_NOT_FOUND
        if emoji not in EMOJI_TYPES:
            raise codes.REACTION_TYPE_INVALID
        for existing in self.reactions.values():
            # One operator holds one reaction of a type per message; adding it again is a no-op.
            if (existing.message_id, existing.emoji_type, existing.operator_id) == (
                message_id,
                emoji,
                app_id,
            ):
                return existing
        reaction = Reaction(
            reaction_id=secrets.token_urlsafe(18),
            message_id=message_id,
            emoji_type=emoji,
            operator_id=app_id,
            operator_type="app",
            action_time_ms=now_ms(),
        )
        self.reactions[reaction.reaction_id] = reaction
        self._on_change()
        return reaction

    def remove_reaction(self, app_id: str, message_id: str, reaction_id: str) -> Reaction:
        message = self.messages.get(message_id)
        if message is None or not self.in_chat(app_id, message.chat_id):
            raise codes.REACTION_MESSAGE_NOT_FOUND
        reaction = self.reactions.get(reaction_id)
        if reaction is None or reaction.operator_id != app_id:  # only its own reactions
            raise codes.REACTION_ID_INVALID
        if reaction.message_id != message_id:
            raise codes.REACTION_NOT_OF_MESSAGE
        del self.reactions[reaction_id]
        self._on_change()
        return reaction

    # --- queries -------------------------------------------------------------------------
    def timeline(self, chat_id: str | None = None) -> list[ChatMessage]:
        return [m for m in self.messages.values() if chat_id is None or m.chat_id == chat_id]

    def reactions_on(self, message_id: str) -> list[Reaction]:
        return [r for r in self.reactions.values() if r.message_id == message_id]


def message_data(
    message: ChatMessage, tenant_key: str, user_open_id: Callable[[str], str] = str
) -> dict[str, Any]:
    """The `data` object of send/reply answers, shaped like Feishu's; a user sender as
    `user_open_id` gives their open_id (the asking app's)."""
    data: dict[str, Any] = {"message_id": message.message_id}
    if message.root_id:
        data["root_id"] = message.root_id
    if message.parent_id:
        data["parent_id"] = message.parent_id
    if message.thread_id:
        data["thread_id"] = message.thread_id
    data.update(
        {
            "msg_type": message.msg_type,
            "create_time": str(message.create_time_ms),
            "update_time": str(message.update_time_ms),
            "deleted": False,
            "updated": message.updated,
            "chat_id": message.chat_id,
            "sender": {
                "id": message.sender_id if message.is_bot else user_open_id(message.sender_id),
                "id_type": "app_id" if message.sender_type == "app" else "open_id",
                "sender_type": message.sender_type,
                "tenant_key": tenant_key,
            },
            "body": {"content": message.content},
        }
    )
    return data


def reaction_data(reaction: Reaction) -> dict[str, Any]:
    return {
        "reaction_id": reaction.reaction_id,
        "operator": {"operator_id": reaction.operator_id, "operator_type": reaction.operator_type},
        "action_time": str(reaction.action_time_ms),
        "reaction_type": {"emoji_type": reaction.emoji_type},
    }
