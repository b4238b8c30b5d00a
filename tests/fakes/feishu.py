"""Feishu for unit tests, at the HTTP transport: the bridge's real `FeishuClient` (its
requests, session, retries, token and breaker) talks to it through httpx, in process, on the
test's own loop. Not a second implementation of the client: whatever the client sends,
`FakeFeishu` answers as Feishu's Open API does, and records.

- `calls`: every call in order (the token's aside, counted in `token_fetches`), each a `Call`
  named as the `FeishuApi` port names it (tests/fakes/feishu_calls.py), with its method,
  path, parsed body and the HTTP status it was answered with;
- `texts()`, `cards()`: what the chats were shown (the calls Feishu took, not one refused
  or still held); `ops()`: every call's (op, target); `shown(message)`: its reactions now;
- `hold(op)` parks calls of that op as they arrive (`entered` is set) until `release()`;
- `fail(op, error)` answers that op with a Feishu error (`Refusal`: HTTP status, code, msg;
  the client maps it as it maps Feishu's) or raises an exception in the transport (a
  broken connection, a bug), until `mend(op)`; `failed` is set at each such answer.

Message ids are `om_bot_1`, `om_bot_2`… in the order the messages are made; a repeated uuid
gets the first message's id again, as Feishu de-duplicates. `client()` builds the real
client over it, retrying without waiting."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bridge.devtools.emulator.codes import NOT_FOUND
from bridge.devtools.emulator.codes import FeishuError as Refusal
from bridge.feishu.client import TOKEN_PATH, FeishuClient
from bridge.feishu.http import FeishuHttp
from bridge.feishu.retry import RetryPolicy
from tests.fakes.feishu_calls import read_call

__all__ = ["DOMAIN", "Call", "FakeFeishu", "Refusal"]

DOMAIN = "https://open.feishu.fake"
TOKEN_SECONDS = 7200
PNG = b"\x89PNG\r\n\x1a\n"  # what a resource holds unless a test says otherwise
_MESSAGES_MADE = frozenset(
    {
        "reply_text",
        "send_text",
        "send_text_to_user",
        "reply_card",
        "send_card",
        "reply_card_entity",
        "reply_image",
        "reply_file",
    }
)
_CHANGES = frozenset(  # a message or card entity changed: nothing to answer but success
    {
        "update_card",
        "edit_text",
        "update_card_entity",
        "stream_card_text",
        "update_card_element",
        "patch_card_element",
        "batch_update_card",
        "card_settings",
    }
)


@dataclass
class Call:
    """One call as Feishu saw it. Two calls are equal by what they ask (op, target, text,
    card); how it went over the wire is kept beside it."""

    op: str
    target: str  # the message replied to, the chat, the card or message changed
    text: str = ""  # a text's, an emoji, a reaction id, a resource key, an element's content
    card: dict[str, Any] | None = None
    method: str = field(default="", compare=False)
    path: str = field(default="", compare=False)
    params: dict[str, str] = field(default_factory=dict, compare=False)
    body: dict[str, Any] = field(default_factory=dict, compare=False)
    uuid: str = field(default="", compare=False)
    status: int = field(default=0, compare=False)  # HTTP status answered; 0: none (yet)

    @property
    def ok(self) -> bool:
        """Feishu took it (answered 200, code 0)."""
        return self.status == 200


class FakeFeishu(httpx.AsyncBaseTransport):
    """Feishu's Open API for one test. `remember=False` keeps nothing of the calls (a
    benchmark's Feishu): ids are still given, no call, message or reaction is kept."""

    def __init__(self, *, remember: bool = True) -> None:
        self.remember = remember
        self.calls: list[Call] = []
        self.token_fetches = 0
        self.reactions: dict[str, tuple[str, str]] = {}  # reaction id -> (message, emoji)
        self.emoji: dict[str, str] = {}  # every reaction id made -> its emoji
        # message id -> (msg_type, content) as `get_message` answers it (the bot's, or a
        # user's a test puts here)
        self.messages: dict[str, tuple[str, str]] = {}
        self.resources: dict[str, tuple[bytes, str]] = {}  # key -> (bytes, Content-Type)
        self.entered = asyncio.Event()  # a held call has arrived
        self.failed = asyncio.Event()  # a call was answered with its op's error
        self._held: set[str] = set()
        self._gate = asyncio.Event()
        self._failing: dict[str, Refusal | BaseException] = {}
        self._by_uuid: dict[str, str] = {}
        self._message_ids = itertools.count(1)
        self._others = itertools.count(1)  # reactions, cards, uploads

    # -- what the test says -----------------------------------------------------------

    def hold(self, op: str) -> None:
        self._held.add(op)
        self._gate.clear()

    def release(self) -> None:
        self._held.clear()
        self._gate.set()

    def fail(self, op: str, error: Refusal | BaseException) -> None:
        self._failing[op] = error

    def mend(self, op: str) -> None:
        self._failing.pop(op, None)

    def client(self, clock: Callable[[], float] = lambda: 0.0, **kwargs: Any) -> FeishuClient:
        """The bridge's real client over this Feishu; its retries do not wait."""
        retry = RetryPolicy(base_delay=0.0, max_delay=0.0, rng=random.Random(0))
        return FeishuClient(
            "cli_fake",
            "secret",
            DOMAIN,
            clock=clock,
            http=FeishuHttp(base_url=DOMAIN, transport=self),
            retry=retry,
            **kwargs,
        )

    # -- reading the record ------------------------------------------------------------

    def ops(self) -> list[tuple[str, str]]:
        return [(c.op, c.target) for c in self.calls]

    def cards(self) -> list[Call]:
        """The cards posted (Feishu took them)."""
        return [c for c in self.calls if c.op in ("reply_card", "send_card") and c.ok]

    def texts(self) -> list[str]:
        """The texts posted (Feishu took them), in order."""
        return [c.text for c in self.calls if c.op in ("reply_text", "send_text") and c.ok]

    def shown(self, message_id: str) -> list[str]:
        """The bot's reactions on a message now."""
        return [emoji for mid, emoji in self.reactions.values() if mid == message_id]

    # -- the transport -----------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        raw = await request.aread()
        if path == TOKEN_PATH:
            self.token_fetches += 1
            token = {"tenant_access_token": f"t-{self.token_fetches}", "expire": TOKEN_SECONDS}
            return _json(200, {"code": 0, "msg": "ok", **token}, request)
        is_json = request.headers.get("content-type", "").startswith("application/json")
        body = json.loads(raw) if raw and is_json else {}
        params = dict(request.url.params)
        read = read_call(method, path, params, body)
        call = Call(
            read.op, read.target, read.text, read.card, method, path, params, body, read.uuid
        )
        if self.remember:
            self.calls.append(call)
        if call.op in self._held:
            self.entered.set()
            await self._gate.wait()
        error = self._failing.get(call.op)
        if error is not None:
            self.failed.set()
            if not isinstance(error, Refusal):  # (a Refusal is an exception too)
                raise error
            response = _json(error.http_status, error.body(), request)
        else:
            response = self._answer(call, request)
        call.status = response.status_code
        return response

    def _answer(self, call: Call, request: httpx.Request) -> httpx.Response:
        op = call.op
        if op == "download_resource":
            content, mime = self.resources.get(call.text, (PNG, "image/png"))
            return httpx.Response(
                200, headers={"Content-Type": mime}, content=content, request=request
            )
        if op == "bot_info":
            bot = {"open_id": "ou_bot", "app_name": "Bot"}
            return _json(200, {"code": 0, "msg": "ok", "bot": bot}, request)
        data = self._data(call)
        if data is None:
            return _json(NOT_FOUND.http_status, NOT_FOUND.body(), request)
        return _json(200, {"code": 0, "msg": "success", "data": data}, request)

    def _data(self, call: Call) -> dict[str, Any] | None:
        """The answer's `data`; None for a call Feishu has no API for."""
        op, target = call.op, call.target
        if op in _MESSAGES_MADE:
            return self._message(call)
        if op == "add_reaction":
            reaction_id = f"re_{next(self._others)}"
            if self.remember:
                self.reactions[reaction_id] = (target, call.text)
                self.emoji[reaction_id] = call.text
            return {"reaction_id": reaction_id, "reaction_type": {"emoji_type": call.text}}
        if op == "remove_reaction":
            self.reactions.pop(call.text, None)
            return {"reaction_id": call.text}
        if op == "create_card":
            return {"card_id": f"card_{next(self._others)}"}
        if op == "upload_image":
            return {"image_key": f"img_{next(self._others)}"}
        if op == "upload_file":
            return {"file_key": f"file_{next(self._others)}"}
        if op == "urgent_app":
            return {"invalid_user_id_list": []}
        if op == "get_message":
            found = self.messages.get(target)
            if found is None:  # Feishu will not say: recalled, or not the bot's to see
                return {"items": []}
            item = {"message_id": target, "msg_type": found[0], "body": {"content": found[1]}}
            return {"items": [item]}
        if op == "edit_text" and self.remember:
            self.messages[target] = ("text", call.body["content"])
        if op in _CHANGES:
            return {}
        return None

    def _message(self, call: Call) -> dict[str, Any]:
        known = self._by_uuid.get(call.uuid) if call.uuid else None
        message_id = known or f"om_bot_{next(self._message_ids)}"
        chat = f"oc_p2p_{call.target}" if call.op == "send_text_to_user" else ""
        if call.op.startswith("send_") and not chat:
            chat = call.target
        if self.remember and known is None:
            if call.uuid:
                self._by_uuid[call.uuid] = message_id
            self.messages[message_id] = (call.body["msg_type"], call.body["content"])
        return {"message_id": message_id, "chat_id": chat}


def _json(status: int, body: dict[str, Any], request: httpx.Request) -> httpx.Response:
    content = json.dumps(body).encode()
    headers = {"Content-Type": "application/json; charset=utf-8"}
    return httpx.Response(status, headers=headers, content=content, request=request)
