"""The user's side of the emulator: what a person does in Feishu (write, click a card) and
what Feishu's servers then do to the bridge (push the event, redeliver it, verify the URL).
A mixin of `FeishuEmulator`, which holds the state named below.

With several apps, each event goes to the apps that Feishu would tell, each sealed with its
keys and naming people by its open_ids: a private chat's message to its one bot; a group's
to each bot in it that is @-mentioned, or that reads all group messages (`group_messages`);
a card click to the app whose card it is; a menu click to the app whose menu it is.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from bridge.devtools.emulator import events
from bridge.devtools.emulator.apps import HostedApp
from bridge.devtools.emulator.callbacks import apply_callback_answer
from bridge.devtools.emulator.chats import Chat, ChatWorld
from bridge.devtools.emulator.clips import SPOKEN_TRANSCRIPT, spoken_clip
from bridge.devtools.emulator.people import People
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
    apps: dict[str, HostedApp]
    tenant_key: str
    default_user_open_id: str
    user_name: str
    card_deadline_seconds: float
    _world: ChatWorld
    _people: People
    _group_chat_id: str
    _callbacks: list[CardCallbackResult]
    _changed: Callable[[], None]
    speech: SpeechRecognition

    def app(self, app_id: str | None = None) -> HostedApp:
        """An app the emulator hosts; the first one (the single app of a one-app emulator)
        when `app_id` is None."""
        if app_id is None:
            return next(iter(self.apps.values()))
        try:
            return self.apps[app_id]
        except KeyError:
            raise KeyError(f"no app {app_id!r} in the emulator (apps: {list(self.apps)})") from None

    async def send_user_message(
        self,
        text: str = "",
        *,
        chat_id: str | None = None,
        chat_type: str = "p2p",
        sender_open_id: str | None = None,
        mentions: Sequence[Mention] = (),
        mention_bot: bool = False,
        mention_apps: Sequence[str] = (),
        app_id: str | None = None,
        message_type: str = "text",
        content: Mapping[str, Any] | str | None = None,
        thread_id: str | None = None,
        root_id: str | None = None,
        parent_id: str | None = None,
    ) -> DeliveredEvent:
        """A user writes in a chat: the message is added to the chat (so the bot can reply to
        its message_id) and `im.message.receive_v1` is pushed to each app that gets it (see
        the module); returns after the first pushes, the first app's event first.

        `app_id`: whose private chat (default: the first app's). `mention_bot` prefixes the
        text with an @-mention of that bot, as a group user does; `mention_apps` @-mentions
        these apps' bots (in a group: those bots are told even without reading all)."""
        sender = self._people.person(sender_open_id or self.default_user_open_id)
        if chat_id is None and chat_type == "group":
            chat_id = self._group_chat_id
        bots = (self.app(app_id).app_id,) if chat_type == "p2p" and app_id else None
        chat = self._world.open_chat(
            chat_type, chat_id, sender if chat_type == "p2p" else None, bots=bots
        )
        entries: list[dict[str, Any]] = []
        mentioned = [self.app(app_id).app_id] if mention_bot else []
        mentioned += [self.app(a).app_id for a in mention_apps if a not in mentioned]
        for bot in mentioned:
            key = f"@_user_{len(entries) + 1}"
            hosted = self.apps[bot]
            entries.append(
                events.mention_entry(key, hosted.bot_person, hosted.bot_name, self.tenant_key)
            )
        missing = [e["key"] for e in entries if e["key"] not in text]
        if missing:
            text = " ".join([*missing, text])
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

        def payload(app: HostedApp) -> dict[str, Any]:
            return events.message_receive(
                message,
                token=app.verification_token,
                app_id=app.app_id,
                tenant_key=self.tenant_key,
                sender_open_id=self._people.open_id(sender, app.app_id),
                union_id=People.union_id(sender),
                user_id=People.user_id(sender),
                mentions=[self._seen_by(app, entry) for entry in entries],
            )

        return await self._push(self._told(chat, entries), payload, message)

    def _told(self, chat: Chat, mentions: Sequence[Mapping[str, Any]]) -> list[HostedApp]:
        """The apps Feishu pushes a user's message in `chat` to, in the emulator's order."""
        bots = [app for app in self.apps.values() if app.app_id in chat.bots]
        if chat.chat_type == "p2p":
            return bots
        named = {self._people.person(str(m.get("id", {}).get("open_id", ""))) for m in mentions}
        return [app for app in bots if app.group_messages == "all" or app.bot_person in named]

    def _seen_by(self, app: HostedApp, entry: Mapping[str, Any]) -> dict[str, Any]:
        """A mention as `app` is told it: the person (or bot) by `app`'s open_id."""
        ids = dict(entry.get("id", {}))
        ids["open_id"] = self._people.translate(str(ids.get("open_id", "")), app.app_id)
        return {**entry, "id": ids}

    def open_id_in(self, app_id: str, open_id: str) -> str:
        """The open_id by which `app_id` knows the person (or bot) `open_id` names, whichever
        app's open_id that is."""
        return self._people.translate(open_id, self.app(app_id).app_id)

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
        fail) and `im.message.recalled_v1` is pushed to the apps the message was."""
        message = self._world.recall(message_id)
        told = self._told(self._world.chats[message.chat_id], message.mentions)

        def payload(app: HostedApp) -> dict[str, Any]:
            return events.message_recalled(
                message,
                token=app.verification_token,
                app_id=app.app_id,
                tenant_key=self.tenant_key,
            )

        return await self._push(told, payload, message)

    async def click_menu(
        self, event_key: str, operator_open_id: str | None = None, *, app_id: str | None = None
    ) -> DeliveryAttempt | None:
        """A user clicks an item of a bot's custom menu (shown in their private chat with
        the bot; `app_id`'s, default the first app's): `application.bot.menu_v6` with the
        item's `event_key` is pushed to that app, and redelivered like any event when the
        push fails. Returns the first attempt (its `event_id` names the event for
        `redeliver`); None while the app has nowhere to push to."""
        app = self.app(app_id)
        operator = self._people.person(operator_open_id or self.default_user_open_id)
        payload = events.bot_menu(
            event_key=event_key,
            operator_open_id=self._people.open_id(operator, app.app_id),
            operator_name=self.user_name if operator == self.default_user_open_id else "",
            union_id=People.union_id(operator),
            user_id=People.user_id(operator),
            token=app.verification_token,
            app_id=app.app_id,
            tenant_key=self.tenant_key,
            create_ms=int(time.time() * 1000),
        )
        return await app.delivery.push(payload)

    async def _push(
        self,
        apps: Sequence[HostedApp],
        payload: Callable[[HostedApp], dict[str, Any]],
        message: ChatMessage,
    ) -> DeliveredEvent:
        """Push an event about `message` to each of `apps`, at once as Feishu does (one
        bridge's slow answer holds up no other); returns after every first attempt."""
        payloads = [(app, payload(app)) for app in apps]
        attempts = await asyncio.gather(*(app.delivery.push(p) for app, p in payloads))
        pushed = [
            DeliveredEvent(
                event_id=p["header"]["event_id"],
                message_id=message.message_id,
                chat_id=message.chat_id,
                payload=p,
                first_attempt=attempt,
                app_id=app.app_id,
            )
            for (app, p), attempt in zip(payloads, attempts, strict=True)
        ]
        if not pushed:  # a group message no bot in the group is told of
            return DeliveredEvent("", message.message_id, message.chat_id, {}, None)
        return replace(pushed[0], others=tuple(pushed[1:]))

    async def redeliver(self, event_id: str, webhook_url: str | None = None) -> DeliveryAttempt:
        """Push an already-sent event again, as Feishu's redelivery does (same event_id);
        to `webhook_url` when given (another bridge instance behind the balancer)."""
        app = next((a for a in self.apps.values() if a.delivery.sent(event_id)), self.app())
        return await app.delivery.redeliver(event_id, webhook_url)

    def build_envelope(self, payload: Mapping[str, Any]) -> Envelope:
        """The exact request Feishu would send for `payload` (encrypted and signed when an
        encrypt key is set, with the keys of the app its header names) — tamper with it and
        hand it to `post_raw`."""
        header = payload.get("header")
        app_id = header.get("app_id") if isinstance(header, Mapping) else None
        app = self.apps.get(app_id) if isinstance(app_id, str) else None
        return (app or self.app()).delivery.seal(payload)

    async def post_raw(
        self,
        body: bytes | Envelope,
        headers: Mapping[str, str] | None = None,
        *,
        event_id: str = "",
        app_id: str | None = None,
    ) -> DeliveryAttempt:
        """POST raw bytes to an app's webhook (recorded as a manual attempt)."""
        if isinstance(body, Envelope):
            envelope = Envelope(body.body, dict(headers or body.headers))
        else:
            envelope = Envelope(body, dict(headers or {"Content-Type": "application/json"}))
        return await self.app(app_id).delivery.post_raw(envelope, event_id=event_id)

    async def verify_url(
        self, challenge: str | None = None, *, app_id: str | None = None
    ) -> UrlVerificationResult:
        """Feishu's `url_verification` handshake of an app's webhook URL; ok when the
        challenge is echoed with 200."""
        app = self.app(app_id)
        challenge = challenge or secrets.token_urlsafe(16)
        envelope = app.delivery.seal(events.url_verification(challenge, app.verification_token))
        attempt = await app.delivery.post_raw(envelope, event_type="url_verification")
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
        """A user clicks a button on a card a bot posted: `card.action.trigger` is pushed to
        that bot's app (and no other) and must be answered with 200 within the card
        deadline. The answer's toast is shown and a `{"card": {"type": "raw", "data": …}}`
        replaces the card in the chat."""
        message = self._world.messages.get(message_id)
        if message is None or message.msg_type != "interactive":
            raise ValueError(f"{message_id!r} is not an interactive card in any chat")
        app = self.apps.get(message.app_id or "") or self.app()
        if not app.delivery.reachable:
            raise RuntimeError("set webhook_url (or open a long connection) before clicking cards")
        operator = self._people.open_id(
            self._people.person(operator_open_id or self.default_user_open_id), app.app_id
        )
        payload = events.card_action(
            message=message,
            value=value,
            operator_open_id=operator,
            tag=tag,
            form_value=form_value,
            token=app.verification_token,
            app_id=app.app_id,
            tenant_key=self.tenant_key,
            create_ms=int(time.time() * 1000),
        )
        attempt, body = await app.delivery.call(payload, self.card_deadline_seconds)
        result = apply_callback_answer(self._world, message_id, operator, value, attempt, body)
        result = replace(result, app_id=app.app_id)
        self._callbacks.append(result)
        self._changed()
        return result
