"""Feishu as the simulated world plays it, at the HTTP transport: the bridge's real
`FeishuClient` (its token, retries, breaker and call budget) talks to it through httpx.

`SimTransport` answers every Open API call the bridge makes with Feishu-shaped JSON and keeps
what the chats show: the messages, the card entities (the emulator's own `CardKit`, which
checks each change as Feishu does: the sequence, the element, the tag) and the reactions. It
de-duplicates a repeated `uuid` as Feishu does, and draws from the seed what the calls meet:
latency (milliseconds, or seconds for a share of calls) and, in the `FaultPlan`'s outage, a
503, a 429 with its reset header, or a call that hangs until the client's timeout.

It also enforces Feishu's published limits on the virtual clock (docs/scaling.md): each API
50 calls a second and 1,000 a minute (fewer for a crowd's app; the API as
`bridge.feishu.budget.api_of` names it),
5 sends a second to one chat, 10 changes a second to one card entity. Past one, the call is
answered as Feishu does (HTTP 429, code 99991400, `x-ogw-ratelimit-reset`) and not carried
out; its `Post` says which limit (`limited`), so an invariant can require that a bridge
pacing itself at its own budget never meets one.

Every call is one `Post` of the transcript (tests/sim/invariants.py reads it), each try of a
call its own: Feishu sees the client's retries.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bridge.devtools.emulator.cardkit import CardKit
from bridge.devtools.emulator.codes import (
    CARD_ENTITY_NOT_FOUND,
    INVALID_TENANT_TOKEN,
    NOT_FOUND,
    RATE_LIMITED,
    REACTION_ID_INVALID,
    REACTION_MESSAGE_NOT_FOUND,
)
from bridge.devtools.emulator.codes import FeishuError as Refused
from bridge.devtools.emulator.limits import SlidingWindow
from bridge.devtools.emulator.outage import LIMIT_HEADER, RESET_HEADER
from bridge.feishu.budget import api_of, is_send
from bridge.feishu.cards.status import ANSWER
from bridge.feishu.client import TOKEN_PATH
from bridge.feishu.requests import MESSAGES
from tests.fakes.feishu_calls import CARD, ELEMENT, MESSAGE, card_of, read_call

from .loop import EPOCH

DOMAIN = "https://open.feishu.sim"
TIMEOUT = 10.0  # the client's read timeout (bridge/feishu/client.py DEFAULT_TIMEOUT)
# Feishu's published limits (docs/scaling.md; bridge/config/budget.py has the same figures).
API_PER_SECOND = 50
API_PER_MINUTE = 1000
CHAT_SENDS_PER_SECOND = 5
CARD_CHANGES_PER_SECOND = 10


@dataclass
class Post:
    """One API call as the world saw it."""

    start: float
    op: str
    target: str  # the message replied to, the chat, the card or message changed
    text: str = ""
    card: dict[str, Any] | None = None
    uuid: str = ""
    end: float = 0.0
    ok: bool = True  # Feishu took it and showed it
    result: str = ""  # the message, card or reaction id it made
    repeat: bool = False  # a repeated uuid: Feishu showed nothing new
    limited: str | None = None  # past one of Feishu's limits: "api", "minute", "chat", "card"
    refused: int = 0  # Feishu's code when it refused the call for what it asked (a 4xx)
    reset: float = 0.0  # a 429's x-ogw-ratelimit-reset: seconds Feishu asked the bridge to wait
    api: str = ""  # the API Feishu meters it under (`api_of`)
    chat: str | None = None  # a send's chat (Feishu meters a chat's sends)


@dataclass
class FaultPlan:
    """How unkind the API is in one run (the seed picks it)."""

    slow: float = 0.05  # share of calls that take seconds, not milliseconds
    outage: tuple[float, float] | None = None  # the API is down from..until (world seconds)

    def down(self, at: float) -> bool:
        return self.outage is not None and self.outage[0] <= at < self.outage[1]


class Limits:
    """Feishu's limits: each API's second and minute (the published ones, or lower for an
    app whose share of them is smaller), a chat's sends, a card's changes."""

    def __init__(self, per_second: int = API_PER_SECOND, per_minute: int = API_PER_MINUTE) -> None:
        self._windows: dict[tuple[str, str], SlidingWindow] = {}
        self._per_second, self._per_minute = per_second, per_minute

    def _window(self, kind: str, key: str, limit: int, seconds: float) -> SlidingWindow:
        window = self._windows.get((kind, key))
        if window is None:
            window = self._windows[kind, key] = SlidingWindow(limit, seconds)
        return window

    def check(self, now: float, api: str, chat: str | None, card: str | None) -> str | None:
        """The limit the call is past (it is not counted then), or None (it is counted)."""
        windows = [
            ("api", self._window("api", api, self._per_second, 1.0)),
            ("minute", self._window("minute", api, self._per_minute, 60.0)),
        ]
        if chat is not None:
            windows.append(("chat", self._window("chat", chat, CHAT_SENDS_PER_SECOND, 1.0)))
        if card is not None:
            windows.append(("card", self._window("card", card, CARD_CHANGES_PER_SECOND, 1.0)))
        for name, window in windows:
            if window.full(now):
                return name
        for _, window in windows:
            window.times.append(now)
        return None


class _Hang(Exception):
    """The call is never answered: the client gives up at its timeout."""


@dataclass
class _Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class SimTransport(httpx.AsyncBaseTransport):
    """Feishu's Open API for one world; one for the world, whatever process calls it."""

    def __init__(
        self,
        rng: random.Random,
        now: Callable[[], float],
        faults: FaultPlan,
        *,
        token_seconds: int = 7200,
        limits: Limits | None = None,
    ) -> None:
        self.rng = rng
        self.now = now
        self.faults = faults
        self.posts: list[Post] = []
        self.on_card: Callable[[Post], None] | None = None  # told of each approval card shown
        self.token_fetches = 0
        self.cards = CardKit(redraw=lambda message_id, card: None)
        self.chat_of: dict[str, str] = {}  # message id -> its chat (users' messages too)
        self.texts: dict[str, str] = {}  # the bot's text messages as they read now
        self.reactions: dict[str, tuple[str, str]] = {}  # reaction id -> (message, emoji)
        self.limits = limits or Limits()
        self._token_seconds = token_seconds
        self._tokens: dict[str, float] = {}  # token -> when Feishu stops taking it
        self._by_uuid: dict[str, str] = {}  # Feishu's de-duplication: uuid -> message id
        self._ids = itertools.count(1)
        self._params: dict[bytes, dict[str, str]] = {}

    def answers(self) -> dict[str, str]:
        """Each card entity's answer element as it reads now (card id -> its content)."""
        out = {}
        for card_id, entity in self.cards.entities.items():
            for element in entity.card.get("body", {}).get("elements", []):
                if element.get("element_id") == ANSWER:
                    out[card_id] = str(element.get("content", ""))
        return out

    def user_message(self, message_id: str, chat: str) -> None:
        """A user's message in `chat`: the bot may reply to it and react on it."""
        self.chat_of[message_id] = chat

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        method, path, query = request.method, url.path, url.query
        raw = await request.aread()
        body = orjson.loads(raw) if raw else {}
        if path == TOKEN_PATH:
            return _response(self._token(), request)
        params = self._params.get(query)
        if params is None:  # the bridge's few queries, each parsed once
            params = self._params[query] = dict(url.params)
        post = Post(self.now(), *read_call(method, path, params, body))
        post.api, post.chat = api_of(method, path), self._chat(method, path, body)
        self.posts.append(post)
        try:
            answer = await self._answer(post, method, path, request, body)
        except _Hang:
            try:
                await asyncio.sleep(TIMEOUT)
            finally:  # cancelled too: the bridge stopped waiting (a card's final view)
                post.end = self.now()
            raise httpx.ReadTimeout("simulated timeout", request=request) from None
        return _response(answer, request)

    async def _answer(
        self, post: Post, method: str, path: str, request: httpx.Request, body: dict[str, Any]
    ) -> _Answer:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if self._tokens.get(token, 0.0) <= self.now():
            post.ok, post.refused, post.end = False, INVALID_TENANT_TOKEN.code, self.now()
            return _refusal(INVALID_TENANT_TOKEN, post)
        if self.faults.down(self.now() - EPOCH):
            return self._outage(post)
        limited = self.limits.check(self.now(), post.api, post.chat, card_of(path))
        if limited is not None:
            post.ok, post.limited, post.end, post.reset = False, limited, self.now(), 1.0
            headers = {LIMIT_HEADER: "0", RESET_HEADER: "1"}
            return _Answer(RATE_LIMITED.http_status, _error_body(RATE_LIMITED, post), headers)
        # Taken the moment it arrives, whether or not its answer gets back to the bridge.
        try:
            data = self._serve(post, method, path, body)
        except Refused as exc:
            post.ok, post.refused = False, exc.code
            data = None
            answer = _refusal(exc, post)
        else:
            answer = _Answer(200, {"code": 0, "msg": "success", "data": data or {}})
        slow = self.rng.random() < self.faults.slow
        try:
            await asyncio.sleep(
                self.rng.uniform(0.5, 3.0) if slow else self.rng.uniform(0.005, 0.2)
            )
        finally:
            # Cancelled too: the bridge stopped waiting (a card's last state superseded
            # the change), but the request had gone out; it may well have landed.
            post.end = self.now()
        shown = post.ok and post.op == "reply_card" and buttons(post.card or {})
        if shown and self.on_card is not None:  # a person sees an approval's buttons
            self.on_card(post)
        return answer

    def _outage(self, post: Post) -> _Answer:
        """An outage's answer: a 503, a 429 with its reset, or a call that times out."""
        post.ok = False
        kind = self.rng.choice(("503", "429", "timeout"))
        if kind == "timeout":
            raise _Hang
        post.end = self.now()
        if kind == "503":
            return _Answer(503, {"code": 1500, "msg": "simulated 503"})
        reset = self.rng.choice((1, 5, 20))
        post.reset = reset
        headers = {LIMIT_HEADER: str(API_PER_SECOND), RESET_HEADER: str(reset)}
        return _Answer(RATE_LIMITED.http_status, _error_body(RATE_LIMITED, post), headers)

    def _token(self) -> _Answer:
        self.token_fetches += 1
        token = f"t-{self.token_fetches}"
        self._tokens[token] = self.now() + self._token_seconds
        body = {"code": 0, "msg": "ok", "tenant_access_token": token}
        return _Answer(200, body | {"expire": self._token_seconds})

    def _chat(self, method: str, path: str, body: dict[str, Any]) -> str | None:
        """The chat a send goes to (Feishu's 5 a second to one chat is on sends)."""
        if not is_send(method, path):
            return None
        if path == MESSAGES:
            return str(body.get("receive_id", ""))
        match = MESSAGE.fullmatch(path)
        return self.chat_of.get(match["id"]) if match is not None else None

    # -- what each call does ---------------------------------------------------------------

    def _serve(
        self, post: Post, method: str, path: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        if post.uuid and post.uuid in self._by_uuid:  # a repeat: the first answer again
            post.result, post.ok, post.repeat = self._by_uuid[post.uuid], False, True
            return self._message_data(post.result) if post.result else None
        if post.op in _NEW_MESSAGES:
            return self._new_message(post, body)
        if post.op == "create_card":
            card_id = self.cards.create(body)
            post.result = card_id
            return {"card_id": card_id}
        message = MESSAGE.fullmatch(path)
        card = CARD.fullmatch(path)
        if card is not None:
            self._card_change(post, card["id"], card["rest"] or "", body)
            if post.uuid:
                self._by_uuid[post.uuid] = ""
            return None
        if message is None:
            raise NOT_FOUND
        message_id, rest = message["id"], message["rest"] or ""
        if message_id not in self.chat_of:
            raise REACTION_MESSAGE_NOT_FOUND if "/reactions" in rest else _NO_MESSAGE
        if post.op == "add_reaction":
            reaction_id = f"r_{next(self._ids)}"
            self.reactions[reaction_id] = (message_id, post.text)
            post.result = reaction_id
            return {"reaction_id": reaction_id, "reaction_type": {"emoji_type": post.text}}
        if post.op == "remove_reaction":
            found = self.reactions.pop(post.text, None)
            if found is None or found[0] != message_id:
                raise REACTION_ID_INVALID
            return {"reaction_id": post.text}
        if post.op == "edit_text":
            self.texts[message_id] = post.text
            return self._message_data(message_id)
        if post.op == "urgent_app":
            return {"invalid_user_id_list": []}
        if post.op == "get_message":
            return {"items": [self._message_data(message_id)]}
        return None  # update_card: an interactive card patched (what it shows is the post's)

    def _new_message(self, post: Post, body: dict[str, Any]) -> dict[str, Any]:
        if post.op == "send_text_to_user":
            chat = f"oc_p2p_{post.target}"
        elif post.op.startswith("send_"):
            chat = post.target
        elif post.target in self.chat_of:
            chat = self.chat_of[post.target]
        else:
            raise _NO_MESSAGE
        card_id = post.text if post.op == "reply_card_entity" else None
        if card_id is not None and card_id not in self.cards.entities:
            raise CARD_ENTITY_NOT_FOUND
        message_id = f"om_bot_{next(self._ids)}"
        self.chat_of[message_id] = chat
        if post.op in ("reply_text", "send_text", "send_text_to_user"):
            self.texts[message_id] = post.text
        if card_id is not None:
            self.cards.bind(card_id, message_id)
        post.result = message_id
        if post.uuid:
            self._by_uuid[post.uuid] = message_id
        return self._message_data(message_id)

    def _card_change(self, post: Post, card_id: str, rest: str, body: dict[str, Any]) -> None:
        cards = self.cards
        element = ELEMENT.fullmatch(rest)
        if rest == "":
            cards.update(card_id, body)
        elif rest == "/settings":
            cards.settings(card_id, body)
        elif rest == "/batch_update":
            cards.batch(card_id, body)
        elif element is not None and element["content"]:
            cards.content(card_id, element["element"], body)
        elif element is not None and post.op == "update_card_element":
            cards.element(card_id, element["element"], body)
        elif element is not None:
            cards.patch_element(card_id, element["element"], body)
        else:
            raise NOT_FOUND

    def _message_data(self, message_id: str) -> dict[str, Any]:
        chat = self.chat_of.get(message_id, "")
        return {"message_id": message_id, "chat_id": chat, "msg_type": "text"}


_NO_MESSAGE = Refused(400, 230001, "Your request contains an invalid request parameter.")
_NEW_MESSAGES = frozenset(
    {
        "reply_text",
        "reply_card",
        "reply_card_entity",
        "send_text",
        "send_card",
        "send_text_to_user",
        "reply_image",
        "reply_file",
    }
)


def _error_body(error: Refused, post: Post) -> dict[str, Any]:
    log_id = f"sim{len(post.op)}{int(post.start * 1000)}"  # no randomness: a run repeats
    return {"code": error.code, "msg": error.msg, "error": {"log_id": log_id}}


def _refusal(error: Refused, post: Post) -> _Answer:
    return _Answer(error.http_status, _error_body(error, post))


_JSON = (b"Content-Type", b"application/json; charset=utf-8")


def _response(answer: _Answer, request: httpx.Request) -> httpx.Response:
    # Built as read: httpx would otherwise pass the bytes through its decoders and chunker
    # (Response(content=...) reads at once; a stream, in the client), a tenth of a sweep.
    content = orjson.dumps(answer.body)
    headers = [_JSON, *((k.encode(), v.encode()) for k, v in answer.headers.items())]
    response = httpx.Response(
        answer.status, headers=headers, stream=httpx.ByteStream(content), request=request
    )
    response._content = content
    return response


def buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    """The values of a card's buttons (an approval's choices)."""
    return [
        action["value"]
        for element in card.get("elements", [])
        for action in element.get("actions", [])
        if isinstance(action.get("value"), dict)
    ]
