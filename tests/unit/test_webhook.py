"""`POST /feishu/events` on a real aiohttp server (127.0.0.1, random port)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.feishu import crypto
from bridge.feishu.events import BotIdentity, CardAction, CardActionReply, InboundMessage
from bridge.feishu.webhook import EVENTS_PATH, webhook_routes

ENCRYPT_KEY = "enc-key-for-tests"
TOKEN = "verification-token-for-tests"
BOT = "ou_bot"
SECRET_TEXT = "the user's private words"


class RecordingHandler:
    """In-process fake of the InboundHandler port."""

    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.actions: list[CardAction] = []
        self.delay = 0.0
        self.fail: Exception | None = None
        self.reply = CardActionReply(toast_type="success", toast_text="done", card={"k": 1})

    async def on_message(self, message: InboundMessage) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        self.messages.append(message)

    async def on_card_action(self, action: CardAction) -> CardActionReply:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        self.actions.append(action)
        return self.reply


def message_payload(text: str = f"@_user_1 {SECRET_TEXT}", token: str = TOKEN) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": "ev_1",
            "event_type": "im.message.receive_v1",
            "create_time": "1700000000000",
            "token": token,
            "app_id": "cli_x",
            "tenant_key": "t",
        },
        "event": {
            "sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"},
            "message": {
                "message_id": "om_1",
                "chat_id": "oc_1",
                "chat_type": "group",
                "message_type": "text",
                "content": json.dumps({"text": text}),
                "create_time": "1700000000000",
                "mentions": [{"key": "@_user_1", "id": {"open_id": BOT}, "name": "Bot"}],
            },
        },
    }


def card_payload(token: str = TOKEN) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {"event_id": "ev_c", "event_type": "card.action.trigger", "token": token},
        "event": {
            "operator": {"open_id": "ou_alice"},
            "token": "c-1",
            "action": {"value": {"choice": "allow"}, "tag": "button"},
            "context": {"open_message_id": "om_card", "open_chat_id": "oc_1"},
        },
    }


def signed_headers(body: bytes, key: str = ENCRYPT_KEY) -> dict[str, str]:
    ts, nonce = str(int(time.time())), "nonce-123"
    return {
        "X-Lark-Request-Timestamp": ts,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": crypto.compute_signature(ts, nonce, key, body),
        "Content-Type": "application/json",
    }


def encrypted_body(payload: dict[str, Any], key: str = ENCRYPT_KEY) -> bytes:
    return json.dumps({"encrypt": crypto.encrypt_payload(json.dumps(payload), key)}).encode()


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., Any]]:
    clients: list[TestClient[web.Request, web.Application]] = []

    async def make(
        handler: RecordingHandler,
        *,
        encrypt_key: str | None = ENCRYPT_KEY,
        verification_token: str | None = TOKEN,
        deadline: float = 2.5,
    ) -> TestClient[web.Request, web.Application]:
        app = web.Application()
        app.add_routes(
            webhook_routes(
                handler,
                encrypt_key=encrypt_key,
                verification_token=verification_token,
                bot=BotIdentity(BOT),
                deadline=deadline,
            )
        )
        client = TestClient(TestServer(app, host="127.0.0.1", port=0))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


async def post(
    client: TestClient[web.Request, web.Application], body: bytes, headers: dict[str, str]
) -> tuple[int, Any]:
    resp = await client.post(EVENTS_PATH, data=body, headers=headers)
    return resp.status, await resp.json()


async def test_signed_encrypted_event_is_handed_over_once(make_client: Any) -> None:
    handler = RecordingHandler()
    client = await make_client(handler)
    body = encrypted_body(message_payload())
    status, answer = await post(client, body, signed_headers(body))
    assert (status, answer) == (200, {})
    assert len(handler.messages) == 1
    msg = handler.messages[0]
    assert (msg.event_id, msg.message_id, msg.mentions_bot) == ("ev_1", "om_1", True)
    assert msg.text == SECRET_TEXT


async def test_plain_event_without_encryption_configured(make_client: Any) -> None:
    handler = RecordingHandler()
    client = await make_client(handler, encrypt_key=None)
    body = json.dumps(message_payload()).encode()
    status, _ = await post(client, body, {"Content-Type": "application/json"})
    assert status == 200
    assert len(handler.messages) == 1


async def test_bad_signature_is_401(make_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    handler = RecordingHandler()
    client = await make_client(handler)
    body = encrypted_body(message_payload())
    headers = signed_headers(body, key="not-the-key")
    with caplog.at_level(logging.WARNING, logger="bridge.feishu.webhook"):
        status, _ = await post(client, body, headers)
    assert status == 401
    assert handler.messages == []
    assert "signature mismatch" in caplog.text
    assert ENCRYPT_KEY not in caplog.text
    assert "encrypt" not in caplog.text.replace("webhook", "")


async def test_unsigned_event_is_401_when_encrypt_key_is_set(make_client: Any) -> None:
    handler = RecordingHandler()
    client = await make_client(handler)
    status, _ = await post(client, encrypted_body(message_payload()), {})
    assert status == 401
    assert handler.messages == []


async def test_bad_token_is_403(make_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    handler = RecordingHandler()
    client = await make_client(handler)
    body = encrypted_body(message_payload(token="forged"))
    with caplog.at_level(logging.WARNING, logger="bridge.feishu.webhook"):
        status, _ = await post(client, body, signed_headers(body))
    assert status == 403
    assert handler.messages == []
    assert "verification token mismatch" in caplog.text
    assert TOKEN not in caplog.text
    assert "forged" not in caplog.text


async def test_missing_token_is_403(make_client: Any) -> None:
    handler = RecordingHandler()
    client = await make_client(handler, encrypt_key=None)
    payload = message_payload()
    del payload["header"]["token"]
    status, _ = await post(client, json.dumps(payload).encode(), {})
    assert status == 403


async def test_url_verification_plain(make_client: Any) -> None:
    client = await make_client(RecordingHandler(), encrypt_key=None)
    body = json.dumps({"challenge": "ch-1", "token": TOKEN, "type": "url_verification"}).encode()
    assert await post(client, body, {}) == (200, {"challenge": "ch-1"})


async def test_url_verification_encrypted_and_unsigned(make_client: Any) -> None:
    client = await make_client(RecordingHandler())
    body = encrypted_body({"challenge": "ch-2", "token": TOKEN, "type": "url_verification"})
    assert await post(client, body, {}) == (200, {"challenge": "ch-2"})


async def test_url_verification_with_wrong_token_is_403(make_client: Any) -> None:
    client = await make_client(RecordingHandler(), encrypt_key=None)
    body = json.dumps({"challenge": "c", "token": "nope", "type": "url_verification"}).encode()
    status, _ = await post(client, body, {})
    assert status == 403


@pytest.mark.parametrize("body", [b"{not json", b"[]", b"", "\u00ff".encode("latin-1")])
async def test_malformed_json_is_400(
    make_client: Any, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    client = await make_client(RecordingHandler(), encrypt_key=None)
    with caplog.at_level(logging.WARNING, logger="bridge.feishu.webhook"):
        status, answer = await post(client, body, {})
    assert (status, answer) == (400, {"error": "malformed"})
    assert "rejected" in caplog.text
    assert "Traceback" not in caplog.text


async def test_undecryptable_body_is_400(make_client: Any) -> None:
    client = await make_client(RecordingHandler())
    body = json.dumps({"encrypt": "garbage-not-base64!"}).encode()
    status, answer = await post(client, body, signed_headers(body))
    assert (status, answer) == (400, {"error": "undecryptable"})


async def test_encrypted_body_without_key_configured_is_400(make_client: Any) -> None:
    client = await make_client(RecordingHandler(), encrypt_key=None)
    status, _ = await post(client, encrypted_body(message_payload()), {})
    assert status == 400


async def test_malformed_event_is_400(make_client: Any) -> None:
    handler = RecordingHandler()
    client = await make_client(handler, encrypt_key=None)
    payload = message_payload()
    payload["event"]["message"]["content"] = "{broken"
    status, _ = await post(client, json.dumps(payload).encode(), {})
    assert status == 400
    assert handler.messages == []


async def test_unknown_event_type_is_200_and_logged(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    handler = RecordingHandler()
    client = await make_client(handler, encrypt_key=None)
    payload = message_payload()
    payload["header"]["event_type"] = "im.chat.member.bot.added_v1"
    with caplog.at_level(logging.INFO, logger="bridge.feishu.webhook"):
        status, answer = await post(client, json.dumps(payload).encode(), {})
    assert (status, answer) == (200, {})
    assert "ignored im.chat.member.bot.added_v1" in caplog.text
    assert handler.messages == []


async def test_slow_handler_is_answered_within_the_deadline(make_client: Any) -> None:
    handler = RecordingHandler()
    handler.delay = 5.0  # would blow Feishu's 3 s; the endpoint must not wait for it
    client = await make_client(handler, encrypt_key=None, deadline=0.05)
    started = time.monotonic()
    status, answer = await post(client, json.dumps(message_payload()).encode(), {})
    assert time.monotonic() - started < 1.0
    assert (status, answer) == (503, {"error": "busy"})


async def test_failing_handler_asks_for_redelivery(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    handler = RecordingHandler()
    handler.fail = RuntimeError("store is down")
    client = await make_client(handler, encrypt_key=None)
    with caplog.at_level(logging.ERROR, logger="bridge.feishu.webhook"):
        status, answer = await post(client, json.dumps(message_payload()).encode(), {})
    assert (status, answer) == (500, {"error": "handler_failed"})
    assert "Traceback" in caplog.text
    assert "store is down" in caplog.text
    assert SECRET_TEXT not in caplog.text


async def test_card_action_reply_shape(make_client: Any) -> None:
    handler = RecordingHandler()
    client = await make_client(handler)
    body = encrypted_body(card_payload())
    status, answer = await post(client, body, signed_headers(body))
    assert status == 200
    assert answer == {
        "toast": {"type": "success", "content": "done"},
        "card": {"type": "raw", "data": {"k": 1}},
    }
    assert handler.actions == [
        CardAction(
            event_id="ev_c",
            operator_open_id="ou_alice",
            open_message_id="om_card",
            open_chat_id="oc_1",
            value={"choice": "allow"},
            token="c-1",
        )
    ]


async def test_card_action_empty_reply_is_empty_object(make_client: Any) -> None:
    handler = RecordingHandler()
    handler.reply = CardActionReply()
    client = await make_client(handler, encrypt_key=None)
    assert await post(client, json.dumps(card_payload()).encode(), {}) == (200, {})


async def test_slow_card_handler_is_answered_within_the_deadline(make_client: Any) -> None:
    handler = RecordingHandler()
    handler.delay = 5.0
    client = await make_client(handler, encrypt_key=None, deadline=0.05)
    started = time.monotonic()
    status, _ = await post(client, json.dumps(card_payload()).encode(), {})
    assert time.monotonic() - started < 1.0
    assert status == 503


async def test_logs_never_contain_message_text(
    make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    handler = RecordingHandler()
    client = await make_client(handler)
    body = encrypted_body(message_payload())
    with caplog.at_level(logging.DEBUG):
        await post(client, body, signed_headers(body))
    assert SECRET_TEXT not in caplog.text
    assert ENCRYPT_KEY not in caplog.text
    assert TOKEN not in caplog.text
