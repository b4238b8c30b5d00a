"""The user's side of the emulator: what a person does in Feishu (write, click a card) and
what Feishu's servers then do to the bridge (push the event, redeliver it, verify the URL).
A mixin of `FeishuEmulator`, which holds the state named below."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bridge.devtools.emulator import events
from bridge.devtools.emulator.callbacks import apply_callback_answer
from bridge.devtools.emulator.chats import ChatWorld
from bridge.devtools.emulator.clips import SPOKEN_TRANSCRIPT, spoken_clip
from bridge.devtools.emulator.delivery import EventDelivery
from bridge.devtools.emulator.records import (
    CardCallbackResult,
    ChatMessage,
    DeliveredEvent,
    DeliveryAttempt,
    Envelope,
    Mention,
    UrlVerificationResult,
)
from bridge.devtools.emulator.speech import SpeechRecognition


class UserSide:
    # Set by FeishuEmulator.__init__.
    app_id: str
    tenant_key: str
    verification_token: str
    bot_open_id: str
    bot_name: str
    default_user_open_id: str
    user_name: str
    card_deadline_seconds: float
    _world: ChatWorld
    _delivery: EventDelivery
    _group_chat_id: str
    _webhook_url: str | None
    _callbacks: list[CardCallbackResult]
    _changed: Callable[[], None]
    speech: SpeechRecognition

    async def send_user_message(
        self,
        text: str = "",
        *,
        chat_id: str | None = None,
        chat_type: str = "p2p",
        sender_open_id: str | None = None,
        mentions: Sequence[Mention] = (),
        mention_bot: bool = False,
        message_type: str = "text",
        content: Mapping[str, Any] | str | None = None,
        thread_id: str | None = None,
        root_id: str | None = None,
        parent_id: str | None = None,
    ) -> DeliveredEvent:
        """A user writes in a chat: the message is added to the chat (so the bot can reply to
        its message_id) and `im.message.receive_v1` is pushed; returns after the first push.
        `mention_bot` prefixes the text with an @-mention of the bot, as a group user does."""
        sender = sender_open_id or self.default_user_open_id
        if chat_id is None and chat_type == "group":
            chat_id = self._group_chat_id
        chat = self._world.open_chat(chat_type, chat_id, sender if chat_type == "p2p" else None)
        entries: list[dict[str, Any]] = []
        if mention_bot:
            entries.append(
                events.mention_entry("@_user_1", self.bot_open_id, self.bot_name, self.tenant_key)
            )
            if "@_user_1" not in text:
                text = f"@_user_1 {text}"
        for mention in mentions:
            key = mention.key or f"@_user_{len(entries) + 1}"
            entries.append(
                events.mention_entry(
                    key,
                    mention.open_id,
                    mention.name,
                    self.tenant_key,
                    union_id=mention.union_id,
                    user_id=mention.user_id,
                )
            )
        if content is None:
            body = json.dumps({"text": text}, ensure_ascii=False)
        elif isinstance(content, str):
            body = content
        else:
            body = json.dumps(content, ensure_ascii=False)
        if parent_id is not None and root_id is None:
            parent = self._world.messages.get(parent_id)
            root_id = (parent.root_id or parent.message_id) if parent else parent_id
        message = self._world.add_user_message(
            chat=chat,
            sender_open_id=sender,
            msg_type=message_type,
            content=body,
            mentions=entries,
            root_id=root_id,
            parent_id=parent_id,
            thread_id=thread_id,
        )
        payload = events.message_receive(
            message,
            token=self.verification_token,
            app_id=self.app_id,
            tenant_key=self.tenant_key,
            union_id=self._derived_id("on_", sender),
            user_id=self._derived_id("", sender)[:8],
        )
        return await self._push(payload, message)

    async def send_user_file(
        self,
        data: bytes,
        *,
        kind: str = "file",
        name: str = "report.txt",
        mime: str = "text/plain",
        **options: Any,
    ) -> DeliveredEvent:
        """A user sends an image (`kind` image), a file, an audio or a video (media): the
        bytes are uploaded and served by the message-resource API for this message only."""
        key = self._world.add_resource(data, mime, kind)
        content: dict[str, Any]
        if kind == "image":
            content = {"image_key": key}
        elif kind == "audio":
            content = {"file_key": key, "duration": 1000}
        else:
            content = {"file_key": key, "file_name": name}
            if kind == "media":
                content.update(duration=1000, image_key="")
        return await self.send_user_message(message_type=kind, content=content, **options)

    async def send_user_voice(
        self, clip: bytes | None = None, *, transcript: str = SPOKEN_TRANSCRIPT, **options: Any
    ) -> DeliveredEvent:
        """A user holds the button and speaks: `clip` (Ogg Opus, as Feishu stores a voice;
        by default espeak-ng saying SPOKEN_TRANSCRIPT) goes as an audio message with its
        duration, and `transcript` is what recognition will hear in it ("": nothing)."""
        clip = spoken_clip() if clip is None else clip
        seconds = self.speech.expect(clip, transcript)
        key = self._world.add_resource(clip, "audio/ogg", "audio")
        content = {"file_key": key, "duration": round(seconds * 1000)}
        return await self.send_user_message(message_type="audio", content=content, **options)

    def upload_image(self, data: bytes, mime: str = "image/png") -> str:
        """An image key for a post the test builds itself (`send_user_message` with a post)."""
        return self._world.add_resource(data, mime, "image")

    async def recall_message(self, message_id: str) -> DeliveredEvent:
        """The user takes a message back: it is marked recalled in the chat (replies to it
        fail) and `im.message.recalled_v1` is pushed."""
        message = self._world.recall(message_id)
        payload = events.message_recalled(
            message, token=self.verification_token, app_id=self.app_id, tenant_key=self.tenant_key
        )
        return await self._push(payload, message)

    async def click_menu(
        self, event_key: str, operator_open_id: str | None = None
    ) -> DeliveryAttempt | None:
        """A user clicks an item of the bot's custom menu (shown in their private chat with
        the bot): `application.bot.menu_v6` with the item's `event_key` is pushed, and
        redelivered like any event when the push fails. Returns the first attempt (its
        `event_id` names the event for `redeliver`); None while no webhook URL is set."""
        operator = operator_open_id or self.default_user_open_id
        payload = events.bot_menu(
            event_key=event_key,
            operator_open_id=operator,
            operator_name=self.user_name if operator == self.default_user_open_id else "",
            union_id=self._derived_id("on_", operator),
            user_id=self._derived_id("", operator)[:8],
            token=self.verification_token,
            app_id=self.app_id,
            tenant_key=self.tenant_key,
            create_ms=int(time.time() * 1000),
        )
        return await self._delivery.push(payload)

    async def _push(self, payload: dict[str, Any], message: ChatMessage) -> DeliveredEvent:
        """Push an event about `message`; returns after the first attempt."""
        attempt = await self._delivery.push(payload)
        return DeliveredEvent(
            event_id=payload["header"]["event_id"],
            message_id=message.message_id,
            chat_id=message.chat_id,
            payload=payload,
            first_attempt=attempt,
        )

    async def redeliver(self, event_id: str, webhook_url: str | None = None) -> DeliveryAttempt:
        """Push an already-sent event again, as Feishu's redelivery does (same event_id);
        to `webhook_url` when given (another bridge instance behind the balancer)."""
        return await self._delivery.redeliver(event_id, webhook_url)

    def build_envelope(self, payload: Mapping[str, Any]) -> Envelope:
        """The exact request Feishu would send for `payload` (encrypted and signed when an
        encrypt key is set) — tamper with it and hand it to `post_raw`."""
        return self._delivery.seal(payload)

    async def post_raw(
        self,
        body: bytes | Envelope,
        headers: Mapping[str, str] | None = None,
        *,
        event_id: str = "",
    ) -> DeliveryAttempt:
        """POST raw bytes to the webhook (recorded as a manual attempt)."""
        if isinstance(body, Envelope):
            envelope = Envelope(body.body, dict(headers or body.headers))
        else:
            envelope = Envelope(body, dict(headers or {"Content-Type": "application/json"}))
        return await self._delivery.post_raw(envelope, event_id=event_id)

    async def verify_url(self, challenge: str | None = None) -> UrlVerificationResult:
        """Feishu's `url_verification` handshake; ok when the challenge is echoed with 200."""
        challenge = challenge or secrets.token_urlsafe(16)
        envelope = self._delivery.seal(events.url_verification(challenge, self.verification_token))
        attempt = await self._delivery.post_raw(envelope, event_type="url_verification")
        echoed: Any = None
        try:
            echoed = json.loads(attempt.response_body).get("challenge")
        except (ValueError, AttributeError):
            echoed = None
        return UrlVerificationResult(
            ok=attempt.status == 200 and echoed == challenge,
            challenge=challenge,
            status=attempt.status,
            response_body=attempt.response_body,
        )

    async def click_card(
        self,
        message_id: str,
        value: Mapping[str, Any],
        operator_open_id: str | None = None,
        *,
        tag: str = "button",
        form_value: Mapping[str, Any] | None = None,
    ) -> CardCallbackResult:
        """A user clicks a button on a card the bot posted: `card.action.trigger` is pushed and
        must be answered with 200 within the card deadline. The answer's toast is shown and a
        `{"card": {"type": "raw", "data": …}}` replaces the card in the chat."""
        message = self._world.messages.get(message_id)
        if message is None or message.msg_type != "interactive":
            raise ValueError(f"{message_id!r} is not an interactive card in any chat")
        if self._webhook_url is None:
            raise RuntimeError("set webhook_url before clicking cards")
        operator = operator_open_id or self.default_user_open_id
        payload = events.card_action(
            message=message,
            value=value,
            operator_open_id=operator,
            tag=tag,
            form_value=form_value,
            token=self.verification_token,
            app_id=self.app_id,
            tenant_key=self.tenant_key,
            create_ms=int(time.time() * 1000),
        )
        attempt, body = await self._delivery.call(payload, self.card_deadline_seconds)
        result = apply_callback_answer(self._world, message_id, operator, value, attempt, body)
        self._callbacks.append(result)
        self._changed()
        return result

    @staticmethod
    def _derived_id(prefix: str, open_id: str) -> str:
        return prefix + hashlib.sha256(open_id.encode()).hexdigest()[:32]
