"""Issue 2: the bridge in webhook mode against the emulator — intake, security, retries.

Every assertion is on what the emulator recorded: calls (method, path, body), deliveries
(HTTP status), and the chat as the user sees it.
"""

from __future__ import annotations

import json
import logging

import pytest

from bridge.devtools.emulator import FaultKind
from bridge.devtools.emulator.records import Envelope
from tests.integration.stack import Stack

REPLY = "/open-apis/im/v1/messages/*/reply"


def _calls(stack: Stack, prefix: str = "/open-apis/im/") -> list[tuple[str, str]]:
    return [(c.method, c.path) for c in stack.emu.calls(path_prefix=prefix)]


async def test_signed_event_is_accepted_acked_then_answered(stack: Stack) -> None:
    sent = await stack.say("hello")
    assert sent.first_attempt is not None
    assert sent.first_attempt.status == 200

    assert await stack.wait_texts(1) == ["echo: hello"]
    await stack.settled()
    assert stack.reactions(sent.message_id) == ["OnIt"]
    # The ack reaction is the first call, before any text.
    assert _calls(stack) == [
        ("POST", f"/open-apis/im/v1/messages/{sent.message_id}/reactions"),
        ("POST", f"/open-apis/im/v1/messages/{sent.message_id}/reply"),
    ]
    reaction = stack.emu.calls(path_prefix="/open-apis/im/v1/messages/", method="POST")[0]
    assert reaction.body == {"reaction_type": {"emoji_type": "OnIt"}}
    reply = stack.emu.calls(path_prefix="/open-apis/im/v1/messages/", method="POST")[1]
    assert reply.body["msg_type"] == "text"
    assert json.loads(reply.body["content"]) == {"text": "echo: hello"}
    assert 0 < len(reply.body["uuid"]) <= 50


async def test_bad_signature_is_rejected_and_nothing_happens(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    envelope = stack.emu.build_envelope(await _message_payload(stack))
    headers = dict(envelope.headers)
    headers["X-Lark-Signature"] = "0" * 64
    attempt = await stack.emu.post_raw(Envelope(envelope.body, headers))

    assert attempt.status == 401
    assert "signature" in caplog.text.lower()
    await stack.settled()
    assert _calls(stack) == []
    assert stack.texts() == []


async def test_tampered_body_is_rejected(stack: Stack) -> None:
    envelope = stack.emu.build_envelope(await _message_payload(stack))
    body = envelope.body.replace(b'"encrypt": "', b'"encrypt": "AAAA')
    attempt = await stack.emu.post_raw(Envelope(body, envelope.headers))
    assert attempt.status == 401
    await stack.settled()
    assert _calls(stack) == []


async def test_malformed_json_gets_400_and_the_service_keeps_running(stack: Stack) -> None:
    attempt = await stack.emu.post_raw(b"{not json", {"Content-Type": "application/json"})
    assert attempt.status == 400
    assert await stack.say("still there?")
    assert await stack.wait_texts(1) == ["echo: still there?"]


async def test_url_verification_challenge_is_answered(stack: Stack) -> None:
    result = await stack.emu.verify_url("challenge-123")
    assert result.ok
    assert json.loads(result.response_body) == {"challenge": "challenge-123"}


async def test_redelivered_event_is_handled_once(stack: Stack) -> None:
    sent = await stack.say("once")
    await stack.wait_texts(1)
    await stack.settled()

    again = await stack.emu.redeliver(sent.event_id)
    assert again.status == 200  # answered, so Feishu stops redelivering
    await stack.settled()

    assert stack.reactions(sent.message_id) == ["OnIt"]
    assert stack.texts() == ["echo: once"]
    assert len(stack.emu.calls(path_prefix="/open-apis/im/v1/messages/", method="POST")) == 2


async def test_rate_limited_reply_is_retried_and_posted_exactly_once(stack: Stack) -> None:
    stack.emu.fail_next("POST", REPLY, FaultKind.RATE_LIMIT, reset_seconds=2)
    sent = await stack.say("busy day")

    assert await stack.wait_texts(1) == ["echo: busy day"]
    await stack.settled()
    attempts = stack.emu.calls(path_prefix=f"/open-apis/im/v1/messages/{sent.message_id}/reply")
    assert [a.status for a in attempts] == [429, 200]
    assert attempts[0].body["uuid"] == attempts[1].body["uuid"]  # same idempotency key
    assert 2.0 in stack.waits  # x-ogw-ratelimit-reset was honoured (recorded, not slept)
    assert stack.texts() == ["echo: busy day"]


async def test_server_error_then_success_posts_once(stack: Stack) -> None:
    stack.emu.fail_next("POST", REPLY, FaultKind.SERVER_ERROR, times=2)
    await stack.say("flaky")
    assert await stack.wait_texts(1) == ["echo: flaky"]
    await stack.settled()
    assert [c.status for c in stack.emu.calls(path_prefix="/open-apis/im/v1/messages/om")][-3:] == [
        500,
        500,
        200,
    ]
    assert stack.texts() == ["echo: flaky"]


async def test_healthz_is_ready(stack: Stack) -> None:
    import httpx

    async with httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(f"http://127.0.0.1:{stack.demo.service.port}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def _message_payload(stack: Stack) -> dict[str, object]:
    """A raw `im.message.receive_v1` payload for the p2p chat, as Feishu would send it."""
    chat = stack.emu.open_chat("p2p")
    return {
        "schema": "2.0",
        "header": {
            "event_id": "ev-tampered",
            "event_type": "im.message.receive_v1",
            "create_time": "1700000000000",
            "token": stack.emu.verification_token,
            "app_id": stack.emu.app_id,
            "tenant_key": "tenant",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": stack.emu.default_user_open_id},
                "sender_type": "user",
            },
            "message": {
                "message_id": "om_tampered",
                "chat_id": chat,
                "chat_type": "p2p",
                "message_type": "text",
                "content": json.dumps({"text": "should never run"}),
                "create_time": "1700000000000",
            },
        },
    }
