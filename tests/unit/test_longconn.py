"""Long connection: thread/loop handoff, SDK payload conversion, and a run against a tiny
local server that speaks lark's endpoint discovery and protobuf frame protocol."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

# Imported first: it loads lark-oapi without leaving a stray event loop behind.
from bridge.feishu.events import BotIdentity

from bridge.feishu import sdk_import  # noqa: F401  # isort: skip
import lark_oapi  # isort: skip
from lark_oapi.api.application.v6 import P2ApplicationBotMenuV6  # isort: skip
from lark_oapi.api.im.v1 import P2ImMessageReceiveV1  # isort: skip
from lark_oapi.event.callback.model.p2_card_action_trigger import (  # isort: skip
    P2CardActionTrigger,
    P2CardActionTriggerResponse,
)
from lark_oapi.ws.pb.pbbp2_pb2 import Frame  # isort: skip

from bridge.feishu.events import (
    CardAction,
    CardActionReply,
    InboundMessage,
    MenuClick,
    MessageRecall,
    parse_event,
)
from bridge.feishu.longconn import (
    LARK_LOGGER,
    ConnectionState,
    HandoffError,
    LongConnection,
    reply_to_sdk,
    sdk_to_payload,
)

BOT = "ou_bot"
SECRET_TEXT = "words nobody may log"
APP_SECRET = "app-secret-for-tests"
TICKET = "ticket-secret-for-tests"


class RecordingHandler:
    def __init__(self) -> None:
        self.messages: list[InboundMessage] = []
        self.actions: list[CardAction] = []
        self.clicks: list[MenuClick] = []
        self.threads: list[int] = []
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.delay = 0.0
        self.cancelled = asyncio.Event()
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None

    async def _enter(self) -> None:
        self.threads.append(threading.get_ident())
        self.loops.append(asyncio.get_running_loop())
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            try:
                await asyncio.sleep(self.delay)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if self.fail is not None:
            raise self.fail

    async def on_message(self, message: InboundMessage) -> None:
        await self._enter()
        self.messages.append(message)

    async def on_recall(self, recall: MessageRecall) -> None:
        await self._enter()

    async def on_menu(self, click: MenuClick) -> None:
        await self._enter()
        self.clicks.append(click)

    async def on_card_action(self, action: CardAction) -> CardActionReply:
        await self._enter()
        self.actions.append(action)
        return CardActionReply(toast_type="info", toast_text="ok", card={"schema": "2.0"})


def message_payload(event_id: str = "ev_1") -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id,
            "event_type": "im.message.receive_v1",
            "create_time": "1700000000000",
            "token": "",
            "app_id": "cli_test",
            "tenant_key": "t",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": "ou_alice", "union_id": "on_a", "user_id": "u_a"},
                "sender_type": "user",
                "tenant_key": "t",
            },
            "message": {
                "message_id": "om_1",
                "root_id": "om_root",
                "parent_id": "om_root",
                "thread_id": "omt_1",
                "create_time": "1700000000000",
                "chat_id": "oc_1",
                "chat_type": "group",
                "message_type": "text",
                "content": json.dumps({"text": f"@_user_1 {SECRET_TEXT} @_user_2"}),
                "mentions": [
                    {"key": "@_user_1", "id": {"open_id": BOT}, "name": "Bot", "tenant_key": "t"},
                    {"key": "@_user_2", "id": {"open_id": "ou_bob"}, "name": "Bob"},
                ],
            },
        },
    }


def card_payload() -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {"event_id": "ev_card", "event_type": "card.action.trigger", "token": ""},
        "event": {
            "operator": {"open_id": "ou_alice", "union_id": "on_a"},
            "token": "c-1",
            "action": {"value": {"choice": "allow_once", "n": 2}, "tag": "button"},
            "host": "im_message",
            "context": {"open_message_id": "om_card", "open_chat_id": "oc_1"},
        },
    }


def menu_payload() -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": "ev_menu",
            "event_type": "application.bot.menu_v6",
            "create_time": "1700000000000",
            "token": "",
            "app_id": "cli_test",
            "tenant_key": "t",
        },
        "event": {
            "operator": {
                "operator_name": "Alice",
                "operator_id": {"open_id": "ou_alice", "union_id": "on_a", "user_id": "u_a"},
            },
            "event_key": "stop",
            "timestamp": 1700000000,
        },
    }


MENU_CLICK = MenuClick(
    event_id="ev_menu",
    operator_open_id="ou_alice",
    event_key="stop",
    app_id="cli_test",
    create_time_ms=1700000000000,
)


def sdk_menu(payload: dict[str, Any]) -> Any:
    return lark_oapi.JSON.unmarshal(json.dumps(payload), P2ApplicationBotMenuV6)


def sdk_message(payload: dict[str, Any]) -> Any:
    return lark_oapi.JSON.unmarshal(json.dumps(payload), P2ImMessageReceiveV1)


def sdk_card(payload: dict[str, Any]) -> Any:
    return lark_oapi.JSON.unmarshal(json.dumps(payload), P2CardActionTrigger)


def state(lc: LongConnection) -> ConnectionState:
    """Read the state through a call, so the type checker does not narrow it between reads."""
    return lc.state


def connection(handler: RecordingHandler, **kwargs: Any) -> LongConnection:
    return LongConnection(
        "cli_test",
        APP_SECRET,
        "http://127.0.0.1:9",
        handler,
        asyncio.get_running_loop(),
        bot=BotIdentity(BOT),
        **kwargs,
    )


# --- conversion ----------------------------------------------------------------------------


def test_sdk_message_converts_to_the_same_model_as_the_webhook_path() -> None:
    raw = message_payload()
    via_sdk = parse_event(sdk_to_payload(sdk_message(raw)), bot_open_id=BOT)
    assert via_sdk == parse_event(raw, bot_open_id=BOT)
    assert isinstance(via_sdk, InboundMessage)
    assert via_sdk.text == f"{SECRET_TEXT} @Bob"
    assert via_sdk.mentions_bot is True
    assert via_sdk.thread_id == "omt_1"


def test_sdk_card_action_converts_to_the_same_model_as_the_webhook_path() -> None:
    raw = card_payload()
    via_sdk = parse_event(sdk_to_payload(sdk_card(raw)))
    assert via_sdk == parse_event(raw)
    assert isinstance(via_sdk, CardAction)
    assert via_sdk.value == {"choice": "allow_once", "n": 2}


def test_sdk_menu_click_converts_to_the_same_model_as_the_webhook_path() -> None:
    assert parse_event(sdk_to_payload(sdk_menu(menu_payload()))) == MENU_CLICK
    assert parse_event(menu_payload()) == MENU_CLICK


async def test_menu_click_handler_runs_on_the_main_loop() -> None:
    handler = RecordingHandler()
    lc = connection(handler)
    await asyncio.to_thread(lc.on_sdk_menu, sdk_menu(menu_payload()))
    assert handler.clicks == [MENU_CLICK]
    assert handler.loops == [asyncio.get_running_loop()]


def test_reply_converts_to_the_sdk_response() -> None:
    reply = CardActionReply(toast_type="success", toast_text="done", card={"a": 1})
    response = reply_to_sdk(reply)
    assert isinstance(response, P2CardActionTriggerResponse)
    assert json.loads(lark_oapi.JSON.marshal(response)) == reply.to_response()


# --- handoff between the SDK thread and the main loop --------------------------------------


async def test_message_handler_runs_on_the_main_loop() -> None:
    handler = RecordingHandler()
    lc = connection(handler)
    await asyncio.to_thread(lc.on_sdk_message, sdk_message(message_payload()))
    assert [m.event_id for m in handler.messages] == ["ev_1"]
    assert handler.threads == [threading.get_ident()]
    assert handler.loops == [asyncio.get_running_loop()]


async def test_card_answer_returns_to_the_sdk_thread() -> None:
    handler = RecordingHandler()
    lc = connection(handler)
    response = await asyncio.to_thread(lc.on_sdk_card_action, sdk_card(card_payload()))
    assert isinstance(response, P2CardActionTriggerResponse)
    assert response.toast.type == "info"
    assert response.toast.content == "ok"
    assert response.card.data == {"schema": "2.0"}
    assert handler.threads == [threading.get_ident()]


async def test_slow_handler_times_out_within_the_deadline_and_is_cancelled() -> None:
    handler = RecordingHandler()
    handler.delay = 5.0
    lc = connection(handler, deadline=0.05)
    started = time.monotonic()
    with pytest.raises(HandoffError, match="exceeded"):
        await asyncio.to_thread(lc.on_sdk_card_action, sdk_card(card_payload()))
    assert time.monotonic() - started < 1.0
    await asyncio.wait_for(handler.cancelled.wait(), 1.0)


async def test_a_late_message_hand_over_finishes_after_the_sdk_is_told_to_retry() -> None:
    # Cancelling it could cut it between its store commit and the hand-off, stranding the
    # message: the redelivery would be taken as a duplicate and never run.
    handler = RecordingHandler()
    handler.gate = asyncio.Event()
    lc = connection(handler, deadline=0.05)
    with pytest.raises(HandoffError, match="exceeded"):
        await asyncio.to_thread(lc.on_sdk_message, sdk_message(message_payload()))
    handler.gate.set()
    for _ in range(100):
        if handler.messages:
            break
        await asyncio.sleep(0)
    assert [m.event_id for m in handler.messages] == ["ev_1"]


async def test_failing_handler_raises_into_the_sdk(caplog: pytest.LogCaptureFixture) -> None:
    handler = RecordingHandler()
    handler.fail = RuntimeError("store is down")
    lc = connection(handler)
    with (
        caplog.at_level(logging.ERROR, logger="bridge.feishu.longconn"),
        pytest.raises(RuntimeError, match="store is down"),
    ):
        await asyncio.to_thread(lc.on_sdk_message, sdk_message(message_payload()))
    assert "asking for redelivery" in caplog.text
    assert SECRET_TEXT not in caplog.text


async def test_closed_main_loop_is_a_handoff_error() -> None:
    other = asyncio.new_event_loop()
    other.close()
    handler = RecordingHandler()
    lc = LongConnection("cli", "s", "http://127.0.0.1:9", handler, other)
    with pytest.raises(HandoffError, match="not running"):
        lc.on_sdk_message(sdk_message(message_payload()))


async def test_sdk_log_lines_are_redacted_and_drive_the_state() -> None:
    lc = connection(RecordingHandler())
    lark_logger = logging.getLogger(LARK_LOGGER)
    lark_logger.addFilter(lc._log_filter)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(level=logging.DEBUG)
    lark_logger.addHandler(keep)
    old_level = lark_logger.level
    lark_logger.setLevel(logging.DEBUG)
    try:
        lark_logger.info("connected to wss://x.test/ws?device_id=d&ticket=%s [conn_id=d]", TICKET)
        assert state(lc) is ConnectionState.CONNECTED
        lark_logger.warning("ping failed, err: wss://x.test/ws?ticket=%s", TICKET)
        lark_logger.debug("receive message, message_type: event, payload: {%s}", SECRET_TEXT)
        lark_logger.error("receive message loop exit, err: closed")
        assert state(lc) is ConnectionState.RECONNECTING
    finally:
        lark_logger.removeFilter(lc._log_filter)
        lark_logger.removeHandler(keep)
        lark_logger.setLevel(old_level)
    # Below WARNING the SDK's own records are dropped (ours say it instead).
    assert [r.levelno for r in records] == [logging.WARNING, logging.ERROR]
    text = " ".join(r.getMessage() for r in records)
    assert TICKET not in text
    assert "?<redacted>" in text


# --- against a local server speaking lark's protocol ---------------------------------------


class FakeLarkServer:
    """Endpoint discovery (`POST /callback/ws/endpoint`) and the WebSocket frame protocol."""

    def __init__(self) -> None:
        self.discovery_bodies: list[dict[str, Any]] = []
        self.socket: web.WebSocketResponse | None = None
        self.connected = asyncio.Event()
        self.closed = asyncio.Event()
        self.responses: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.pings = 0
        self.server: TestServer | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/callback/ws/endpoint", self.endpoint)
        app.router.add_get("/ws", self.websocket)
        return app

    async def endpoint(self, request: web.Request) -> web.Response:
        self.discovery_bodies.append(await request.json())
        assert self.server is not None
        url = (
            f"ws://127.0.0.1:{self.server.port}/ws?device_id=dev1&service_id=7"
            f"&access_key=ak&ticket={TICKET}"
        )
        config = {
            "ReconnectCount": 1,
            "ReconnectInterval": 1,
            "ReconnectNonce": 0,
            "PingInterval": 120,
        }
        return web.json_response(
            {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": config}}
        )

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.socket = ws
        self.connected.set()
        async for msg in ws:
            if msg.type != WSMsgType.BINARY:
                continue
            frame = Frame()
            frame.ParseFromString(msg.data)
            headers = {h.key: h.value for h in frame.headers}
            if frame.method == 0:  # control: the client's ping
                self.pings += 1
                continue
            future = self.responses.get(headers["message_id"])
            if future is not None and not future.done():
                future.set_result(json.loads(frame.payload))
        self.closed.set()
        return ws

    async def push_event(self, message_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Send one data frame and wait for the client's answer frame."""
        assert self.socket is not None
        frame = Frame()
        frame.SeqID, frame.LogID, frame.service, frame.method = 1, 1, 7, 1
        for key, value in {
            "type": "event",
            "message_id": message_id,
            "trace_id": "trace-1",
            "sum": "1",
            "seq": "0",
        }.items():
            header = frame.headers.add()
            header.key, header.value = key, value
        frame.payload = json.dumps(payload).encode()
        self.responses[message_id] = asyncio.get_running_loop().create_future()
        await self.socket.send_bytes(frame.SerializeToString())
        return await asyncio.wait_for(self.responses[message_id], 5.0)


@pytest.fixture
async def fake_lark(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeLarkServer]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    fake = FakeLarkServer()
    fake.server = TestServer(fake.app(), host="127.0.0.1", port=0)
    await fake.server.start_server()
    yield fake
    await fake.server.close()


async def test_long_connection_end_to_end(
    fake_lark: FakeLarkServer, caplog: pytest.LogCaptureFixture
) -> None:
    assert fake_lark.server is not None
    handler = RecordingHandler()
    lc = LongConnection(
        "cli_test",
        APP_SECRET,
        f"http://127.0.0.1:{fake_lark.server.port}",
        handler,
        asyncio.get_running_loop(),
        bot=BotIdentity(BOT),
        stop_timeout=5.0,
    )
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    lc.start()
    assert time.monotonic() - started < 0.5  # start() hands off to the thread at once

    # The main loop keeps running while the SDK connects on its own thread.
    ticks = 0
    while not fake_lark.connected.is_set():
        await asyncio.sleep(0.005)
        ticks += 1
        assert time.monotonic() - started < 10
    assert ticks > 0
    assert await lc.wait_connected(5.0)
    assert lc.connected
    assert fake_lark.discovery_bodies == [{"AppID": "cli_test", "AppSecret": APP_SECRET}]

    answer = await fake_lark.push_event("m-1", message_payload())
    assert answer["code"] == 200
    assert [m.event_id for m in handler.messages] == ["ev_1"]
    assert handler.messages[0].text == f"{SECRET_TEXT} @Bob"
    assert handler.threads == [threading.get_ident()]

    answer = await fake_lark.push_event("m-2", card_payload())
    assert answer["code"] == 200
    assert json.loads(base64.b64decode(answer["data"])) == {
        "toast": {"type": "info", "content": "ok"},
        "card": {"type": "raw", "data": {"schema": "2.0"}},
    }

    answer = await fake_lark.push_event("m-menu", menu_payload())  # the bot menu's click
    assert answer["code"] == 200
    assert handler.clicks == [MENU_CLICK]

    handler.fail = RuntimeError("store is down")
    answer = await fake_lark.push_event("m-3", message_payload("ev_3"))
    assert answer["code"] == 500  # Feishu redelivers

    await lc.stop()
    assert state(lc) is ConnectionState.STOPPED  # and so `connected` is False
    await asyncio.wait_for(fake_lark.closed.wait(), 5.0)

    # Everything the bridge process logs (the fake server's own access log aside).
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name != "aiohttp.access")
    assert "feishu long connection: connected" in logged
    assert "GET /ws?<redacted>" in logged  # websockets' DEBUG handshake line, redacted
    assert TICKET not in logged
    assert APP_SECRET not in logged
    assert SECRET_TEXT not in logged


async def test_stop_before_connecting_does_not_hang() -> None:
    handler = RecordingHandler()
    lc = connection(handler, stop_timeout=3.0)  # nothing listens on port 9
    lc.start()
    started = time.monotonic()
    await lc.stop()
    assert time.monotonic() - started < 3.0
    assert state(lc) is ConnectionState.STOPPED
