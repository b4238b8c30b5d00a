"""The Feishu emulator speaks Feishu's wire format: checked over real loopback sockets, with
lark-oapi's own webhook handler on the receiving side (its AESCipher, signature and token
checks), so "the emulator agrees with itself" can never pass for "the emulator agrees with
Feishu's SDK"."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import socket
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx
import lark_oapi as lark
import pytest
from aiohttp import web
from lark_oapi.api.im.v1 import P2ImMessageReceiveV1
from lark_oapi.core.model import RawRequest
from lark_oapi.core.utils import AESCipher
from lark_oapi.event.callback.model.p2_card_action_trigger import (
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)

from bridge.devtools.emulator import (
    CALLBACK_ERROR_TOAST,
    FaultKind,
    FeishuEmulator,
    Mention,
)
from bridge.devtools.emulator.delivery import FEISHU_REDELIVERY_LADDER_S

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES = "/open-apis/im/v1/messages"
ENCRYPT_KEY = "test-encrypt-key"
VERIFICATION_TOKEN = "test-verification-token"
EMULATOR_DEFAULT_TOKEN = "emulator-verification-token"  # FeishuEmulator's default
SIGN_HEADERS = ("X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature")


class LarkWebhook:
    """A stand-in for the bridge's webhook: each request goes to lark-oapi's
    EventDispatcherHandler. `statuses` are answered first, in order, without lark (to make
    Feishu redeliver); `delay` holds every answer (to miss the deadline)."""

    def __init__(
        self,
        encrypt_key: str = "",
        verification_token: str = EMULATOR_DEFAULT_TOKEN,
        *,
        statuses: Sequence[int] = (),
        delay: float = 0.0,
        card_answer: Mapping[str, Any] | None = None,
    ) -> None:
        self.statuses = list(statuses)
        self.delay = delay
        self.card_answer = dict(card_answer or {})
        self.messages: list[P2ImMessageReceiveV1] = []
        self.card_actions: list[P2CardActionTrigger] = []
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.answers: list[int] = []
        self._handler = (
            lark.EventDispatcherHandler.builder(encrypt_key, verification_token)
            .register_p2_im_message_receive_v1(self.messages.append)
            .register_p2_card_action_trigger(self._on_card)
            .build()
        )
        self._runner: web.AppRunner | None = None
        self._port = 0

    def _on_card(self, event: P2CardActionTrigger) -> P2CardActionTriggerResponse:
        self.card_actions.append(event)
        return P2CardActionTriggerResponse(self.card_answer)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append((dict(request.headers), body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.statuses:
            status = self.statuses.pop(0)
            if status != 200:
                self.answers.append(status)
                return web.Response(status=status, text="not now")
        raw = RawRequest()
        raw.uri = request.path
        raw.body = body
        raw.headers = {
            name: request.headers[name] for name in SIGN_HEADERS if name in request.headers
        }
        answer = self._handler.do(raw)
        self.answers.append(answer.status_code)
        return web.Response(
            status=answer.status_code, body=answer.content, content_type="application/json"
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/feishu/events"

    async def __aenter__(self) -> LarkWebhook:
        app = web.Application()
        app.router.add_post("/feishu/events", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def _auth(client: httpx.AsyncClient, emu: FeishuEmulator) -> dict[str, str]:
    answer = await client.post(
        TOKEN_PATH, json={"app_id": emu.app_id, "app_secret": emu.app_secret}
    )
    return {"Authorization": f"Bearer {answer.json()['tenant_access_token']}"}


def _text(text: str) -> str:
    return json.dumps({"text": text})


def _card(title: str, button_value: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {"title": {"tag": "plain_text", "content": title}, "template": "blue"},
        "body": {
            "elements": [
                {"tag": "markdown", "content": "**Run** `rm -rf build`?"},
                {
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": "Allow"},
                    "type": "primary",
                    "behaviors": [{"type": "callback", "value": dict(button_value)}],
                },
            ]
        },
    }


# --- tokens ----------------------------------------------------------------------------------
async def test_token_is_issued_reused_and_checked_on_every_call(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    first = (
        await emulator_http.post(
            TOKEN_PATH, json={"app_id": emulator.app_id, "app_secret": emulator.app_secret}
        )
    ).json()
    assert first["code"] == 0
    assert first["msg"] == "ok"
    assert first["tenant_access_token"].startswith("t-")
    assert first["expire"] == 7200
    again = (
        await emulator_http.post(
            TOKEN_PATH, json={"app_id": emulator.app_id, "app_secret": emulator.app_secret}
        )
    ).json()
    assert again["tenant_access_token"] == first["tenant_access_token"]  # >30 min left: reused

    good = {"Authorization": f"Bearer {first['tenant_access_token']}"}
    bot = await emulator_http.get("/open-apis/bot/v3/info", headers=good)
    assert bot.status_code == 200
    assert bot.json()["bot"] == {
        "activate_status": 2,
        "app_name": emulator.bot_name,
        "avatar_url": "",
        "ip_white_list": [],
        "open_id": emulator.bot_open_id,
    }

    missing = await emulator_http.get("/open-apis/bot/v3/info")
    assert (missing.status_code, missing.json()["code"]) == (400, 99991661)
    forged = await emulator_http.get(
        "/open-apis/bot/v3/info", headers={"Authorization": "Bearer t-forged"}
    )
    assert (forged.status_code, forged.json()["code"]) == (400, 99991663)

    emulator.expire_tokens()
    expired = await emulator_http.get("/open-apis/bot/v3/info", headers=good)
    assert (expired.status_code, expired.json()["code"]) == (400, 99991663)
    fresh = await _auth(emulator_http, emulator)
    assert fresh != good
    assert (await emulator_http.get("/open-apis/bot/v3/info", headers=fresh)).status_code == 200


async def test_wrong_credentials_get_feishus_codes(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    secret = await emulator_http.post(
        TOKEN_PATH, json={"app_id": emulator.app_id, "app_secret": "nope"}
    )
    assert secret.json()["code"] == 10014
    app = await emulator_http.post(TOKEN_PATH, json={"app_id": "cli_other", "app_secret": "nope"})
    assert app.json()["code"] == 10003
    assert [c.status for c in emulator.calls(TOKEN_PATH)] == [400, 400]


async def test_token_ttl_is_configurable() -> None:
    async with (
        FeishuEmulator(token_ttl_seconds=600) as emu,
        httpx.AsyncClient(base_url=emu.url, trust_env=False) as client,
    ):
        answer = await client.post(
            TOKEN_PATH, json={"app_id": emu.app_id, "app_secret": emu.app_secret}
        )
    assert answer.json()["expire"] == 600


# --- messages --------------------------------------------------------------------------------
async def test_send_and_reply_answer_feishu_shaped_messages_and_fill_the_timeline(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    auth = await _auth(emulator_http, emulator)
    user = await emulator.send_user_message("hi bot")  # no webhook: only the chat is filled
    assert user.first_attempt is None

    sent = await emulator_http.post(
        MESSAGES,
        params={"receive_id_type": "chat_id"},
        json={
            "receive_id": user.chat_id,
            "msg_type": "text",
            "content": _text("hello"),
            "uuid": "u-1",
        },
        headers=auth,
    )
    data = sent.json()["data"]
    assert sent.json()["code"] == 0
    assert data["message_id"].startswith("om_")
    assert data["chat_id"] == user.chat_id
    assert data["msg_type"] == "text"
    assert json.loads(data["body"]["content"]) == {"text": "hello"}
    assert data["sender"]["id"] == emulator.app_id
    assert data["sender"]["sender_type"] == "app"
    assert data["create_time"].isdigit()

    reply = await emulator_http.post(
        f"{MESSAGES}/{user.message_id}/reply",
        json={
            "msg_type": "text",
            "content": _text("on it"),
            "reply_in_thread": True,
            "uuid": "u-2",
        },
        headers=auth,
    )
    replied = reply.json()["data"]
    assert replied["parent_id"] == replied["root_id"] == user.message_id
    assert replied["thread_id"].startswith("omt_")

    timeline = emulator.messages(user.chat_id)
    assert [(m.sender_type, m.text) for m in timeline] == [
        ("user", "hi bot"),
        ("app", "hello"),
        ("app", "on it"),
    ]
    assert [c.json_content() for c in emulator.calls(MESSAGES, method="POST")] == [
        {"text": "hello"},
        {"text": "on it"},
    ]


async def test_the_same_uuid_posts_once(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    auth = await _auth(emulator_http, emulator)
    user = await emulator.send_user_message("hi")
    body = {"msg_type": "text", "content": _text("only once"), "uuid": "turn-1-final"}
    first = await emulator_http.post(f"{MESSAGES}/{user.message_id}/reply", json=body, headers=auth)
    second = await emulator_http.post(
        f"{MESSAGES}/{user.message_id}/reply", json=body, headers=auth
    )
    assert first.json()["data"]["message_id"] == second.json()["data"]["message_id"]
    other = await emulator_http.post(
        f"{MESSAGES}/{user.message_id}/reply", json={**body, "uuid": "turn-1-final-2"}, headers=auth
    )
    assert other.json()["data"]["message_id"] != first.json()["data"]["message_id"]
    assert [m.text for m in emulator.bot_messages(user.chat_id)] == ["only once", "only once"]


async def test_urgent_app_as_feishu_documents_it(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    """Only the bot's own message, `user_id_type=open_id`, a non-empty list; only members of
    the chat are urged (the others are listed back); without the scope, 99991672 first."""
    auth = await _auth(emulator_http, emulator)
    user = await emulator.send_user_message("hi")
    reply = await emulator_http.post(
        f"{MESSAGES}/{user.message_id}/reply",
        json={"msg_type": "text", "content": _text("a card, say")},
        headers=auth,
    )
    bot_message = reply.json()["data"]["message_id"]
    me, stranger = emulator.default_user_open_id, "ou_not_in_this_chat"
    open_id = {"user_id_type": "open_id"}

    async def urge(message_id: str, body: Any, params: Any = open_id) -> httpx.Response:
        path = f"{MESSAGES}/{message_id}/urgent_app"
        return await emulator_http.patch(path, json=body, params=params, headers=auth)

    answer = await urge(bot_message, {"user_id_list": [me, stranger]})
    assert (answer.status_code, answer.json()["code"]) == (200, 0)
    assert answer.json()["data"] == {"invalid_user_id_list": [stranger]}
    [urged] = emulator.urgents()
    assert (urged.message_id, urged.user_ids, urged.invalid) == (bot_message, (me,), (stranger,))

    refused = [
        await urge(user.message_id, {"user_id_list": [me]}),  # not the bot's
        await urge("om_missing", {"user_id_list": [me]}),
        await urge(bot_message, {"user_id_list": []}),
        await urge(bot_message, {"user_id_list": [me]}, params={}),
    ]
    assert [(r.status_code, r.json()["code"]) for r in refused] == [
        (400, 230001),
        (400, 230001),
        (400, 99992402),
        (400, 99992402),
    ]
    emulator.urgent.scope_granted = False
    no_scope = await urge("om_missing", {"user_id_list": [me]})
    assert (no_scope.status_code, no_scope.json()["code"]) == (400, 99991672)
    assert "im:message.urgent" in no_scope.json()["msg"]
    assert len(emulator.urgents()) == 1


async def test_feishu_validation_errors(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    auth = await _auth(emulator_http, emulator)
    user = await emulator.send_user_message("hi")

    async def code(method: str, path: str, **kwargs: Any) -> tuple[int, int]:
        answer = await emulator_http.request(method, path, headers=auth, **kwargs)
        return answer.status_code, answer.json()["code"]

    text = {"msg_type": "text", "content": _text("x")}
    assert await code("POST", f"{MESSAGES}/om_missing/reply", json=text) == (400, 230001)
    assert await code(
        "POST",
        MESSAGES,
        params={"receive_id_type": "chat_id"},
        json={**text, "receive_id": "oc_nowhere"},
    ) == (400, 230002)
    too_long = {"msg_type": "text", "content": _text("x" * 150 * 1024)}
    assert await code("POST", f"{MESSAGES}/{user.message_id}/reply", json=too_long) == (400, 230025)
    big_card = {
        "msg_type": "interactive",
        "content": json.dumps({"elements": [{"tag": "markdown", "content": "y" * 31 * 1024}]}),
    }
    assert await code("POST", f"{MESSAGES}/{user.message_id}/reply", json=big_card) == (400, 230025)
    broken_card = {"msg_type": "interactive", "content": "{not json"}
    assert await code("POST", f"{MESSAGES}/{user.message_id}/reply", json=broken_card) == (
        400,
        230099,
    )
    assert await code("PATCH", f"{MESSAGES}/{user.message_id}", json={"content": "{}"}) == (
        400,
        230001,
    )
    assert await code(
        "POST",
        f"{MESSAGES}/{user.message_id}/reactions",
        json={"reaction_type": {"emoji_type": "NotAnEmoji"}},
    ) == (400, 231001)
    assert await code(
        "POST", f"{MESSAGES}/om_missing/reactions", json={"reaction_type": {"emoji_type": "OnIt"}}
    ) == (400, 231003)
    assert await code("GET", "/open-apis/im/v1/chats") == (404, 404)
    assert emulator.bot_messages() == []


async def test_reactions_are_added_listed_and_removed(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    auth = await _auth(emulator_http, emulator)
    user = await emulator.send_user_message("hi")
    added = await emulator_http.post(
        f"{MESSAGES}/{user.message_id}/reactions",
        json={"reaction_type": {"emoji_type": "OnIt"}},
        headers=auth,
    )
    data = added.json()["data"]
    assert data["reaction_type"] == {"emoji_type": "OnIt"}
    assert data["operator"] == {"operator_id": emulator.app_id, "operator_type": "app"}
    assert [r.emoji_type for r in emulator.reactions(user.message_id)] == ["OnIt"]

    path = f"{MESSAGES}/{user.message_id}/reactions/{data['reaction_id']}"
    assert (await emulator_http.delete(path, headers=auth)).json()["code"] == 0
    assert emulator.reactions(user.message_id) == []
    assert (await emulator_http.delete(path, headers=auth)).json()["code"] == 231011


async def test_patch_replaces_a_card_in_the_timeline(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    auth = await _auth(emulator_http, emulator)
    user = await emulator.send_user_message("hi")
    posted = await emulator_http.post(
        f"{MESSAGES}/{user.message_id}/reply",
        json={"msg_type": "interactive", "content": json.dumps(_card("Approve?", {"a": 1}))},
        headers=auth,
    )
    card_id = posted.json()["data"]["message_id"]
    decided = _card("Approved by you", {"a": 1})
    patched = await emulator_http.patch(
        f"{MESSAGES}/{card_id}", json={"content": json.dumps(decided)}, headers=auth
    )
    assert patched.json() == {"code": 0, "msg": "success", "data": {}}
    assert emulator.message(card_id).card == decided
    assert emulator.message(card_id).updated


async def test_a_card_entitys_elements_are_replaced_patched_and_batched_as_checked(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    auth = await _auth(emulator_http, emulator)
    card = {
        "schema": "2.0",
        "config": {"streaming_mode": True},
        "body": {"elements": [{"tag": "markdown", "element_id": "answer", "content": "a"}]},
    }
    created = await emulator_http.post(
        "/open-apis/cardkit/v1/cards",
        json={"type": "card_json", "data": json.dumps(card)},
        headers=auth,
    )
    card_id = created.json()["data"]["card_id"]
    element = f"/open-apis/cardkit/v1/cards/{card_id}/elements"

    def replace(element_id: str, new: dict[str, Any], sequence: int) -> Any:
        body = {"element": json.dumps(new), "sequence": sequence}
        return emulator_http.put(f"{element}/{element_id}", json=body, headers=auth)

    new = {"tag": "markdown", "element_id": "answer", "content": "ab"}
    assert (await replace("answer", new, 1)).json()["code"] == 0
    shown = json.loads(emulator.cardkit.rendered(card_id))
    assert shown["body"]["elements"] == [new]
    assert (await replace("answer", new, 1)).json()["code"] == 300317  # sequence not larger
    assert (await replace("nothing", new, 2)).json()["code"] == 300311
    retagged = {"tag": "plain_text", "element_id": "answer", "content": "x"}
    assert (await replace("answer", retagged, 2)).json()["code"] == 300312

    patch = {"partial_element": json.dumps({"content": "abc"}), "sequence": 2}
    patched = await emulator_http.patch(f"{element}/answer", json=patch, headers=auth)
    assert patched.json()["code"] == 0
    actions = [
        {
            "action": "partial_update_element",
            "params": {"element_id": "answer", "partial_element": {"content": "abcd"}},
        }
    ]
    batch = f"/open-apis/cardkit/v1/cards/{card_id}/batch_update"
    body = {"actions": json.dumps(actions), "sequence": 3}
    assert (await emulator_http.post(batch, json=body, headers=auth)).json()["code"] == 0
    shown = json.loads(emulator.cardkit.rendered(card_id))
    assert shown["body"]["elements"] == [{**new, "content": "abcd"}]
    # One action that fails undoes the batch: the card and its sequence stay as they were.
    wrong = [*actions, {"action": "partial_update_element", "params": {"element_id": "x"}}]
    body = {"actions": json.dumps(wrong), "sequence": 4}
    assert (await emulator_http.post(batch, json=body, headers=auth)).json()["code"] == 99992402
    assert json.loads(emulator.cardkit.rendered(card_id)) == shown
    kinds = [c.kind for c in emulator.cardkit.changes]
    assert kinds == ["create", "element", "patch_element", "batch"]


# --- failure injection -----------------------------------------------------------------------
async def test_rate_limit_fault(emulator: FeishuEmulator, emulator_http: httpx.AsyncClient) -> None:
    auth = await _auth(emulator_http, emulator)
    emulator.fail_next("GET", "/open-apis/bot/v3/info", FaultKind.RATE_LIMIT, reset_seconds=3)
    limited = await emulator_http.get("/open-apis/bot/v3/info", headers=auth)
    assert limited.status_code == 429
    assert limited.json()["code"] == 99991400
    assert limited.headers["x-ogw-ratelimit-reset"] == "3"
    assert (await emulator_http.get("/open-apis/bot/v3/info", headers=auth)).status_code == 200
    assert [(c.status, c.fault) for c in emulator.calls("/open-apis/bot")] == [
        (429, "rate_limit"),
        (200, None),
    ]


async def test_server_and_business_error_faults(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    auth = await _auth(emulator_http, emulator)
    user = await emulator.send_user_message("hi")
    reply = f"{MESSAGES}/{user.message_id}/reply"
    emulator.fail_next("POST", f"{MESSAGES}/*/reply", "server_error")
    emulator.fail_next(
        "POST",
        f"{MESSAGES}/*/reply",
        FaultKind.BUSINESS_ERROR,
        code=230020,
        msg="This operation triggers the frequency limit.",
    )
    body = {"msg_type": "text", "content": _text("x"), "uuid": "u"}
    assert (await emulator_http.post(reply, json=body, headers=auth)).status_code == 500
    business = await emulator_http.post(reply, json=body, headers=auth)
    assert (business.status_code, business.json()["code"]) == (400, 230020)
    assert (await emulator_http.post(reply, json=body, headers=auth)).json()["code"] == 0
    assert [(c.status, c.fault) for c in emulator.calls(reply)] == [
        (500, "server_error"),
        (400, "business_error"),
        (200, None),
    ]
    assert len(emulator.bot_messages()) == 1


async def test_timeout_fault_holds_the_answer_after_posting(
    emulator: FeishuEmulator, emulator_http: httpx.AsyncClient
) -> None:
    auth = await _auth(emulator_http, emulator)
    user = await emulator.send_user_message("hi")
    emulator.fail_next("POST", f"{MESSAGES}/*/reply", FaultKind.TIMEOUT, hold_seconds=1.0)
    body = {"msg_type": "text", "content": _text("slow"), "uuid": "slow-1"}
    path = f"{MESSAGES}/{user.message_id}/reply"
    with pytest.raises(httpx.ReadTimeout):
        await emulator_http.post(path, json=body, headers=auth, timeout=0.05)
    # The call happened although the client gave up; a retry with the same uuid gets it back.
    retried = await emulator_http.post(path, json=body, headers=auth)
    assert [m.message_id for m in emulator.bot_messages()] == [retried.json()["data"]["message_id"]]
    assert [c.fault for c in emulator.calls(path)] == ["timeout", None]


# --- event delivery --------------------------------------------------------------------------
async def test_encrypted_signed_delivery_is_accepted_by_lark() -> None:
    async with (
        LarkWebhook(ENCRYPT_KEY, VERIFICATION_TOKEN) as hook,
        FeishuEmulator(
            encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN, webhook_url=hook.url
        ) as emu,
    ):
        delivered = await emu.send_user_message(
            "look @_user_2",
            chat_type="group",
            mention_bot=True,
            mentions=[Mention("ou_alice", "Alice")],
        )
    assert delivered.first_attempt is not None
    assert delivered.first_attempt.ok
    ((headers, body),) = hook.requests
    # The body decrypts with lark's AESCipher to exactly the event the emulator reports …
    plaintext = AESCipher(ENCRYPT_KEY).decrypt_str(json.loads(body)["encrypt"])
    assert json.loads(plaintext) == delivered.payload
    # … and the signature is lark's: sha256(timestamp + nonce + encrypt_key + body).
    expected = hashlib.sha256(
        (
            headers["X-Lark-Request-Timestamp"] + headers["X-Lark-Request-Nonce"] + ENCRYPT_KEY
        ).encode()
        + body
    ).hexdigest()
    assert headers["X-Lark-Signature"] == expected
    (event,) = hook.messages
    assert event.header.event_type == "im.message.receive_v1"
    assert event.header.event_id == delivered.event_id
    assert event.header.token == VERIFICATION_TOKEN
    message = event.event.message
    assert (message.message_id, message.chat_id, message.chat_type) == (
        delivered.message_id,
        delivered.chat_id,
        "group",
    )
    assert json.loads(message.content) == {"text": "@_user_1 look @_user_2"}
    assert [(m.key, m.id.open_id, m.name) for m in message.mentions] == [
        ("@_user_1", emu.bot_open_id, emu.bot_name),
        ("@_user_2", "ou_alice", "Alice"),
    ]
    assert event.event.sender.sender_id.open_id == emu.default_user_open_id
    assert event.event.sender.sender_type == "user"


async def test_plaintext_delivery_without_encrypt_key() -> None:
    async with (
        LarkWebhook(verification_token=VERIFICATION_TOKEN) as hook,
        FeishuEmulator(verification_token=VERIFICATION_TOKEN, webhook_url=hook.url) as emu,
    ):
        delivered = await emu.send_user_message("plain", thread_id="omt_1", root_id="om_root")
    ((headers, body),) = hook.requests
    assert json.loads(body) == delivered.payload
    assert "X-Lark-Signature" not in headers
    message = delivered.payload["event"]["message"]
    assert (message["thread_id"], message["root_id"], message["chat_type"]) == (
        "omt_1",
        "om_root",
        "p2p",
    )
    assert hook.messages[0].event.message.message_id == delivered.message_id


async def test_a_tampered_body_fails_lark_signature_check() -> None:
    async with (
        LarkWebhook(ENCRYPT_KEY, VERIFICATION_TOKEN) as hook,
        FeishuEmulator(
            encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN, webhook_url=hook.url
        ) as emu,
    ):
        delivered = await emu.send_user_message("hi")
        envelope = emu.build_envelope(delivered.payload)
        good = await emu.post_raw(envelope)
        sealed = json.loads(envelope.body)
        resealed = emu.build_envelope(delivered.payload)  # a valid ciphertext, wrong signature
        tampered = json.dumps({"encrypt": json.loads(resealed.body)["encrypt"]}).encode()
        bad = await emu.post_raw(tampered, envelope.headers)
        assert sealed["encrypt"] != json.loads(resealed.body)["encrypt"]  # fresh IV per push
    assert good.status == 200
    assert bad.status == 500
    assert len(hook.messages) == 2  # the first push and the good raw post
    assert [a.manual for a in emu.deliveries()] == [False, True, True]


async def test_url_verification_echoes_the_challenge() -> None:
    for key in (ENCRYPT_KEY, ""):
        async with (
            LarkWebhook(key, VERIFICATION_TOKEN) as hook,
            FeishuEmulator(
                encrypt_key=key, verification_token=VERIFICATION_TOKEN, webhook_url=hook.url
            ) as emu,
        ):
            result = await emu.verify_url("challenge-123")
        assert result.ok, result
    async with (
        LarkWebhook(ENCRYPT_KEY, "another-token") as hook,
        FeishuEmulator(
            encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN, webhook_url=hook.url
        ) as emu,
    ):
        assert not (await emu.verify_url()).ok


async def test_a_non_200_answer_is_redelivered_on_feishus_ladder() -> None:
    scale = 0.00002  # 15 s, 5 min, 1 h, 6 h -> 0.3 ms, 6 ms, 72 ms, 432 ms
    async with (
        LarkWebhook(ENCRYPT_KEY, VERIFICATION_TOKEN, statuses=[500, 503, 500, 500, 200]) as hook,
        FeishuEmulator(
            encrypt_key=ENCRYPT_KEY,
            verification_token=VERIFICATION_TOKEN,
            webhook_url=hook.url,
            time_scale=scale,
        ) as emu,
    ):
        delivered = await emu.send_user_message("hi")
        attempts = await emu.wait_for(
            lambda: (
                (a := emu.deliveries(delivered.event_id))[-1].ok
                and not emu.redeliveries_pending
                and a
            )
        )
    assert [(a.attempt, a.status, a.outcome) for a in attempts] == [
        (1, 500, "non_200"),
        (2, 503, "non_200"),
        (3, 500, "non_200"),
        (4, 500, "non_200"),
        (5, 200, "ok"),
    ]
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(attempts)]
    for gap, rung in zip(gaps, FEISHU_REDELIVERY_LADDER_S, strict=True):
        assert gap >= rung * scale
    # The same event each time (same event_id), sealed afresh; lark accepted the last one.
    assert [m.header.event_id for m in hook.messages] == [delivered.event_id]


async def test_the_ladder_ends_after_four_redeliveries() -> None:
    async with (
        LarkWebhook(statuses=[500] * 10) as hook,
        FeishuEmulator(
            webhook_url=hook.url, redelivery_ladder_seconds=(1, 2, 3, 4), time_scale=0.001
        ) as emu,
    ):
        delivered = await emu.send_user_message("hi")
        await emu.wait_for(lambda: not emu.redeliveries_pending)
        assert [a.attempt for a in emu.deliveries(delivered.event_id)] == [1, 2, 3, 4, 5]
        manual = await emu.redeliver(delivered.event_id)
    assert (manual.attempt, manual.manual, manual.status) == (6, True, 500)


async def test_a_late_answer_counts_as_failed_and_is_redelivered() -> None:
    async with (
        LarkWebhook(delay=0.3) as hook,
        FeishuEmulator(
            webhook_url=hook.url,
            deadline_seconds=0.05,
            redelivery_ladder_seconds=(1,),
            time_scale=0.001,
        ) as emu,
    ):
        delivered = await emu.send_user_message("hi")
        attempts = await emu.wait_for(
            lambda: len(a := emu.deliveries(delivered.event_id)) == 2 and a
        )
    assert [(a.outcome, a.status) for a in attempts] == [("timeout", None), ("timeout", None)]
    assert len(hook.requests) == 2


async def test_events_wait_for_a_webhook_set_after_start() -> None:
    async with FeishuEmulator() as emu, LarkWebhook() as hook:
        early = await emu.send_user_message("before the bridge is up")
        emu.webhook_url = hook.url
        attempt = await emu.redeliver(early.event_id)
    assert early.first_attempt is None
    assert attempt.ok
    assert hook.messages[0].event.message.message_id == early.message_id


# --- card callbacks --------------------------------------------------------------------------
async def _post_card(emu: FeishuEmulator, client: httpx.AsyncClient, user_message_id: str) -> str:
    auth = await _auth(client, emu)
    answer = await client.post(
        f"{MESSAGES}/{user_message_id}/reply",
        json={
            "msg_type": "interactive",
            "content": json.dumps(_card("Approve?", {"decision": "allow"})),
        },
        headers=auth,
    )
    return str(answer.json()["data"]["message_id"])


async def test_a_card_click_applies_the_toast_and_the_returned_card() -> None:
    decided = _card("Allowed by Emulated User", {"decision": "none"})
    answer = {
        "toast": {"type": "success", "content": "已允许"},
        "card": {"type": "raw", "data": decided},
    }
    async with (
        LarkWebhook(ENCRYPT_KEY, VERIFICATION_TOKEN, card_answer=answer) as hook,
        FeishuEmulator(
            encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN, webhook_url=hook.url
        ) as emu,
        httpx.AsyncClient(base_url=emu.url, trust_env=False) as client,
    ):
        user = await emu.send_user_message("rm the build dir")
        card_id = await _post_card(emu, client, user.message_id)
        result = await emu.click_card(card_id, {"decision": "allow"}, "ou_approver")
        assert result.ok
        assert result.card_replaced
        assert result.toast is not None
        assert (result.toast.type, result.toast.content) == (
            "success",
            "已允许",
        )
        assert emu.message(card_id).card == decided
    (action,) = hook.card_actions
    assert action.header.event_type == "card.action.trigger"
    assert action.event.action.value == {"decision": "allow"}
    assert action.event.action.tag == "button"
    assert action.event.operator.open_id == "ou_approver"
    assert (action.event.context.open_message_id, action.event.context.open_chat_id) == (
        card_id,
        user.chat_id,
    )


async def test_a_late_or_failed_card_callback_shows_feishus_error_toast() -> None:
    async with (
        LarkWebhook(delay=0.3) as slow,
        FeishuEmulator(webhook_url=slow.url, card_deadline_seconds=0.05) as emu,
        httpx.AsyncClient(base_url=emu.url, trust_env=False) as client,
    ):
        user = await emu.send_user_message("hi")  # late too, but only the click matters here
        card_id = await _post_card(emu, client, user.message_id)
        before = emu.message(card_id).content
        late = await emu.click_card(card_id, {"decision": "allow"})
        emu.webhook_url = "http://127.0.0.1:9/closed"  # nothing listens on the discard port
        refused = await emu.click_card(card_id, {"decision": "allow"})
        assert emu.message(card_id).content == before
    assert (late.ok, late.status, late.error) == (False, None, "timeout (status None)")
    assert late.toast is not None
    assert late.toast.content == CALLBACK_ERROR_TOAST
    assert not refused.ok
    assert not refused.card_replaced
    assert [c.ok for c in emu.card_callbacks()] == [False, False]


# --- the chat page ---------------------------------------------------------------------------
async def test_the_chat_page_and_its_controls() -> None:
    async with (
        LarkWebhook() as hook,
        FeishuEmulator(webhook_url=hook.url, scenarios=["/help"]) as emu,
        httpx.AsyncClient(base_url=emu.url, trust_env=False) as client,
    ):
        page = (await client.get("/")).text
        for needle in ('id="composer"', 'id="send"', "/_emulator/static/app.js"):
            assert needle in page
        assert "createElement" in (await client.get("/_emulator/static/app.js")).text
        state = (await client.get("/_emulator/state")).json()
        assert state["scenarios"] == ["/help"]
        assert state["chats"]["p2p"] == emu.p2p_chat_id

        revision = emu.revision
        poll = asyncio.create_task(
            client.get(
                "/_emulator/timeline", params={"chat_id": emu.group_chat_id, "since": revision}
            )
        )
        sent = await client.post(
            "/_emulator/send", json={"text": "hello", "chat_type": "group", "mention_bot": True}
        )
        assert sent.json()["delivered"] is True
        timeline = (await poll).json()
    assert timeline["revision"] > revision
    (message,) = timeline["messages"]
    assert (message["sender_type"], message["text"]) == ("user", f"@{emu.bot_name} hello")
    assert hook.messages[0].event.message.chat_type == "group"


# --- guard rails -----------------------------------------------------------------------------
def test_the_emulator_refuses_non_loopback_hosts() -> None:
    with pytest.raises(ValueError, match="loopback"):
        FeishuEmulator(host="0.0.0.0")


async def test_wait_for_names_what_it_waited_on(emulator: FeishuEmulator) -> None:
    assert emulator.url.startswith("http://127.0.0.1:")
    with pytest.raises(TimeoutError, match="condition not met"):
        await emulator.wait_for(lambda: False, timeout=0.01)
