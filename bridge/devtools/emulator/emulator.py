"""`FeishuEmulator`: the loopback Feishu that integration tests and `demo` talk to.

It serves Feishu's HTTP API (`server.OpenApi`) on a random 127.0.0.1 port, plays the Feishu
side of the webhook (`delivery.EventDelivery`), keeps the chat world (`chats.ChatWorld`), and
serves a small chat page (`page`). Tests drive it through the methods here and assert on the
typed records; `wait_for` wakes on every change, so no test polls or sleeps.

Time: Feishu's redelivery ladder (15 s, 5 min, 1 h, 6 h) and its 3-second answer deadline are
multiplied by `time_scale`. The deadlines never drop below `MIN_DEADLINE_S` unless given
explicitly, because a loaded CI machine can take a few hundred ms on a first request and a
spuriously "late" answer would make tests flaky; tests of the deadline itself pass
`deadline_seconds` / `card_deadline_seconds`.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import secrets
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar

from aiohttp import web

from bridge.devtools.emulator import events, page
from bridge.devtools.emulator.chats import ChatWorld, new_id
from bridge.devtools.emulator.delivery import (
    FEISHU_DEADLINE_S,
    FEISHU_REDELIVERY_LADDER_S,
    EventDelivery,
)
from bridge.devtools.emulator.faults import Fault, FaultKind, FaultPlan
from bridge.devtools.emulator.records import (
    ApiCall,
    CardCallbackResult,
    ChatMessage,
    DeliveredEvent,
    DeliveryAttempt,
    Envelope,
    Mention,
    Reaction,
    SenderType,
    Toast,
    UrlVerificationResult,
)
from bridge.devtools.emulator.server import OpenApi
from bridge.devtools.emulator.tokens import TokenIssuer

T = TypeVar("T")

MIN_DEADLINE_S = 0.5
# What the Feishu client shows when a card callback fails or is late.
CALLBACK_ERROR_TOAST = "出错了，请稍后重试"


def _loopback(host: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the emulator only listens on loopback, not {host!r}")
    return host


class FeishuEmulator:
    def __init__(
        self,
        *,
        app_id: str = "cli_emulator00000001",
        app_secret: str = "emulator-app-secret",
        encrypt_key: str = "",
        verification_token: str = "emulator-verification-token",
        webhook_url: str | None = None,
        time_scale: float = 1.0,
        deadline_seconds: float | None = None,
        card_deadline_seconds: float | None = None,
        redelivery_ladder_seconds: Sequence[float] = FEISHU_REDELIVERY_LADDER_S,
        token_ttl_seconds: int = 7200,
        idempotency_window_seconds: float = 3600.0,
        bot_name: str = "Presence Bot",
        user_name: str = "Emulated User",
        tenant_key: str | None = None,
        scenarios: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.app_id = app_id
        self.app_secret = app_secret  # a fake credential; exposed so tests can log in
        self.encrypt_key = encrypt_key
        self.verification_token = verification_token
        self.time_scale = time_scale
        self.bot_name = bot_name
        self.user_name = user_name
        self.tenant_key = tenant_key or secrets.token_hex(8)
        self.scenarios: tuple[str, ...] = tuple(scenarios)
        self.bot_open_id = new_id("ou_")
        self.default_user_open_id = new_id("ou_")
        self._host = _loopback(host)
        self._requested_port = port
        self._port: int | None = None
        self._webhook_url = webhook_url
        scaled_deadline = max(FEISHU_DEADLINE_S * time_scale, MIN_DEADLINE_S)
        self.card_deadline_seconds = card_deadline_seconds or scaled_deadline

        self._revision = 0
        self._change = asyncio.Event()
        self._closing = asyncio.Event()
        self._calls: list[ApiCall] = []
        self._callbacks: list[CardCallbackResult] = []
        self._faults = FaultPlan()
        self._tokens = TokenIssuer(app_id, app_secret, token_ttl_seconds, clock)
        self._world = ChatWorld(
            app_id=app_id,
            tenant_key=self.tenant_key,
            idempotency_window_seconds=idempotency_window_seconds,
            clock=clock,
            on_change=self._changed,
        )
        self._group_chat_id = self._world.open_chat("group").chat_id
        self._delivery = EventDelivery(
            encrypt_key=encrypt_key,
            ladder_seconds=[s * time_scale for s in redelivery_ladder_seconds],
            deadline_seconds=deadline_seconds or scaled_deadline,
            webhook_url=lambda: self._webhook_url,
            on_change=self._changed,
        )
        self._runner: web.AppRunner | None = None

    # --- lifecycle -----------------------------------------------------------------------
    async def __aenter__(self) -> FeishuEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the emulator is already running")
        self._closing.clear()
        api = OpenApi(
            world=self._world,
            tokens=self._tokens,
            faults=self._faults,
            bot_info=self._bot_info,
            record=self._record_call,
            closing=self._closing,
        )
        app = web.Application()
        app.router.add_route("*", "/open-apis/{tail:.*}", api.handle)
        page.add_routes(app, self)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((self._host, self._requested_port))
            site = web.SockSite(runner, sock)
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._port = int(sock.getsockname()[1])
        self._runner = runner
        await self._delivery.start()

    async def close(self) -> None:
        self._closing.set()  # ends held (timeout-fault) answers and page long-polls
        self._changed()
        await self._delivery.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- addresses -----------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        return self._port

    @property
    def url(self) -> str:
        """The base URL the bridge uses as its Feishu domain (FEISHU_DOMAIN)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def webhook_url(self) -> str | None:
        return self._webhook_url

    @webhook_url.setter
    def webhook_url(self, value: str | None) -> None:
        self._webhook_url = value

    @property
    def deadline_seconds(self) -> float:
        return self._delivery.deadline_seconds

    @property
    def p2p_chat_id(self) -> str:
        """The default user's private chat with the bot."""
        return self._world.open_chat("p2p", user_open_id=self.default_user_open_id).chat_id

    @property
    def group_chat_id(self) -> str:
        """A group chat the bot is in, used when a group message names no chat."""
        return self._group_chat_id

    # --- test hooks ----------------------------------------------------------------------
    def expire_tokens(self) -> None:
        """Every issued tenant_access_token becomes invalid (99991663 on next use)."""
        self._tokens.expire_all()

    def fail_next(
        self,
        method: str,
        path_pattern: str,
        kind: FaultKind | str,
        times: int = 1,
        *,
        code: int | None = None,
        msg: str | None = None,
        http_status: int | None = None,
        reset_seconds: int = 1,
        hold_seconds: float = 5.0,
        apply: bool = True,
    ) -> None:
        """The next `times` calls matching `method` ("*" for any) and the fnmatch glob
        `path_pattern` fail with `kind`. See `faults.FaultKind` for what each one answers."""
        self._faults.arm(
            Fault(
                kind=FaultKind(kind),
                method=method,
                path_pattern=path_pattern,
                code=code,
                msg=msg,
                http_status=http_status,
                reset_seconds=reset_seconds,
                hold_seconds=hold_seconds,
                apply=apply,
            ),
            times,
        )

    def clear_faults(self) -> None:
        self._faults.clear()

    def open_chat(
        self, chat_type: str = "p2p", *, chat_id: str | None = None, user_open_id: str | None = None
    ) -> str:
        """Make a chat exist (the bot can post to it); returns its chat_id."""
        if chat_type == "p2p" and user_open_id is None:
            user_open_id = self.default_user_open_id
        return self._world.open_chat(chat_type, chat_id, user_open_id).chat_id

    # --- records -------------------------------------------------------------------------
    def calls(self, path_prefix: str | None = None, method: str | None = None) -> list[ApiCall]:
        return [
            c
            for c in self._calls
            if (path_prefix is None or c.path.startswith(path_prefix))
            and (method is None or c.method == method.upper())
        ]

    def messages(
        self, chat_id: str | None = None, *, sender_type: SenderType | None = None
    ) -> list[ChatMessage]:
        """The chat timeline (user and bot messages in order), cards as currently patched."""
        return [
            m
            for m in self._world.timeline(chat_id)
            if sender_type is None or m.sender_type == sender_type
        ]

    def bot_messages(self, chat_id: str | None = None) -> list[ChatMessage]:
        return self.messages(chat_id, sender_type="app")

    def message(self, message_id: str) -> ChatMessage:
        return self._world.messages[message_id]

    def reactions(self, message_id: str) -> list[Reaction]:
        """The reactions currently on a message (removed ones are gone)."""
        return self._world.reactions_on(message_id)

    def deliveries(self, event_id: str | None = None) -> list[DeliveryAttempt]:
        return [a for a in self._delivery.attempts if event_id is None or a.event_id == event_id]

    @property
    def redeliveries_pending(self) -> int:
        """Events whose redelivery ladder is still running."""
        return self._delivery.redeliveries_pending

    def card_callbacks(self) -> list[CardCallbackResult]:
        return list(self._callbacks)

    @property
    def revision(self) -> int:
        """Bumped on every recorded change."""
        return self._revision

    async def wait_for(
        self,
        predicate: Callable[[], T | Literal[False] | None],
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> T:
        """Wait until `predicate()` is truthy and return its value; it is re-evaluated on
        every change the emulator records (never on a timer). The `timeout` parameter (rather
        than the caller's `asyncio.timeout`) lets the error name the last calls seen."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    result = predicate()
                    if result:
                        return result
                    await self._change.wait()
        except TimeoutError:
            recent = ", ".join(f"{c.method} {c.path} -> {c.status}" for c in self._calls[-5:])
            raise TimeoutError(
                f"condition not met within {timeout}s (last calls: {recent or 'none'})"
            ) from None

    async def wait_revision(self, since: int, max_wait: float) -> int:
        """Wait until the revision passes `since` (for the page's long-poll)."""
        try:
            async with asyncio.timeout(max_wait):
                while self._revision <= since and not self._closing.is_set():
                    await self._change.wait()
        except TimeoutError:
            pass
        return self._revision

    # --- the user's side -----------------------------------------------------------------
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
        attempt = await self._delivery.push(payload)
        return DeliveredEvent(
            event_id=payload["header"]["event_id"],
            message_id=message.message_id,
            chat_id=message.chat_id,
            payload=payload,
            first_attempt=attempt,
        )

    async def redeliver(self, event_id: str) -> DeliveryAttempt:
        """Push an already-sent event again, as Feishu's redelivery does (same event_id)."""
        return await self._delivery.redeliver(event_id)

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
        result = self._apply_callback_answer(message_id, operator, value, attempt, body)
        self._callbacks.append(result)
        self._changed()
        return result

    # --- internals -----------------------------------------------------------------------
    def _apply_callback_answer(
        self,
        message_id: str,
        operator: str,
        value: Mapping[str, Any],
        attempt: DeliveryAttempt,
        body: str,
    ) -> CardCallbackResult:
        def failed(error: str, response: Any = None) -> CardCallbackResult:
            return CardCallbackResult(
                event_id=attempt.event_id,
                message_id=message_id,
                operator_open_id=operator,
                value=dict(value),
                ok=False,
                status=attempt.status,
                latency_ms=attempt.latency_ms,
                toast=Toast("error", CALLBACK_ERROR_TOAST),
                card_replaced=False,
                response=response,
                error=error,
            )

        if not attempt.ok:
            return failed(f"{attempt.outcome} (status {attempt.status})")
        try:
            response = json.loads(body) if body.strip() else {}
        except ValueError:
            return failed("the answer is not JSON")
        if not isinstance(response, dict):
            return failed("the answer is not a JSON object", response)
        toast = _toast(response.get("toast"))
        replaced = False
        card = response.get("card")
        if isinstance(card, Mapping) and card.get("type") == "raw":
            data = card.get("data")
            if not isinstance(data, Mapping):
                return failed("card.data must be a card JSON object", response)
            self._world.replace_card(message_id, json.dumps(data, ensure_ascii=False))
            replaced = True
        return CardCallbackResult(
            event_id=attempt.event_id,
            message_id=message_id,
            operator_open_id=operator,
            value=dict(value),
            ok=True,
            status=attempt.status,
            latency_ms=attempt.latency_ms,
            toast=toast,
            card_replaced=replaced,
            response=response,
        )

    def _bot_info(self) -> Mapping[str, Any]:
        return {
            "activate_status": 2,
            "app_name": self.bot_name,
            "avatar_url": "",
            "ip_white_list": [],
            "open_id": self.bot_open_id,
        }

    def _record_call(self, call: ApiCall) -> None:
        self._calls.append(call)
        self._changed()

    def _changed(self) -> None:
        # A fresh Event per revision: everyone waiting on the old one wakes exactly once.
        self._revision += 1
        self._change.set()
        self._change = asyncio.Event()

    @staticmethod
    def _derived_id(prefix: str, open_id: str) -> str:
        return prefix + hashlib.sha256(open_id.encode()).hexdigest()[:32]


def _toast(raw: Any) -> Toast | None:
    if not isinstance(raw, Mapping):
        return None
    content = raw.get("content")
    if not isinstance(content, str):
        i18n = raw.get("i18n")
        if isinstance(i18n, Mapping) and i18n:
            content = str(i18n.get("zh_cn") or next(iter(i18n.values())))
        else:
            content = ""
    return Toast(str(raw.get("type") or "info"), content)
