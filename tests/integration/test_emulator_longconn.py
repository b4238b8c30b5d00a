"""Each app's own long connection to the emulator: endpoint discovery with that app's
credentials, protobuf frames on a real WebSocket, each app told only its own events. Most
tests use a few-line client (`WsClient`); one runs the bridge's `LongConnection` (lark-oapi's
ws client) against it, so "the emulator agrees with itself" cannot pass for "lark-oapi can
talk to it"."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any

import aiohttp
import pytest

from bridge.devtools.emulator import AppSpec, FeishuEmulator
from bridge.devtools.emulator.frames import CONTROL, Frame

CLAUDE, CODEX = "cli_claude000000001", "cli_codex0000000002"
APPS = (
    AppSpec(CLAUDE, "claude-secret", bot_name="Claude"),
    AppSpec(CODEX, "codex-secret", bot_name="Codex"),
)
ENDPOINT = "/callback/ws/endpoint"


async def discover(emu: FeishuEmulator, app_id: str, secret: str) -> dict[str, Any]:
    """The endpoint's answer to an app's credentials."""
    body = {"AppID": app_id, "AppSecret": secret}
    async with (
        aiohttp.ClientSession(trust_env=False) as http,
        http.post(emu.url + ENDPOINT, json=body) as response,
    ):
        answer: dict[str, Any] = await response.json()
        return answer


class WsClient:
    """What lark-oapi's ws client does, in a few lines: ask the endpoint for a URL, open the
    WebSocket, answer each event frame on its message_id (`answer`: the `data` of a card
    callback's answer)."""

    def __init__(
        self, emu: FeishuEmulator, app_id: str, secret: str, answer: Mapping[str, Any] = {}
    ) -> None:
        self.emu, self.app_id, self.secret, self.answer = emu, app_id, secret, dict(answer)
        self.events: list[dict[str, Any]] = []
        self.pongs: list[Frame] = []
        self.ponged = asyncio.Event()
        self._http = aiohttp.ClientSession(trust_env=False)
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> WsClient:
        found = await discover(self.emu, self.app_id, self.secret)
        assert found["code"] == 0, found
        self._ws = await self._http.ws_connect(found["data"]["URL"])
        self._reader = asyncio.create_task(self._read())
        await self.emu.wait_for(lambda: self.emu.long_connections(self.app_id))
        return self

    async def ping(self) -> None:
        assert self._ws is not None
        await self._ws.send_bytes(Frame(method=CONTROL, headers=[("type", "ping")]).encode())

    async def _read(self) -> None:
        assert self._ws is not None
        async for msg in self._ws:
            frame = Frame.decode(msg.data)
            if frame.method == CONTROL:
                self.pongs.append(frame)
                self.ponged.set()
                continue
            self.events.append(json.loads(frame.payload or b""))
            reply: dict[str, Any] = {"code": 200}
            if self.answer:
                reply["data"] = base64.b64encode(json.dumps(self.answer).encode()).decode()
            frame.payload = json.dumps(reply).encode()
            await self._ws.send_bytes(frame.encode())

    def texts(self) -> list[str]:
        return [
            json.loads(e["event"]["message"]["content"])["text"]
            for e in self.events
            if e["header"]["event_type"] == "im.message.receive_v1"
        ]

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await self._reader
        await self._http.close()


@pytest.fixture
async def emu() -> AsyncIterator[FeishuEmulator]:
    async with FeishuEmulator(apps=APPS, time_scale=0.001) as running:
        yield running


async def test_each_app_opens_its_own_long_connection_with_its_own_credentials(
    emu: FeishuEmulator,
) -> None:
    wrong = await discover(emu, CODEX, "claude-secret")
    assert (wrong["code"], wrong["msg"]) == (10014, "app secret invalid")
    assert emu.long_connection_refused(CODEX) == "app secret invalid"
    nobody = await discover(emu, "cli_nobody", "x")
    assert nobody["code"] == 10003

    async with WsClient(emu, CLAUDE, "claude-secret") as claude:
        assert [c.app_id for c in emu.long_connections()] == [CLAUDE]
        async with WsClient(emu, CODEX, "codex-secret") as codex:
            assert emu.long_connection_refused(CODEX) is None
            assert [c.app_id for c in emu.long_connections()] == [CLAUDE, CODEX]
            await codex.ping()
            await asyncio.wait_for(codex.ponged.wait(), 5.0)
            assert [c.pings for c in emu.long_connections()] == [0, 1]
            assert codex.pongs[0].header("type") == "pong"
            assert json.loads(codex.pongs[0].payload or b"")["PingInterval"] == 120
            assert claude.pongs == []
        await emu.wait_for(lambda: len(emu.long_connections()) == 1)


async def test_a_group_message_goes_over_the_long_connections_of_the_bots_it_mentions(
    emu: FeishuEmulator,
) -> None:
    async with (
        WsClient(emu, CLAUDE, "claude-secret") as claude,
        WsClient(emu, CODEX, "codex-secret") as codex,
    ):
        one = await emu.send_user_message("for codex", chat_type="group", mention_apps=[CODEX])
        assert one.first_attempt is not None
        assert (one.first_attempt.ok, one.first_attempt.app_id) == (True, CODEX)
        assert one.first_attempt.url == f"longconn:{emu.long_connections(CODEX)[0].conn_id}"
        both = await emu.send_user_message(
            "for both", chat_type="group", mention_apps=[CLAUDE, CODEX]
        )
        assert both.app_ids == (CLAUDE, CODEX)
        assert (claude.texts(), codex.texts()) == (
            ["@_user_1 @_user_2 for both"],
            ["@_user_1 for codex", "@_user_1 @_user_2 for both"],
        )
        assert [e["header"]["app_id"] for e in codex.events] == [CODEX, CODEX]
        own = [m["id"]["open_id"] for m in codex.events[1]["event"]["message"]["mentions"]]
        assert own[1] == emu.app(CODEX).bot_open_id
        sender = codex.events[0]["event"]["sender"]["sender_id"]["open_id"]
        assert sender == emu.open_id_in(CODEX, emu.default_user_open_id)

    # Connections closed, no webhook: the app has nowhere for its events to go.
    gone = await emu.send_user_message("anyone?", chat_type="group", mention_apps=[CODEX])
    assert (gone.app_ids, gone.first_attempt) == ((CODEX,), None)


async def test_a_card_click_goes_over_its_apps_long_connection_only(emu: FeishuEmulator) -> None:
    toast = {"toast": {"type": "success", "content": "claude decided"}}
    async with (
        WsClient(emu, CLAUDE, "claude-secret", answer=toast) as claude,
        WsClient(emu, CODEX, "codex-secret") as codex,
        aiohttp.ClientSession(trust_env=False) as http,
    ):
        app = emu.app(CLAUDE)
        token = await http.post(
            emu.url + "/open-apis/auth/v3/tenant_access_token/internal",
            json={"app_id": CLAUDE, "app_secret": app.app_secret},
        )
        auth = {"Authorization": f"Bearer {(await token.json())['tenant_access_token']}"}
        card = {"schema": "2.0", "body": {"elements": []}}
        posted = await http.post(
            emu.url + "/open-apis/im/v1/messages",
            params={"receive_id_type": "chat_id"},
            json={
                "receive_id": emu.group_chat_id,
                "msg_type": "interactive",
                "content": json.dumps(card),
            },
            headers=auth,
        )
        message_id = (await posted.json())["data"]["message_id"]
        result = await emu.click_card(message_id, {"ok": 1})
        assert (result.ok, result.app_id, result.toast) == (True, CLAUDE, _toast("claude decided"))
        assert [e["header"]["event_type"] for e in claude.events] == ["card.action.trigger"]
        assert codex.events == []


def _toast(content: str) -> Any:
    from bridge.devtools.emulator import Toast

    return Toast("success", content)


async def test_an_apps_events_spread_over_its_connections_and_survive_a_dropped_one(
    emu: FeishuEmulator,
) -> None:
    async with (
        WsClient(emu, CODEX, "codex-secret") as first,
        WsClient(emu, CODEX, "codex-secret") as second,
    ):
        assert len(emu.long_connections(CODEX)) == 2
        for n in range(8):
            await emu.send_user_message(f"m{n}", app_id=CODEX)
        assert sorted(first.texts() + second.texts()) == [f"m{n}" for n in range(8)]
        # Each event once, on one connection at random.
        assert first.texts()
        assert second.texts()

        assert await emu.drop_long_connections(CODEX) == 2
        await emu.wait_for(lambda: not emu.long_connections(CODEX))
        assert (await emu.send_user_message("later", app_id=CODEX)).first_attempt is None


async def test_lark_oapis_ws_client_takes_one_apps_events_from_the_emulator(
    emu: FeishuEmulator,
) -> None:
    from bridge.feishu.events import (
        BotIdentity,
        CardAction,
        CardActionReply,
        InboundMessage,
        MenuClick,
        MessageRecall,
    )
    from bridge.feishu.longconn import LongConnection

    class Handler:
        def __init__(self) -> None:
            self.messages: list[InboundMessage] = []
            self.clicks: list[MenuClick] = []

        async def on_message(self, message: InboundMessage) -> None:
            self.messages.append(message)

        async def on_card_action(self, action: CardAction) -> CardActionReply:
            return CardActionReply()

        async def on_recall(self, recall: MessageRecall) -> None:
            pass

        async def on_menu(self, click: MenuClick) -> None:
            self.clicks.append(click)

    handler = Handler()
    codex = emu.app(CODEX)
    connection = LongConnection(
        CODEX,
        codex.app_secret,
        emu.url,
        handler,
        asyncio.get_running_loop(),
        bot=BotIdentity(codex.bot_open_id, codex.bot_name),
    )
    connection.start()
    try:
        assert await connection.wait_connected(10.0)
        await emu.wait_for(lambda: emu.long_connections(CODEX), timeout=10.0)
        pushed = await emu.send_user_message(
            "hello codex", chat_type="group", mention_apps=[CLAUDE, CODEX]
        )
        assert pushed.to(CODEX).first_attempt is not None
        assert pushed.to(CODEX).first_attempt.ok
        await emu.wait_for(lambda: handler.messages)
        [message] = handler.messages
        assert (message.chat_id, message.event_id) == (emu.group_chat_id, pushed.to(CODEX).event_id)
        assert message.sender_open_id == emu.open_id_in(CODEX, emu.default_user_open_id)
        clicked = await emu.click_menu("status", app_id=CODEX)
        assert clicked is not None
        assert clicked.ok
        await emu.wait_for(lambda: handler.clicks)
    finally:
        await connection.stop()
