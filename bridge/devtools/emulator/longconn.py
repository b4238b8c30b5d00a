"""Feishu's long connection (长连接), each app's its own: how lark-oapi's `ws.Client` finds
it and what it says on it.

1. `POST /callback/ws/endpoint` with `{"AppID", "AppSecret"}` answers a one-time WebSocket
   URL (`device_id`, `service_id`, `ticket` in its query) and the `ClientConfig` (reconnect
   and ping timings). Wrong credentials get the token API's codes (10003 no such app, 10014
   wrong secret; Feishu does not document this answer), which the SDK raises and does not
   retry.
2. The WebSocket carries protobuf frames (`frames.py`): the client's pings (control frames)
   are answered with pongs; an event goes as a data frame (`type` event, `message_id`,
   `sum` 1, `seq` 0, the plaintext event JSON), and the client answers on the same
   `message_id` with `{"code": 200}` (or 500), a card callback's answer base64 in `data`.

An app may hold several connections (Feishu allows 50; one more is refused with 514 and
1000040350): each event goes to one of them at random, as Feishu's cluster mode does. While
an app has one, its events go there, not to its webhook.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import random
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from bridge.devtools.emulator import codes
from bridge.devtools.emulator.frames import CONTROL, DATA, Frame
from bridge.devtools.emulator.records import DeliveryOutcome

ENDPOINT_PATH = "/callback/ws/endpoint"
CONNECT_PATH = "/callback/ws/connect"
MAX_CONNECTIONS = 50  # per app
_AUTH_FAILED, _EXCEED_CONN_LIMIT, _FORBIDDEN = 514, 1000040350, 403
# Feishu's ClientConfig as its endpoint hands it out (seconds; -1: reconnect for ever).
CLIENT_CONFIG = {
    "ReconnectCount": -1,
    "ReconnectInterval": 120,
    "ReconnectNonce": 30,
    "PingInterval": 120,
}


@dataclass(frozen=True)
class Credentials:
    """What the endpoint checks an app's credentials against."""

    app_id: str
    app_secret: str


@dataclass(frozen=True)
class PushAnswer:
    """The client's answer to one pushed event, as a webhook attempt records it."""

    status: int | None  # the answer's `code` (200, 500), None: no answer in time
    body: str  # a card callback's answer JSON (the decoded `data`), else ""
    outcome: DeliveryOutcome
    started_at: float
    latency_ms: float
    url: str


class Session:
    """One app's open connection."""

    def __init__(
        self,
        app_id: str,
        conn_id: str,
        service_id: int,
        ws: web.WebSocketResponse,
        on_change: Callable[[], None],
    ) -> None:
        self.app_id, self.conn_id, self.service_id = app_id, conn_id, service_id
        self.ws = ws
        self._on_change = on_change
        self.connected_at = time.time()
        self._pending: dict[str, asyncio.Future[Mapping[str, Any]]] = {}
        self._seq = itertools.count(1)
        self.pings = 0

    @property
    def url(self) -> str:
        return f"longconn:{self.conn_id}"

    async def push(self, payload: Mapping[str, Any], deadline_seconds: float) -> PushAnswer:
        """Send one event and wait for the client's answer to it."""
        message_id = "msg_" + secrets.token_hex(12)
        frame = Frame(
            seq_id=next(self._seq),
            log_id=next(self._seq),
            service=self.service_id,
            method=DATA,
            headers=[
                ("type", "event"),
                ("message_id", message_id),
                ("trace_id", secrets.token_hex(8)),
                ("sum", "1"),
                ("seq", "0"),
            ],
            payload=json.dumps(payload, ensure_ascii=False).encode(),
        )
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[Mapping[str, Any]] = loop.create_future()
        self._pending[message_id] = answered
        started_at, started = time.time(), loop.time()
        status: int | None = None
        body = ""
        outcome: DeliveryOutcome
        try:
            await self.ws.send_bytes(frame.encode())
            answer = await asyncio.wait_for(answered, deadline_seconds)
            code = answer.get("code")
            status = code if isinstance(code, int) else None
            data = answer.get("data")
            if isinstance(data, str) and data:
                body = base64.b64decode(data).decode("utf-8", "replace")
            outcome = "ok" if status == 200 else "non_200"
        except TimeoutError:
            outcome = "timeout"
        except (ConnectionError, RuntimeError, ValueError) as exc:  # closed under us
            outcome, body = "error", f"{type(exc).__name__}: {exc}"
        finally:
            self._pending.pop(message_id, None)
        latency_ms = (loop.time() - started) * 1000
        return PushAnswer(status, body, outcome, started_at, latency_ms, self.url)

    async def serve(self) -> None:
        """Read the client's frames until it hangs up: answer pings, hand answers over."""
        async for msg in self.ws:
            if msg.type != WSMsgType.BINARY:
                continue
            try:
                frame = Frame.decode(msg.data)
            except ValueError:
                continue
            if frame.method == CONTROL and frame.header("type") == "ping":
                self.pings += 1
                pong = Frame(
                    service=self.service_id,
                    method=CONTROL,
                    headers=[("type", "pong")],
                    payload=json.dumps(CLIENT_CONFIG).encode(),
                )
                await self.ws.send_bytes(pong.encode())
                self._on_change()
            elif frame.method == DATA:
                waiting = self._pending.get(frame.header("message_id") or "")
                if waiting is not None and not waiting.done():
                    try:
                        answer = json.loads(frame.payload or b"{}")
                    except ValueError:
                        answer = {"code": None}
                    waiting.set_result(answer if isinstance(answer, dict) else {"code": None})
        for waiting in self._pending.values():
            if not waiting.done():
                waiting.set_exception(ConnectionError("the long connection closed"))


class LongConnections:
    """The endpoint and the WebSocket of every app's long connection."""

    def __init__(
        self,
        *,
        credentials: Callable[[str], Credentials | None],
        base_url: Callable[[], str],
        on_change: Callable[[], None],
    ) -> None:
        self._credentials = credentials
        self._base_url = base_url
        self._on_change = on_change
        self._tickets: dict[str, tuple[str, str, int]] = {}  # ticket -> (app, device, service)
        self.sessions: list[Session] = []
        self.rng = random.Random(0)
        self.refused: dict[str, str] = {}  # app_id -> why its latest connecting was refused

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(ENDPOINT_PATH, self.endpoint)
        app.router.add_get(CONNECT_PATH, self.connect)

    def of(self, app_id: str) -> list[Session]:
        return [s for s in self.sessions if s.app_id == app_id]

    def pick(self, app_id: str) -> Session | None:
        """The connection an event of `app_id` goes to (one at random), or None."""
        open_ones = [s for s in self.of(app_id) if not s.ws.closed]
        return self.rng.choice(open_ones) if open_ones else None

    async def endpoint(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        app_id = body.get("AppID") if isinstance(body, dict) else None
        secret = body.get("AppSecret") if isinstance(body, dict) else None
        known = self._credentials(app_id) if isinstance(app_id, str) else None
        if known is None or not isinstance(secret, str):
            return self._refuse(app_id, codes.INVALID_PARAM.with_detail("app_id not exist"))
        if secret != known.app_secret:
            return self._refuse(app_id, codes.APP_SECRET_INVALID)
        device, service, ticket = secrets.token_hex(8), 7, secrets.token_urlsafe(24)
        self._tickets[ticket] = (known.app_id, device, service)
        url = self._base_url().replace("http://", "ws://", 1) + CONNECT_PATH
        url += f"?device_id={device}&service_id={service}&access_key=ak&ticket={ticket}"
        data = {"URL": url, "ClientConfig": CLIENT_CONFIG}
        return web.json_response({"code": 0, "msg": "ok", "data": data})

    def _refuse(self, app_id: object, error: codes.FeishuError) -> web.Response:
        if isinstance(app_id, str):
            self.refused[app_id] = error.msg
            self._on_change()
        return web.json_response({"code": error.code, "msg": error.msg, "data": {}})

    async def connect(self, request: web.Request) -> web.StreamResponse:
        ticket = self._tickets.pop(request.query.get("ticket", ""), None)
        if ticket is None:  # tickets are one-time and issued by the endpoint only
            return _handshake_refused(_FORBIDDEN, "invalid ticket")
        app_id, device, service = ticket
        if len(self.of(app_id)) >= MAX_CONNECTIONS:
            self.refused[app_id] = "exceed connection limit"
            self._on_change()
            return _handshake_refused(_AUTH_FAILED, "exceed connection limit", _EXCEED_CONN_LIMIT)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        session = Session(app_id, device, service, ws, self._on_change)
        self.sessions.append(session)
        self.refused.pop(app_id, None)
        self._on_change()
        try:
            await session.serve()
        finally:
            self.sessions.remove(session)
            self._on_change()
        return ws

    async def drop(self, app_id: str | None = None) -> int:
        """Close the connections (of `app_id`, default every app's), as Feishu does when
        it restarts a gateway; the clients reconnect as their ClientConfig says."""
        dropped = [s for s in self.sessions if app_id is None or s.app_id == app_id]
        for session in dropped:
            await session.ws.close()
        return len(dropped)


def _handshake_refused(status: int, msg: str, auth_code: int | None = None) -> web.Response:
    """A refused WebSocket handshake, with the headers lark-oapi reads the reason from."""
    headers = {"handshake-status": str(status), "handshake-msg": msg}
    if auth_code is not None:
        headers["handshake-autherrcode"] = str(auth_code)
    return web.Response(status=403 if status == _FORBIDDEN else 401, headers=headers, text=msg)
