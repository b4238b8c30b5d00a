"""The `/open-apis/…` side: Feishu's HTTP API over a real socket, with its envelopes and codes.

One catch-all handler instead of aiohttp's router so that every request — routed, unknown,
fault-injected or unauthenticated — goes through the same steps and is recorded the same way:
parse → whose call → API down (outage)? → rate limit? → injected fault? → route → token check
→ handle → record → answer.

Whose call: the app whose tenant token it carries (asking for a token: whose app_id it
gives). Its own rate-limit meters count it, and the handlers act as that app's bot.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import mimetypes
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bridge.devtools.emulator import codes
from bridge.devtools.emulator.apps import HostedApp
from bridge.devtools.emulator.cardkit import CardKit
from bridge.devtools.emulator.chats import ChatWorld, message_data, reaction_data
from bridge.devtools.emulator.faults import Fault, FaultKind, FaultPlan
from bridge.devtools.emulator.outage import Outage, Refusal
from bridge.devtools.emulator.records import ApiCall, ChatMessage
from bridge.devtools.emulator.speech import SpeechRecognition
from bridge.devtools.emulator.tokens import bearer
from bridge.devtools.emulator.urgent import Urgents

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
_MESSAGE_PATH = re.compile(r"/open-apis/im/v1/messages/(?P<id>[^/]+)")
_CARD_PATH = re.compile(r"/open-apis/cardkit/v1/cards/(?P<id>[^/]+)")


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    params: Mapping[str, str]  # path parameters
    query: Mapping[str, str]
    body: Any
    app_id: str = ""  # whose call it is (set once its token is checked)


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart upload."""

    filename: str
    data: bytes


async def _form(request: web.Request) -> dict[str, Any]:
    form: dict[str, Any] = {}
    for name, value in (await request.post()).items():
        if isinstance(value, web.FileField):
            form[name] = Upload(value.filename, value.file.read())
        else:
            form[name] = str(value)
    return form


@dataclass(frozen=True)
class Blob:
    """A raw answer (a message resource), not a JSON envelope."""

    data: bytes
    mime: str


Answer = tuple[int, dict[str, Any] | Blob]
Handler = Callable[[ApiRequest], Answer]


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    needs_token: bool = True


def _ok(data: Mapping[str, Any] | None = None) -> Answer:
    return 200, {"code": 0, "msg": "success", "data": dict(data or {})}


class OpenApi:
    def __init__(
        self,
        *,
        apps: Mapping[str, HostedApp],
        world: ChatWorld,
        faults: FaultPlan,
        outage: Outage,
        record: Callable[[ApiCall], None],
        closing: asyncio.Event,
        cardkit: CardKit,
        speech: SpeechRecognition,
        urgents: Urgents,
    ) -> None:
        self._apps = apps
        self._speech = speech
        self._urgents = urgents
        self._world = world
        self._cardkit = cardkit
        self._faults = faults
        self._outage = outage
        self._record = record
        self._closing = closing
        self._seq = itertools.count(1)
        message = r"/open-apis/im/v1/messages/(?P<message_id>[^/]+)"
        card = r"/open-apis/cardkit/v1/cards/(?P<card_id>[^/]+)"
        element = r"/elements/(?P<element_id>[^/]+)"
        asr = re.escape("/open-apis/speech_to_text/v1/speech/")
        self._routes = [
            _Route("POST", re.compile(re.escape(TOKEN_PATH)), self._token, needs_token=False),
            _Route("POST", re.compile(r"/open-apis/im/v1/messages"), self._send),
            _Route("POST", re.compile(message + "/reply"), self._reply),
            _Route("PATCH", re.compile(message), self._patch),
            _Route("PATCH", re.compile(message + "/urgent_app"), self._urgent_app),
            _Route("PUT", re.compile(message), self._edit),
            _Route("GET", re.compile(message), self._get_message),
            _Route("GET", re.compile(message + r"/resources/(?P<key>[^/]+)"), self._resource),
            _Route("POST", re.compile(message + "/reactions"), self._react),
            _Route(
                "DELETE",
                re.compile(message + r"/reactions/(?P<reaction_id>[^/]+)"),
                self._unreact,
            ),
            _Route("GET", re.compile(r"/open-apis/bot/v3/info"), self._bot),
            _Route("POST", re.compile(r"/open-apis/im/v1/images"), self._upload_image),
            _Route("POST", re.compile(r"/open-apis/im/v1/files"), self._upload_file),
            _Route("POST", re.compile(r"/open-apis/cardkit/v1/cards"), self._card_create),
            _Route("PUT", re.compile(card), self._card_update),
            _Route("PUT", re.compile(card + element + "/content"), self._card_content),
            _Route("PUT", re.compile(card + element), self._card_element),
            _Route("PATCH", re.compile(card + element), self._card_patch_element),
            _Route("POST", re.compile(card + "/batch_update"), self._card_batch),
            _Route("PATCH", re.compile(card + "/settings"), self._card_settings),
            _Route("POST", re.compile(asr + "file_recognize"), self._file_recognize),
            _Route("POST", re.compile(asr + "stream_recognize"), self._stream_recognize),
        ]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body: Any = None
        malformed = False
        if request.content_type.startswith("multipart/"):
            raw = b""
            body = await _form(request)
        else:
            raw = await request.read()
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                malformed = True
        api = ApiRequest(request.method, request.path, {}, dict(request.query), body)
        app = self._caller(request, body)
        app_id = app.app_id if app is not None else None
        refusal = self._outage.refuse(request.method, request.path, app_id)
        if refusal is not None:  # the API is down: armed faults wait for it to come back
            return await self._refuse(request, body, refusal, app_id)
        if app is not None and app.limits.enforced:  # each app's own meters
            send = request.method == "POST" and (
                request.path == "/open-apis/im/v1/messages" or request.path.endswith("/reply")
            )
            refusal = app.limits.check(request.method, request.path, self._chat_of(api), send)
            if refusal is not None:  # past a rate limit: refused as Feishu does, not done
                return await self._refuse(request, body, refusal, app_id, "rate_limited")
        fault = self._faults.take(request.method, request.path, app_id)
        if fault is not None and fault.kind is not FaultKind.TIMEOUT:
            status, payload, extra = self._fault_answer(fault)
        elif fault is not None and not fault.apply:
            # A dropped call: nothing happens; whatever is answered after the hold is a 500.
            status, payload = self._error(codes.INTERNAL_ERROR)
            extra = {}
        elif malformed:
            status, payload = self._error(codes.FIELD_VALIDATION_FAILED.with_detail("bad JSON"))
            extra = {}
        else:
            status, payload, extra = self._serve(api, app, request.headers.get("Authorization"))
        self._record_call(
            request,
            body,
            status,
            {"bytes": len(payload.data), "mime": payload.mime}
            if isinstance(payload, Blob)
            else payload,
            fault.kind.value if fault is not None else None,
            app_id,
        )
        if fault is not None and fault.kind is FaultKind.TIMEOUT:
            # Hold past the client's timeout; end early only when the emulator shuts down.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), fault.hold_seconds)
        headers = {"X-Tt-Logid": secrets.token_hex(16).upper(), **extra}
        if isinstance(payload, Blob):
            return web.Response(
                body=payload.data, status=status, headers=headers, content_type=payload.mime
            )
        return web.json_response(payload, status=status, headers=headers)

    async def _refuse(
        self,
        request: web.Request,
        body: Any,
        refusal: Refusal,
        app_id: str | None,
        fault: str | None = None,
    ) -> web.StreamResponse:
        fault = fault or f"outage_{refusal.mode}"
        self._record_call(request, body, refusal.status, refusal.body or None, fault, app_id)
        if refusal.hold_seconds is not None:
            # Hang until the client gives up (or the emulator shuts down), then hang up: no
            # status line, no body, as a dead upstream behind a load balancer does.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), refusal.hold_seconds)
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=504)  # never written: the connection is gone
        headers = {"X-Tt-Logid": secrets.token_hex(16).upper(), **refusal.headers}
        return web.json_response(refusal.body, status=refusal.status, headers=headers)

    def _caller(self, request: web.Request, body: Any) -> HostedApp | None:
        """The app whose call this is, or None (no token, or one no app was given)."""
        if request.path == TOKEN_PATH:
            app_id = body.get("app_id") if isinstance(body, Mapping) else None
            return self._apps.get(app_id) if isinstance(app_id, str) else None
        try:
            token = bearer(request.headers.get("Authorization"))
        except codes.FeishuError:
            return None
        return next((a for a in self._apps.values() if a.tokens.issued(token)), None)

    def _chat_of(self, api: ApiRequest) -> str | None:
        """The chat a call is addressed to (a rate limit per chat counts it there)."""
        match = _MESSAGE_PATH.match(api.path)
        if match is not None:
            found = self._world.messages.get(match["id"])
            return found.chat_id if found is not None else None
        match = _CARD_PATH.match(api.path)
        if match is not None:
            entity = self._cardkit.entities.get(match["id"])
            if entity is not None and entity.message_ids:
                found = self._world.messages.get(entity.message_ids[0])
                return found.chat_id if found is not None else None
            return None
        if api.query.get("receive_id_type") == "chat_id" and isinstance(api.body, Mapping):
            chat = api.body.get("receive_id")
            return chat if isinstance(chat, str) else None
        return None

    def _record_call(
        self,
        request: web.Request,
        body: Any,
        status: int,
        response: Any,
        fault: str | None,
        app_id: str | None,
    ) -> None:
        self._record(
            ApiCall(
                seq=next(self._seq),
                method=request.method,
                path=request.path,
                query=dict(request.query),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                status=status,
                response=response,
                at=time.time(),
                fault=fault,
                app_id=app_id,
            )
        )

    # --- pipeline steps ------------------------------------------------------------------
    def _serve(
        self, api: ApiRequest, app: HostedApp | None, authorization: str | None
    ) -> tuple[int, Any, dict[str, str]]:
        route, params = self._resolve(api.method, api.path)
        payload: dict[str, Any] | Blob
        if route is None:
            status, payload = self._error(
                codes.NOT_FOUND.with_detail(f"{api.method} {api.path} is not emulated")
            )
            return status, payload, {}
        try:
            if route.needs_token:
                bearer(authorization)  # 99991661 without a token
                if app is None:  # a token no app was given
                    raise codes.INVALID_TENANT_TOKEN
                app.tokens.check(authorization)
            app_id = app.app_id if app is not None else ""
            status, payload = route.handler(
                ApiRequest(api.method, api.path, params, api.query, api.body, app_id)
            )
        except codes.FeishuError as error:
            status, payload = self._error(error)
        return status, payload, {}

    def _resolve(self, method: str, path: str) -> tuple[_Route | None, dict[str, str]]:
        for route in self._routes:
            match = route.pattern.fullmatch(path)
            if match is not None and route.method == method:
                return route, match.groupdict()
        return None, {}

    @staticmethod
    def _error(error: codes.FeishuError) -> tuple[int, dict[str, Any]]:
        return error.http_status, error.body()

    def _fault_answer(self, fault: Fault) -> tuple[int, dict[str, Any], dict[str, str]]:
        if fault.kind is FaultKind.RATE_LIMIT:
            status, payload = self._error(codes.RATE_LIMITED)
            return (
                fault.http_status or status,
                payload,
                {
                    "x-ogw-ratelimit-limit": "50",
                    "x-ogw-ratelimit-reset": str(fault.reset_seconds),
                },
            )
        if fault.kind is FaultKind.SERVER_ERROR:
            status, payload = self._error(codes.INTERNAL_ERROR)
            return fault.http_status or status, payload, {}
        error = codes.FeishuError(
            fault.http_status or 400,
            fault.code if fault.code is not None else codes.MESSAGE_INVALID_PARAM.code,
            fault.msg or "injected business error",
        )
        status, payload = self._error(error)
        return status, payload, {}

    # --- routes --------------------------------------------------------------------------
    def _body(self, api: ApiRequest) -> Mapping[str, Any]:
        if not isinstance(api.body, Mapping):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("request body must be a JSON object")
        return api.body

    def _token(self, api: ApiRequest) -> Answer:
        body = api.body if isinstance(api.body, Mapping) else {}
        app_id, app_secret = body.get("app_id"), body.get("app_secret")
        if not isinstance(app_id, str) or not isinstance(app_secret, str) or not app_id:
            raise codes.INVALID_PARAM
        app = self._apps.get(app_id)
        if app is None:
            raise codes.INVALID_PARAM.with_detail("app_id not exist")
        token, expire = app.tokens.issue(app_id, app_secret)
        return 200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": expire}

    def _send(self, api: ApiRequest) -> Answer:
        body = self._body(api)
        card_id = self._card_named(api.app_id, body)
        message = self._world.send(api.app_id, api.query.get("receive_id_type"), body)
        return self._posted(api, message, card_id)

    def _reply(self, api: ApiRequest) -> Answer:
        body = self._body(api)
        card_id = self._card_named(api.app_id, body)
        message = self._world.reply(api.app_id, api.params["message_id"], body)
        return self._posted(api, message, card_id)

    def _card_named(self, app_id: str, body: Mapping[str, Any]) -> str | None:
        msg_type, content = body.get("msg_type"), body.get("content")
        if isinstance(msg_type, str) and isinstance(content, str):
            card_id = self._cardkit.referenced(msg_type, content)
            return None if card_id is None else self._card(app_id, card_id)
        return None

    def _card(self, app_id: str, card_id: str) -> str:
        """A card entity of `app_id`'s: another app's is as unknown as a made-up one."""
        entity = self._cardkit.entities.get(card_id)
        if entity is not None and entity.app_id not in (None, app_id):
            raise codes.CARD_ENTITY_NOT_FOUND
        return card_id

    def _posted(self, api: ApiRequest, message: ChatMessage, card_id: str | None) -> Answer:
        if card_id is not None:
            self._cardkit.bind(card_id, message.message_id)
        current = self._world.messages[message.message_id]
        return _ok(self._message_data(api, current))

    def _message_data(self, api: ApiRequest, message: ChatMessage) -> dict[str, Any]:
        people = self._world.people
        return message_data(
            message, self._world.tenant_key, lambda person: people.open_id(person, api.app_id)
        )

    def _card_create(self, api: ApiRequest) -> Answer:
        return _ok({"card_id": self._cardkit.create(self._body(api), app_id=api.app_id)})

    def _card_update(self, api: ApiRequest) -> Answer:
        self._cardkit.update(self._card(api.app_id, api.params["card_id"]), self._body(api))
        return _ok()

    def _card_content(self, api: ApiRequest) -> Answer:
        card_id = self._card(api.app_id, api.params["card_id"])
        self._cardkit.content(card_id, api.params["element_id"], self._body(api))
        return _ok()

    def _card_element(self, api: ApiRequest) -> Answer:
        card_id = self._card(api.app_id, api.params["card_id"])
        self._cardkit.element(card_id, api.params["element_id"], self._body(api))
        return _ok()

    def _card_patch_element(self, api: ApiRequest) -> Answer:
        card_id = self._card(api.app_id, api.params["card_id"])
        self._cardkit.patch_element(card_id, api.params["element_id"], self._body(api))
        return _ok()

    def _card_batch(self, api: ApiRequest) -> Answer:
        self._cardkit.batch(self._card(api.app_id, api.params["card_id"]), self._body(api))
        return _ok()

    def _card_settings(self, api: ApiRequest) -> Answer:
        self._cardkit.settings(self._card(api.app_id, api.params["card_id"]), self._body(api))
        return _ok()

    def _patch(self, api: ApiRequest) -> Answer:
        self._world.patch_card(api.app_id, api.params["message_id"], self._body(api))
        return _ok()

    def _urgent_app(self, api: ApiRequest) -> Answer:
        message_id = api.params["message_id"]
        return _ok(self._urgents.urge(api.app_id, message_id, api.query, api.body))

    def _upload_image(self, api: ApiRequest) -> Answer:
        upload = self._body(api).get("image")
        if not isinstance(upload, Upload) or self._body(api).get("image_type") != "message":
            raise codes.FIELD_VALIDATION_FAILED.with_detail("image and image_type=message")
        mime = mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"
        return _ok({"image_key": self._world.add_resource(upload.data, mime, "image")})

    def _upload_file(self, api: ApiRequest) -> Answer:
        body = self._body(api)
        upload = body.get("file")
        if not isinstance(upload, Upload) or not body.get("file_type") or not body.get("file_name"):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("file, file_type and file_name")
        mime = mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"
        return _ok({"file_key": self._world.add_resource(upload.data, mime, "file")})

    def _get_message(self, api: ApiRequest) -> Answer:
        found = self._world.messages.get(api.params["message_id"])
        if found is None or found.recalled or not self._world.in_chat(api.app_id, found.chat_id):
            raise codes.MESSAGE_INVALID_PARAM.with_detail("message not found")
        return _ok({"items": [self._message_data(api, found)]})

    def _resource(self, api: ApiRequest) -> Answer:
        data, mime = self._world.resource(
            api.app_id, api.params["message_id"], api.params["key"], api.query.get("type", "")
        )
        return 200, Blob(data, mime)

    def _edit(self, api: ApiRequest) -> Answer:
        message = self._world.edit_text(api.app_id, api.params["message_id"], self._body(api))
        return _ok(self._message_data(api, message))

    def _react(self, api: ApiRequest) -> Answer:
        body = self._body(api)
        reaction = self._world.add_reaction(api.app_id, api.params["message_id"], body)
        return _ok(reaction_data(reaction))

    def _unreact(self, api: ApiRequest) -> Answer:
        params = api.params
        reaction = self._world.remove_reaction(
            api.app_id, params["message_id"], params["reaction_id"]
        )
        return _ok(reaction_data(reaction))

    def _file_recognize(self, api: ApiRequest) -> Answer:
        return _ok(self._speech.file_recognize(self._body(api)))

    def _stream_recognize(self, api: ApiRequest) -> Answer:
        return _ok(self._speech.stream_recognize(self._body(api)))

    def _bot(self, api: ApiRequest) -> Answer:
        return 200, {"code": 0, "msg": "ok", "bot": dict(self._apps[api.app_id].bot_info())}
