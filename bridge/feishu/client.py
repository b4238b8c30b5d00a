"""`FeishuClient`: the outbound Feishu API over one pooled `httpx.AsyncClient`.

Not lark-oapi's transport: its async methods fetch the token with blocking `requests` and
open a new connection pool per call. Every JSON call here goes through `_request`, which
adds the tenant token, waits for its turn in the call budget, retries what is worth
retrying (5xx, 429, transport errors) with the same body, so the same `uuid`, and maps
every answer through `errors.check_response`. The tenant token (`TenantTokenManager`) is
fetched over the same pool, off the event loop's critical path: one fetch shared among
concurrent callers, refreshed early. The bytes that are not JSON (a resource
downloaded to disk, a file uploaded) are `FileTransfer`'s (resources.py).

CardKit: a card entity is created from card JSON 2.0 and posted as a message that names it
(`{"type": "card", "data": {"card_id": …}}`); from then on it is changed through CardKit
with a `sequence` that must grow with every change of that card, never through the message.
Feishu allows 10 changes a second per card; the caller throttles.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from bridge.feishu import speech
from bridge.feishu.api import BotInfo
from bridge.feishu.budget import CallBudget
from bridge.feishu.delivery import CircuitBreaker, still_wanted
from bridge.feishu.errors import (
    FeishuError,
    RateLimited,
    ServerError,
    TokenInvalid,
    TransportError,
    check_response,
)
from bridge.feishu.http import FeishuHttp
from bridge.feishu.json_codec import dumps
from bridge.feishu.resources import Downloaded, FileTransfer
from bridge.feishu.retry import RetryPolicy, retried
from bridge.feishu.text import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_PARTS,
    cap_parts,
    split_text,
)
from bridge.i18n import Translator
from bridge.utf8 import utf8_safe

log = logging.getLogger(__name__)

UUID_MAX_LEN = 50  # Feishu dedups a message uuid for one hour; at most 50 characters
_MESSAGES = "/open-apis/im/v1/messages"
_BOT_INFO = "/open-apis/bot/v3/info"
_CARDS = "/open-apis/cardkit/v1/cards"
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)

Sleep = Callable[[float], Awaitable[None]]
_SPENT = httpx.ByteStream(b"")  # a read response's stream (see `FeishuClient._send`)


def _default_cut_notice(kept: int, total: int) -> str:
    return Translator()("reply.cut", kept=kept, total=total)


def message_uuid(base: str, part: int = 1) -> str:
    """The uuid of part `part` of a message: `base`, then `base-2`, `base-3`…

    Feishu accepts at most 50 characters, so a longer result is replaced by a digest of
    `base` (stable, so a retry still dedups) followed by the same suffix."""
    if not base:
        raise ValueError("a message uuid is required (it is what makes retries safe)")
    suffix = "" if part == 1 else f"-{part}"
    candidate = base + suffix
    if len(candidate) <= UUID_MAX_LEN:
        return candidate
    digest = hashlib.sha256(base.encode("utf-8")).hexdigest()[: UUID_MAX_LEN - 8]
    return digest + suffix


def _data(body: dict[str, Any] | None) -> dict[str, Any]:
    data = body.get("data") if body else None
    return data if isinstance(data, dict) else {}


def _card_change_uuid(card_id: str, sequence: int) -> str:
    return f"{card_id[-32:]}-{sequence}"  # one change, whatever the retries


# --- the tenant access token, fetched asynchronously over the client's pool ---------------

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
# Feishu hands out a new token once the current one has under 30 minutes left, so any
# margin below that gets a fresh token rather than the same one again.
DEFAULT_REFRESH_MARGIN = 300.0


@dataclass(frozen=True)
class _Cached:
    value: str
    expires_at: float  # clock time after which Feishu rejects it
    refresh_at: float  # clock time after which we fetch a new one


class TenantTokenManager:
    """Cache of the app's tenant_access_token; `get()` is safe to call concurrently."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        domain: str,
        app_id: str,
        app_secret: str,
        *,
        clock: Callable[[], float],
        refresh_margin: float = DEFAULT_REFRESH_MARGIN,
    ) -> None:
        self._http = http
        self._url = domain.rstrip("/") + TOKEN_PATH
        self._app_id = app_id
        self._app_secret = app_secret
        self._clock = clock
        self._refresh_margin = refresh_margin
        self._cached: _Cached | None = None
        self._lock = asyncio.Lock()
        self.fetch_count = 0  # observable for tests and metrics

    def __repr__(self) -> str:  # never show the secret or the token
        return f"TenantTokenManager(app_id={self._app_id!r})"

    async def get(self) -> str:
        cached = self._cached
        if cached is not None and self._clock() < cached.refresh_at:
            return cached.value
        # Single flight: the first caller fetches, the others wait on the lock and then
        # find the fresh token in the cache.
        async with self._lock:
            cached = self._cached
            now = self._clock()
            if cached is not None and now < cached.refresh_at:
                return cached.value
            try:
                self._cached = await self._fetch()
            except (ServerError, TransportError) as exc:
                # Inside the refresh margin the old token still works: keep using it.
                if cached is not None and now < cached.expires_at:
                    log.warning("tenant token refresh failed, keeping current token: %s", exc)
                    return cached.value
                raise
            return self._cached.value

    async def invalidate(self, token: str) -> None:
        """Forget `token` after Feishu rejected it. Only that token: when many calls fail
        with the same stale token at once, the first one to get here wins and the rest
        reuse the token it fetched."""
        async with self._lock:
            if self._cached is not None and self._cached.value == token:
                self._cached = None

    async def _fetch(self) -> _Cached:
        body = json.dumps({"app_id": self._app_id, "app_secret": self._app_secret})
        try:
            response = await self._http.post(
                self._url,
                content=body.encode(),
                headers={"Content-Type": "application/json; charset=utf-8"},
            )
        except httpx.RequestError as exc:
            raise TransportError.from_httpx(exc) from None
        data = check_response(response)
        self.fetch_count += 1
        value = data.get("tenant_access_token")
        expire = data.get("expire")
        if not isinstance(value, str) or not value or not isinstance(expire, int | float):
            raise ServerError(0, "token response without tenant_access_token/expire")
        now = self._clock()
        # Short-lived tokens (the emulator's) still get refreshed before they lapse.
        margin = min(self._refresh_margin, float(expire) / 2)
        log.debug("fetched tenant token, valid for %ss", expire)
        return _Cached(value=value, expires_at=now + expire, refresh_at=now + expire - margin)


# --- the client ---------------------------------------------------------------------------


class FeishuClient:
    """Implements `bridge.feishu.api.FeishuApi`."""

    def __init__(
        self,
        app_id: str,
        app_secret: str,
        domain: str,
        *,
        clock: Callable[[], float],
        http: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        sleep: Sleep = asyncio.sleep,
        breaker: CircuitBreaker | None = None,
        token_refresh_margin: float = DEFAULT_REFRESH_MARGIN,
        max_chars: int = DEFAULT_MAX_CHARS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_parts: int = DEFAULT_MAX_PARTS,
        cut_notice: Callable[[int, int], str] | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        """`clock`: the bridge's (`Clock.now`), on which tokens expire and the breaker cools."""
        self._domain = domain.rstrip("/")
        self._owns_http = http is None
        self._http = http or FeishuHttp(base_url=self._domain, timeout=timeout)
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._breaker = breaker or CircuitBreaker(now=clock)
        self._max_chars = max_chars
        self._max_bytes = max_bytes
        self._max_parts = max_parts
        self._cut_notice = cut_notice or _default_cut_notice
        self._budget = budget  # every request waits for its turn in the app's call budget
        self.tokens = TenantTokenManager(
            self._http,
            self._domain,
            app_id,
            app_secret,
            clock=clock,
            refresh_margin=token_refresh_margin,
        )
        self._files = FileTransfer(self._http, self.tokens)

    def __repr__(self) -> str:
        return f"FeishuClient(domain={self._domain!r})"

    def pace(self, budget: CallBudget) -> None:
        self._budget = self._budget or budget

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    async def __aenter__(self) -> FeishuClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    # --- messages ---------------------------------------------------------------------

    async def reply_text(
        self, message_id: str, text: str, *, uuid: str, in_thread: bool = False
    ) -> list[str]:
        path = f"{_MESSAGES}/{quote(message_id, safe='')}/reply"
        ids: list[str] = []
        for number, part in self._parts(text):
            body = {
                "msg_type": "text",
                "content": dumps({"text": part}),
                "reply_in_thread": in_thread,
                "uuid": message_uuid(uuid, number),
            }
            ids.append(await self._post_message("reply_text", path, body))
        return ids

    async def send_text(self, chat_id: str, text: str, *, uuid: str) -> list[str]:
        ids: list[str] = []
        for number, part in self._parts(text):
            body = {
                "receive_id": chat_id,
                "msg_type": "text",
                "content": dumps({"text": part}),
                "uuid": message_uuid(uuid, number),
            }
            ids.append(await self._post_message("send_text", _MESSAGES, body, chat=True))
        return ids

    async def send_text_to_user(self, open_id: str, text: str, *, uuid: str) -> tuple[str, str]:
        body = {
            "receive_id": open_id,
            "msg_type": "text",
            "content": dumps({"text": text}),
            "uuid": message_uuid(uuid),
        }
        params = {"receive_id_type": "open_id"}
        data = _data(
            await self._request("send_to_user", "POST", _MESSAGES, params=params, body=body)
        )
        message_id, chat_id = data.get("message_id"), data.get("chat_id")
        if not isinstance(message_id, str) or not isinstance(chat_id, str) or not chat_id:
            raise ServerError(0, "message response without data.message_id and data.chat_id")
        return message_id, chat_id

    async def reply_card(
        self, message_id: str, card: dict[str, Any], *, uuid: str, in_thread: bool = False
    ) -> str:
        path = f"{_MESSAGES}/{quote(message_id, safe='')}/reply"
        body = {
            "msg_type": "interactive",
            "content": dumps(card),
            "reply_in_thread": in_thread,
            "uuid": message_uuid(uuid),
        }
        return await self._post_message("reply_card", path, body)

    async def reply_card_entity(
        self, message_id: str, card_id: str, *, uuid: str, in_thread: bool = False
    ) -> str:
        path = f"{_MESSAGES}/{quote(message_id, safe='')}/reply"
        body = {
            "msg_type": "interactive",
            "content": dumps({"type": "card", "data": {"card_id": card_id}}),
            "reply_in_thread": in_thread,
            "uuid": message_uuid(uuid),
        }
        return await self._post_message("reply_card_entity", path, body)

    async def send_card(self, chat_id: str, card: dict[str, Any], *, uuid: str) -> str:
        body = {
            "receive_id": chat_id,
            "msg_type": "interactive",
            "content": dumps(card),
            "uuid": message_uuid(uuid),
        }
        return await self._post_message("send_card", _MESSAGES, body, chat=True)

    async def update_card(self, message_id: str, card: dict[str, Any]) -> None:
        path = f"{_MESSAGES}/{quote(message_id, safe='')}"
        await self._request("update_card", "PATCH", path, body={"content": dumps(card)})

    async def edit_text(self, message_id: str, text: str) -> None:
        path = f"{_MESSAGES}/{quote(message_id, safe='')}"
        body = {"msg_type": "text", "content": dumps({"text": text})}
        await self._request("edit_text", "PUT", path, body=body)

    async def urgent_app(self, message_id: str, open_ids: Sequence[str]) -> list[str]:
        path = f"{_MESSAGES}/{quote(message_id, safe='')}/urgent_app"
        params = {"user_id_type": "open_id"}
        body = {"user_id_list": list(open_ids)}
        # Logged by its caller (a refusal may be expected: the start-up probe, the scope).
        data = await self._request(
            "urgent_app", "PATCH", path, params=params, body=body, failure_level=logging.INFO
        )
        invalid = _data(data).get("invalid_user_id_list")
        return [i for i in invalid if isinstance(i, str)] if isinstance(invalid, list) else []

    async def message_content(self, message_id: str) -> tuple[str, str] | None:
        """(msg_type, content) of a message in a chat the bot is in; None when Feishu will
        not say (recalled, not visible to the bot)."""
        path = f"{_MESSAGES}/{quote(message_id, safe='')}"
        data = await self._request("get_message", "GET", path)
        items = (data.get("data") or {}).get("items") or []
        if not items or not isinstance(items[0], dict):
            return None
        item = items[0]
        content = (item.get("body") or {}).get("content")
        msg_type = item.get("msg_type")
        if not isinstance(content, str) or not isinstance(msg_type, str):
            return None
        return msg_type, content

    # --- card entities (CardKit) ------------------------------------------------------

    async def create_card(self, card: dict[str, Any]) -> str:
        body = {"type": "card_json", "data": dumps(card)}
        data = await self._request("create_card", "POST", _CARDS, body=body)
        card_id = (data.get("data") or {}).get("card_id")
        if not isinstance(card_id, str) or not card_id:
            raise ServerError(0, "card create response without data.card_id")
        return card_id

    async def update_card_entity(
        self, card_id: str, card: dict[str, Any], *, sequence: int
    ) -> None:
        whole = {"type": "card_json", "data": dumps(card)}
        await self._change_card("update_card_entity", "PUT", card_id, "", sequence, card=whole)

    async def stream_card_text(
        self, card_id: str, element_id: str, text: str, *, sequence: int
    ) -> None:
        tail = f"/elements/{quote(element_id, safe='')}/content"
        await self._change_card("stream_card_text", "PUT", card_id, tail, sequence, content=text)

    async def update_card_element(
        self, card_id: str, element: dict[str, Any], *, sequence: int
    ) -> None:
        tail = f"/elements/{quote(str(element['element_id']), safe='')}"
        new = dumps(element)
        await self._change_card("update_card_element", "PUT", card_id, tail, sequence, element=new)

    async def patch_card_element(
        self, card_id: str, element_id: str, partial: dict[str, Any], *, sequence: int
    ) -> None:
        tail = f"/elements/{quote(element_id, safe='')}"
        fields = {"partial_element": dumps(partial)}
        await self._change_card("patch_card_element", "PATCH", card_id, tail, sequence, **fields)

    async def batch_update_card(
        self, card_id: str, actions: list[dict[str, Any]], *, sequence: int
    ) -> None:
        batch = dumps(actions)
        await self._change_card(
            "batch_update_card", "POST", card_id, "/batch_update", sequence, actions=batch
        )

    async def card_settings(self, card_id: str, settings: dict[str, Any], *, sequence: int) -> None:
        config = dumps(settings)
        await self._change_card(
            "card_settings", "PATCH", card_id, "/settings", sequence, settings=config
        )

    async def _change_card(
        self, op: str, method: str, card_id: str, tail: str, sequence: int, **fields: Any
    ) -> None:
        """One CardKit change of a card entity: `fields` with its `sequence` and the uuid
        that makes a retry of it count once."""
        path = f"{_CARDS}/{quote(card_id, safe='')}{tail}"
        body = {**fields, "sequence": sequence, "uuid": _card_change_uuid(card_id, sequence)}
        await self._request(op, method, path, body=body)

    # --- files (bytes through `FileTransfer`) -----------------------------------------

    async def download_resource(
        self, message_id: str, key: str, resource_type: str, dest: Path, *, max_bytes: int
    ) -> Downloaded:
        return await self._files.download(message_id, key, resource_type, dest, max_bytes=max_bytes)

    async def upload_and_reply(
        self, reply_to: str, path: Path, *, uuid: str, in_thread: bool = False
    ) -> str:
        """Upload `path` (an image as an image, anything else as a file) and post it as a
        reply; its message id. The caller checked the size against the limits."""
        msg_type, content = await self._files.upload(path)
        body = {
            "msg_type": msg_type,
            "content": json.dumps(content),
            "reply_in_thread": in_thread,
            "uuid": uuid[-50:],
        }
        reply = f"{_MESSAGES}/{quote(reply_to, safe='')}/reply"
        return await self._post_message(f"reply_{msg_type}", reply, body)

    # --- speech recognition -----------------------------------------------------------

    async def recognize_speech(self, pcm: bytes) -> str:
        """The words in `pcm` (16 kHz mono s16le); "" when none were recognized. Up to the
        file API's limit in one call, longer in 200 ms pieces of one stream (speech.py)."""
        heard = ""
        for op, path, body in speech.calls(pcm):
            answer = await self._request(op, "POST", path, body=body)
            heard = speech.recognized(answer) or heard  # the text so far; the last is the whole
        return heard

    # --- reactions (best effort) ------------------------------------------------------

    async def add_reaction(self, message_id: str, emoji_type: str) -> str | None:
        path = f"{_MESSAGES}/{quote(message_id, safe='')}/reactions"
        body = {"reaction_type": {"emoji_type": emoji_type}}
        data = await self._best_effort("add_reaction", "POST", path, body)
        reaction_id = _data(data).get("reaction_id")
        return reaction_id if isinstance(reaction_id, str) else None

    async def remove_reaction(self, message_id: str, reaction_id: str) -> bool:
        path = f"{_MESSAGES}/{quote(message_id, safe='')}/reactions/{quote(reaction_id, safe='')}"
        return await self._best_effort("remove_reaction", "DELETE", path, None) is not None

    # --- bot ----------------------------------------------------------------------------

    async def bot_info(self) -> BotInfo:
        data = await self._request("bot_info", "GET", _BOT_INFO)
        bot = data.get("bot")
        if not isinstance(bot, dict) or not isinstance(bot.get("open_id"), str):
            raise ServerError(0, "bot info response without bot.open_id")
        return BotInfo(open_id=bot["open_id"], app_name=str(bot.get("app_name", "")))

    # --- internals ----------------------------------------------------------------------

    def _parts(self, text: str) -> list[tuple[int, str]]:
        """Numbered parts; whitespace-only ones are skipped (Feishu shows nothing for
        them) but keep their number, so uuids stay the same on every retry."""
        parts = split_text(text, max_chars=self._max_chars, max_bytes=self._max_bytes)
        numbered = [(i, p) for i, p in enumerate(parts, start=1) if p.strip()]
        if not numbered:
            raise ValueError("cannot send an empty text message")
        if len(numbered) > self._max_parts:
            log.warning(
                "text of %d characters needs %d parts; only %d sent, the rest cut",
                len(text),
                len(numbered),
                self._max_parts,
            )
            numbers = [n for n, _ in numbered]
            capped = cap_parts([p for _, p in numbered], self._max_parts, self._cut_notice)
            return list(zip(numbers, capped, strict=False))
        if len(numbered) > 1:
            log.info("text of %d characters sent in %d parts", len(text), len(numbered))
        return numbered

    async def _post_message(
        self, op: str, path: str, body: dict[str, Any], *, chat: bool = False
    ) -> str:
        params = {"receive_id_type": "chat_id"} if chat else None
        data = await self._request(op, "POST", path, params=params, body=body)
        message_id = _data(data).get("message_id")
        if not isinstance(message_id, str):
            raise ServerError(0, "message response without data.message_id")
        return message_id

    async def _best_effort(
        self, op: str, method: str, path: str, body: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Reactions never raise a FeishuError; a rate limit opens the breaker, and while
        it is open they are skipped so the quota is left to replies."""
        if not self._breaker.allow():
            log.debug("%s skipped: reactions paused after a rate limit", op)
            return None
        limited: RateLimited | None = None
        try:
            return await self._request(
                op,
                method,
                path,
                body=body,
                attempts=self._retry.best_effort_attempts,
                retry_rate_limited=False,
                failure_level=logging.INFO,
            )
        except RateLimited as exc:
            limited = exc
            return None
        except FeishuError:
            return None  # already logged by _request
        finally:
            if limited is not None:
                window = self._breaker.record_rate_limited(limited.reset_after)
                log.info("reactions paused for %.0fs after a rate limit", window)
            else:
                self._breaker.record_ok()

    async def _request(
        self,
        op: str,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
        attempts: int | None = None,
        retry_rate_limited: bool = True,
        failure_level: int = logging.WARNING,
    ) -> dict[str, Any]:
        """One logical call: retried on 5xx / 429 / transport errors with the very same
        bytes, and logged once if it finally fails (code, msg, log_id; never the body)."""
        # utf8_safe: a lone surrogate in a card would otherwise fail to encode.
        content = utf8_safe(dumps(body)).encode("utf-8") if body is not None else None

        async def again() -> dict[str, Any]:
            still_wanted()  # a post that became moot meanwhile is not retried (delivery.py)
            return await self._call_once(method, path, params, content)

        try:
            try:
                return await self._call_once(method, path, params, content)
            except FeishuError as first:  # retried (bridge/feishu/retry.py) when worth it
                return await retried(
                    first,
                    again,
                    op=op,
                    policy=self._retry,
                    sleep=self._sleep,
                    attempts=attempts,
                    retry_rate_limited=retry_rate_limited,
                )
        except FeishuError as exc:
            log.log(
                failure_level,
                "feishu %s failed: %s code=%s msg=%r http_status=%s log_id=%s",
                op,
                type(exc).__name__,
                exc.code,
                exc.msg,
                exc.http_status,
                exc.log_id,
            )
            raise

    async def _call_once(
        self, method: str, path: str, params: dict[str, str] | None, content: bytes | None
    ) -> dict[str, Any]:
        response, token = await self._paced(method, path, params, content)
        try:
            return check_response(response)
        except RateLimited as exc:
            if self._budget is not None:
                self._budget.rate_limited(exc.reset_after, method, path)
            raise
        except TokenInvalid:
            # Revoked or expired early: fetch a new token and try exactly once more.
            await self.tokens.invalidate(token)
            response, _ = await self._paced(method, path, params, content)
            return check_response(response)

    async def _paced(
        self, method: str, path: str, params: dict[str, str] | None, content: bytes | None
    ) -> tuple[httpx.Response, str]:
        """The call sent once its turn in the budget came, and the token it went with."""
        if self._budget is not None:
            await self._budget.before_call(method, path)
        # The token is taken then: one taken before a long wait for the turn (an API paused
        # by an outage's 429s) may have lapsed meanwhile (the simulator's seed 1881).
        token = await self.tokens.get()
        return await self._send(method, path, params, content, token), token

    async def _send(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None,
        content: bytes | None,
        token: str,
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"}
        if content is not None:
            headers["Content-Type"] = "application/json; charset=utf-8"
        try:
            response = await self._http.request(
                method, self._domain + path, params=params, content=content, headers=headers
            )
        except httpx.RequestError as exc:
            raise TransportError.from_httpx(exc) from None
        # httpx binds a response and its stream to each other, a reference cycle holding
        # the whole request's objects until the garbage collector runs. The body is read
        # (the request was not streamed): the spent stream is let go now.
        response.stream = _SPENT
        return response
