"""The local chat page (`GET /`) and its control endpoints under `/_emulator/…`.

A person types as a Feishu user (or clicks the bot's menu under the private chat's composer)
and watches the bot's reactions, replies and cards appear. With several apps the page shows
the group with every bot in it (its members listed, each bot's messages under its name, an
@-picker to address one bot or several), and a private chat with each bot.
The page long-polls `/_emulator/timeline?since=<revision>`, which answers as soon as anything
changes (or after `_LONG_POLL_S` with no change), so updates are live without a busy loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Protocol

from aiohttp import web

from bridge.devtools.emulator.apps import HostedApp
from bridge.devtools.emulator.clips import SPOKEN_TRANSCRIPT
from bridge.devtools.emulator.outage import Outage, plan_from_json
from bridge.devtools.emulator.records import (
    CardCallbackResult,
    ChatMessage,
    DeliveredEvent,
    DeliveryAttempt,
    Reaction,
    SenderType,
)
from bridge.devtools.emulator.urgent import Urgent


class ChatWorldView(Protocol):
    """What the page needs of the emulator (`FeishuEmulator` is one): who is in the chat,
    its timeline as it changes, and a person's moves (write, attach, recall, click)."""

    @property
    def app_ids(self) -> tuple[str, ...]: ...
    def app(self, app_id: str | None = None) -> HostedApp: ...
    def p2p_chat(self, app_id: str | None = None, user_open_id: str | None = None) -> str: ...
    def chat_bots(self, chat_id: str) -> tuple[str, ...]: ...
    def open_id_in(self, app_id: str, open_id: str) -> str: ...
    @property
    def user_name(self) -> str: ...
    @property
    def default_user_open_id(self) -> str: ...
    @property
    def p2p_chat_id(self) -> str: ...
    @property
    def group_chat_id(self) -> str: ...
    @property
    def scenarios(self) -> tuple[str, ...]: ...
    @property
    def webhook_url(self) -> str | None: ...
    @property
    def revision(self) -> int: ...
    @property
    def outage(self) -> Outage: ...
    async def wait_revision(self, since: int, max_wait: float) -> int: ...
    def messages(
        self, chat_id: str | None = None, *, sender_type: SenderType | None = None
    ) -> list[ChatMessage]: ...
    def message(self, message_id: str) -> ChatMessage: ...
    def reactions(self, message_id: str) -> list[Reaction]: ...
    def urgents(self, message_id: str | None = None) -> list[Urgent]: ...
    def card_callbacks(self) -> list[CardCallbackResult]: ...
    def deliveries(self) -> list[DeliveryAttempt]: ...
    async def send_user_message(
        self,
        text: str = "",
        *,
        chat_type: str = "p2p",
        mention_apps: Sequence[str] = (),
        app_id: str | None = None,
    ) -> DeliveredEvent: ...
    async def send_user_file(
        self,
        data: bytes,
        *,
        kind: str,
        name: str,
        mime: str,
        chat_type: str,
        mention_apps: Sequence[str],
        app_id: str | None,
    ) -> DeliveredEvent: ...
    async def send_user_voice(
        self,
        clip: bytes | None = None,
        *,
        transcript: str,
        chat_type: str,
        mention_apps: Sequence[str],
        app_id: str | None,
    ) -> DeliveredEvent: ...
    async def recall_message(self, message_id: str) -> DeliveredEvent: ...
    async def click_card(self, message_id: str, value: Mapping[str, Any]) -> CardCallbackResult: ...
    async def click_menu(
        self, event_key: str, operator_open_id: str | None = None, *, app_id: str | None = None
    ) -> DeliveryAttempt | None: ...


_LONG_POLL_S = 20.0
_STATIC = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "style.css": "text/css",
}
_EMULATOR_KEY: web.AppKey[ChatWorldView] = web.AppKey("emulator")


def add_routes(app: web.Application, emulator: ChatWorldView) -> None:
    app[_EMULATOR_KEY] = emulator
    app.router.add_get("/", _index)
    app.router.add_get("/_emulator/static/{name}", _static)
    app.router.add_get("/_emulator/state", _state)
    app.router.add_get("/_emulator/timeline", _timeline)
    app.router.add_post("/_emulator/send", _send)
    app.router.add_post("/_emulator/click", _click)
    app.router.add_post("/_emulator/attach", _attach)
    app.router.add_post("/_emulator/voice", _voice)
    app.router.add_post("/_emulator/recall", _recall)
    app.router.add_post("/_emulator/menu", _menu)
    app.router.add_get("/_emulator/outage", _outage)
    app.router.add_post("/_emulator/outage", _set_outage)


def _emulator(request: web.Request) -> ChatWorldView:
    return request.app[_EMULATOR_KEY]


def _asset(name: str) -> str:
    return resources.files("bridge.devtools.emulator").joinpath("static", name).read_text("utf-8")


async def _index(request: web.Request) -> web.Response:
    return web.Response(text=_asset("index.html"), content_type="text/html", charset="utf-8")


async def _static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in _STATIC:
        raise web.HTTPNotFound()
    return web.Response(text=_asset(name), content_type=_STATIC[name], charset="utf-8")


async def _state(request: web.Request) -> web.Response:
    """Who is on the page: the user, every bot (in the emulator's order: the first is the
    default), their chats, and the name of every open_id any app may write in a card."""
    emu = _emulator(request)
    first = emu.app()
    bots = [emu.app(app_id) for app_id in emu.app_ids]
    return web.json_response(
        {
            "bot": {"app_id": first.app_id, "name": first.bot_name, "open_id": first.bot_open_id},
            "bots": [
                {"app_id": b.app_id, "name": b.bot_name, "open_id": b.bot_open_id} for b in bots
            ],
            "user": {"name": emu.user_name, "open_id": emu.default_user_open_id},
            "chats": {"p2p": emu.p2p_chat_id, "group": emu.group_chat_id},
            "p2p_chats": {b.app_id: emu.p2p_chat(b.app_id) for b in bots},
            "group_bots": list(emu.chat_bots(emu.group_chat_id)),
            "names": _open_id_names(emu),
            "scenarios": list(emu.scenarios),
            "webhook_url": emu.webhook_url,
            "revision": emu.revision,
        }
    )


def _open_id_names(emu: ChatWorldView) -> dict[str, str]:
    """Every app's open_id of the user and of every bot, with their names (a bot writes
    `<at id=…>` with its own app's open_ids)."""
    people = {emu.default_user_open_id: emu.user_name}
    people.update({emu.app(a).bot_person: emu.app(a).bot_name for a in emu.app_ids})
    return {
        emu.open_id_in(app_id, person): name
        for app_id in emu.app_ids
        for person, name in people.items()
    } | people


async def _timeline(request: web.Request) -> web.Response:
    emu = _emulator(request)
    chat_id = request.query.get("chat_id") or emu.p2p_chat_id
    try:
        since = int(request.query.get("since", "-1"))
    except ValueError:
        since = -1
    revision = await emu.wait_revision(since, _LONG_POLL_S) if since >= 0 else emu.revision
    names = {a: emu.app(a).bot_name for a in emu.app_ids}
    names[emu.default_user_open_id] = emu.user_name
    return web.json_response(
        {
            "revision": revision,
            "chat_id": chat_id,
            "messages": [_message_json(emu, m, names) for m in emu.messages(chat_id)],
            "callbacks": [
                _callback_json(i, c)
                for i, c in enumerate(emu.card_callbacks())
                if emu.message(c.message_id).chat_id == chat_id
            ],
            "failed_deliveries": sum(1 for a in emu.deliveries() if not a.ok),
            "outage": emu.outage.state().to_json(),
        }
    )


async def _outage(request: web.Request) -> web.Response:
    """The message API's state, and every call an outage refused (`at`: the emulator's
    clock, monotonic seconds)."""
    outage = _emulator(request).outage
    refused = [
        {"method": c.method, "path": c.path, "mode": c.mode.value, "at": c.at}
        for c in outage.refused
    ]
    return web.json_response({**outage.state().to_json(), "refused_calls": refused})


async def _set_outage(request: web.Request) -> web.Response:
    """`{"mode": "503"}` (or "429", "timeout", "up") until changed, or `{"schedule":
    [{"mode": "503", "seconds": 20}, …]}` then up; options `cardkit`, `hold_seconds`,
    `reset_seconds`. Answers the new state."""
    body = await _json(request)
    try:
        plan, options = plan_from_json(body)
        state = _emulator(request).outage.set(plan, **options)
    except (ValueError, TypeError) as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    return web.json_response(state.to_json())


async def _send(request: web.Request) -> web.Response:
    """The composer: `text`, `chat_type`, and whom it addresses: in a group the bots of
    `mention_apps` (app_ids; `mention_bot`: the first app's), in a private chat the bot of
    `app_id` (default: the first app's)."""
    emu = _emulator(request)
    body = await _json(request)
    text = str(body.get("text", "")).strip()
    if not text:
        raise web.HTTPBadRequest(text="text is required")
    chat_type, addressed = _addressed(emu, body)
    delivered = await emu.send_user_message(text, chat_type=chat_type, **addressed)
    pushed = [delivered, *delivered.others] if delivered.app_id else []
    attempts = [(e.app_id, e.first_attempt) for e in pushed]
    return web.json_response(
        {
            "event_id": delivered.event_id,
            "message_id": delivered.message_id,
            "chat_id": delivered.chat_id,
            "apps": list(delivered.app_ids),
            # Pushed to every bot it went to; a message no bot is told of is no failed push.
            "delivered": all(a is not None and a.ok for _, a in attempts),
            "delivery": next(
                (
                    {"app_id": app_id, "status": a.status, "outcome": a.outcome}
                    for app_id, a in attempts
                    if a is not None and not a.ok
                ),
                None,
            ),
        }
    )


def _addressed(emu: ChatWorldView, body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(chat_type, the send's `mention_apps` and `app_id`) of a page request."""
    if body.get("chat_type") != "group":
        app_id = body.get("app_id") or None
        if app_id is not None and app_id not in emu.app_ids:
            raise web.HTTPBadRequest(text=f"no app {app_id!r}")
        return "p2p", {"mention_apps": (), "app_id": app_id}
    apps = body.get("mention_apps")
    if apps is None:  # the single-bot page's checkbox
        apps = [emu.app().app_id] if body.get("mention_bot") else []
    if not isinstance(apps, list) or any(a not in emu.app_ids for a in apps):
        raise web.HTTPBadRequest(text="mention_apps is a list of the emulator's app_ids")
    return "group", {"mention_apps": [str(a) for a in apps], "app_id": None}


async def _attach(request: web.Request) -> web.Response:
    """The page's 📎: a file from the user's disk, sent as an image or a file message, to
    the chat and bots the composer addresses (form fields as `_send`'s)."""
    emu = _emulator(request)
    form = await request.post()
    upload = form.get("file")
    if not isinstance(upload, web.FileField):
        raise web.HTTPBadRequest(text="a file is required")
    mime = upload.content_type or "application/octet-stream"
    kind = "image" if mime.startswith("image/") else "file"
    fields: dict[str, Any] = {"chat_type": form.get("chat_type"), "app_id": form.get("app_id")}
    if form.get("mention_apps"):  # a JSON list, as the composer sends it
        try:
            fields["mention_apps"] = json.loads(str(form["mention_apps"]))
        except ValueError:
            raise web.HTTPBadRequest(text="mention_apps must be a JSON list") from None
    chat_type, addressed = _addressed(emu, fields)
    delivered = await emu.send_user_file(
        upload.file.read(),
        kind=kind,
        name=upload.filename,
        mime=mime,
        chat_type=chat_type,
        **addressed,
    )
    return web.json_response({"message_id": delivered.message_id, "kind": kind})


async def _voice(request: web.Request) -> web.Response:
    """The page's 🎤: the generated spoken clip as a voice message; recognition hears the
    composer's text in it when there is some, else the clip's own words."""
    emu = _emulator(request)
    body = await _json(request)
    transcript = str(body.get("transcript") or "").strip() or SPOKEN_TRANSCRIPT
    chat_type, addressed = _addressed(emu, body)
    delivered = await emu.send_user_voice(transcript=transcript, chat_type=chat_type, **addressed)
    return web.json_response({"message_id": delivered.message_id, "transcript": transcript})


async def _recall(request: web.Request) -> web.Response:
    emu = _emulator(request)
    message_id = str((await _json(request)).get("message_id", ""))
    if message_id not in {m.message_id for m in emu.messages(sender_type="user")}:
        raise web.HTTPBadRequest(text="only a user's own message can be recalled")
    await emu.recall_message(message_id)
    return web.json_response({"recalled": message_id})


async def _menu(request: web.Request) -> web.Response:
    """The page's bot menu (under the private chat's composer): a click's event_key, for
    the bot of `app_id` (default: the first app's)."""
    emu = _emulator(request)
    body = await _json(request)
    event_key = str(body.get("event_key", "")).strip()
    if not event_key:
        raise web.HTTPBadRequest(text="event_key is required")
    _, addressed = _addressed(emu, {"app_id": body.get("app_id")})
    attempt = await emu.click_menu(event_key, app_id=addressed["app_id"])
    return web.json_response(
        {
            "event_id": None if attempt is None else attempt.event_id,
            "delivered": attempt is not None and attempt.ok,
            "delivery": None
            if attempt is None
            else {"status": attempt.status, "outcome": attempt.outcome},
        }
    )


async def _click(request: web.Request) -> web.Response:
    emu = _emulator(request)
    body = await _json(request)
    value = body.get("value")
    try:
        result = await emu.click_card(
            str(body.get("message_id", "")), value if isinstance(value, dict) else {}
        )
    except (ValueError, RuntimeError) as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    return web.json_response(_callback_json(len(emu.card_callbacks()) - 1, result))


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="a JSON body is required") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="a JSON object is required")
    return body


_MENTION_KEY = re.compile(r"@_user_\d+")
_ATTACHMENT_LABELS = {"image": "图片", "file": "文件", "audio": "语音", "media": "视频"}


def _message_json(
    emu: ChatWorldView, message: ChatMessage, names: dict[str, str]
) -> dict[str, Any]:
    text = message.text
    if text is not None:
        keys = {str(m.get("key")): str(m.get("name", "")) for m in message.mentions}
        text = _MENTION_KEY.sub(lambda k: "@" + keys.get(k.group(0), k.group(0)), text)
    elif message.msg_type in _ATTACHMENT_LABELS:
        data = message.data if isinstance(message.data, dict) else {}
        detail = data.get("file_name", "")
        if message.msg_type == "audio" and isinstance(data.get("duration"), int):
            detail = f"{data['duration'] / 1000:.1f}″"
        text = f"[{_ATTACHMENT_LABELS[message.msg_type]}] {detail}".strip()
    elif message.msg_type not in ("interactive",):
        text = f"[{message.msg_type}] {message.content}"
    return {
        "message_id": message.message_id,
        "sender_type": message.sender_type,
        "sender_name": names.get(message.sender_id, message.sender_id),
        "app_id": message.app_id,  # the bot that posted it (None: the user)
        "msg_type": message.msg_type,
        "text": text,
        "card": message.card,
        "parent_id": message.parent_id,
        "thread_id": message.thread_id,
        "updated": message.updated,
        "recalled": message.recalled,
        "create_time_ms": message.create_time_ms,
        "reactions": [r.emoji_type for r in emu.reactions(message.message_id)],
        "urgent": bool(emu.urgents(message.message_id)),  # the bot urged someone on it
    }


def _callback_json(index: int, result: CardCallbackResult) -> dict[str, Any]:
    return {
        "seq": index,
        "event_id": result.event_id,
        "message_id": result.message_id,
        "ok": result.ok,
        "error": result.error,
        "toast": None
        if result.toast is None
        else {"type": result.toast.type, "content": result.toast.content},
        "value": json.loads(json.dumps(result.value)),
    }
