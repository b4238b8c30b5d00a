"""`FeishuClient`: the outbound Feishu API over one pooled `httpx.AsyncClient`.

Not lark-oapi's transport: its async methods fetch the token with blocking `requests` and
open a new connection pool per call. Every JSON call is a typed request (requests.py) sent
through the client's `FeishuSession` (session.py: breaker, log, retries, token, call
budget, transport). The tenant token (`TenantTokenManager`) is fetched over the same pool,
off the event loop's critical path: one fetch shared among concurrent callers, refreshed
early. The bytes that are not JSON (a resource downloaded to disk, a file uploaded) are
`FileTransfer`'s (resources.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bridge.feishu import speech
from bridge.feishu.api import BotInfo
from bridge.feishu.budget import CallBudget
from bridge.feishu.delivery import CircuitBreaker
from bridge.feishu.errors import FeishuError, ServerError, TransportError, check_response
from bridge.feishu.http import FeishuHttp
from bridge.feishu.requests import (
    NO_TERMS,
    AddReaction,
    BatchUpdateCard,
    CallTerms,
    CardSettings,
    CreateCard,
    EditText,
    FeishuRequest,
    GetBotInfo,
    MessageContent,
    PatchCardElement,
    PostCard,
    PostFile,
    PostText,
    Recognize,
    RemoveReaction,
    StreamCardText,
    TextToUser,
    UpdateCard,
    UpdateCardElement,
    UpdateCardEntity,
    UrgentApp,
    message_uuid,
)
from bridge.feishu.resources import Downloaded, FileTransfer
from bridge.feishu.retry import RetryPolicy
from bridge.feishu.session import (
    Authorized,
    Bearer,
    Breaker,
    FeishuSession,
    HttpTransport,
    Logged,
    Paced,
    Retried,
)
from bridge.feishu.text import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_PARTS,
    cap_parts,
    split_text,
)
from bridge.i18n import Translator
from bridge.logs import app_prefix

log = logging.getLogger(__name__)

R = TypeVar("R")
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)

Sleep = Callable[[float], Awaitable[None]]


def _default_cut_notice(kept: int, total: int) -> str:
    return Translator()("reply.cut", kept=kept, total=total)


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
        app: str = "",
    ) -> None:
        self._http = http
        self._who = app_prefix(app)
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
                    log.warning(
                        "%stenant token refresh failed, keeping current token: %s", self._who, exc
                    )
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
    """Implements `bridge.feishu.api.FeishuApi`: `send` for any typed request, and the
    conveniences over it that the bridge uses."""

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
        app: str = "",
    ) -> None:
        """`clock`: the bridge's (`Clock.now`), on which tokens expire and the breaker cools;
        `app`: its name in log lines, when the bridge serves several."""
        self._domain = domain.rstrip("/")
        self._owns_http = http is None
        self._http = http or FeishuHttp(base_url=self._domain, timeout=timeout)
        self._max_chars = max_chars
        self._max_bytes = max_bytes
        self._max_parts = max_parts
        self._cut_notice = cut_notice or _default_cut_notice
        self.tokens = TenantTokenManager(
            self._http,
            self._domain,
            app_id,
            app_secret,
            clock=clock,
            refresh_margin=token_refresh_margin,
            app=app,
        )
        self._breaker = Breaker(breaker or CircuitBreaker(now=clock), app)
        self._paced = Paced(budget)  # every try waits for its turn in the app's call budget
        self.session = FeishuSession(
            [
                self._breaker,
                Logged(app),
                Retried(retry or RetryPolicy(), sleep),
                Authorized(self.tokens),
                self._paced,
                Bearer(self.tokens),
            ],
            HttpTransport(self._http, self._domain),
        )
        self._files = FileTransfer(self._http, self.tokens)

    def __repr__(self) -> str:
        return f"FeishuClient(domain={self._domain!r})"

    def pace(self, budget: CallBudget) -> None:
        self._paced.budget = self._paced.budget or budget

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker.breaker

    async def __aenter__(self) -> FeishuClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def send(self, request: FeishuRequest[R]) -> R:
        return await self.session.send(request)

    # --- messages ---------------------------------------------------------------------

    async def reply_text(
        self,
        message_id: str,
        text: str,
        *,
        uuid: str,
        in_thread: bool = False,
        terms: CallTerms = NO_TERMS,
    ) -> list[str]:
        return [
            await self.send(
                PostText(
                    text=part,
                    uuid=message_uuid(uuid, number),
                    reply_to=message_id,
                    in_thread=in_thread,
                    terms=terms,
                )
            )
            for number, part in self._parts(text)
        ]

    async def send_text(
        self, chat_id: str, text: str, *, uuid: str, terms: CallTerms = NO_TERMS
    ) -> list[str]:
        return [
            await self.send(
                PostText(text=part, uuid=message_uuid(uuid, number), chat_id=chat_id, terms=terms)
            )
            for number, part in self._parts(text)
        ]

    async def send_text_to_user(self, open_id: str, text: str, *, uuid: str) -> tuple[str, str]:
        return await self.send(TextToUser(open_id, text, message_uuid(uuid)))

    async def reply_card(
        self,
        message_id: str,
        card: dict[str, Any],
        *,
        uuid: str,
        in_thread: bool = False,
        terms: CallTerms = NO_TERMS,
    ) -> str:
        post = PostCard(
            card=card,
            uuid=message_uuid(uuid),
            reply_to=message_id,
            in_thread=in_thread,
            terms=terms,
        )
        return await self.send(post)

    async def reply_card_entity(
        self,
        message_id: str,
        card_id: str,
        *,
        uuid: str,
        in_thread: bool = False,
        terms: CallTerms = NO_TERMS,
    ) -> str:
        post = PostCard(
            card_id=card_id,
            uuid=message_uuid(uuid),
            reply_to=message_id,
            in_thread=in_thread,
            terms=terms,
        )
        return await self.send(post)

    async def send_card(
        self, chat_id: str, card: dict[str, Any], *, uuid: str, terms: CallTerms = NO_TERMS
    ) -> str:
        return await self.send(
            PostCard(card=card, uuid=message_uuid(uuid), chat_id=chat_id, terms=terms)
        )

    async def update_card(
        self, message_id: str, card: dict[str, Any], *, terms: CallTerms = NO_TERMS
    ) -> None:
        await self.send(UpdateCard(message_id, card, terms=terms))

    async def edit_text(self, message_id: str, text: str, *, terms: CallTerms = NO_TERMS) -> None:
        await self.send(EditText(message_id, text, terms=terms))

    async def urgent_app(
        self, message_id: str, open_ids: Sequence[str], *, terms: CallTerms = NO_TERMS
    ) -> list[str]:
        return await self.send(UrgentApp(message_id, open_ids, terms=terms))

    async def message_content(self, message_id: str) -> tuple[str, str] | None:
        """(msg_type, content) of a message in a chat the bot is in; None when Feishu will
        not say (recalled, not visible to the bot)."""
        return await self.send(MessageContent(message_id))

    # --- card entities (CardKit) ------------------------------------------------------

    async def create_card(self, card: dict[str, Any], *, terms: CallTerms = NO_TERMS) -> str:
        return await self.send(CreateCard(card, terms=terms))

    async def update_card_entity(
        self, card_id: str, card: dict[str, Any], *, sequence: int, terms: CallTerms = NO_TERMS
    ) -> None:
        await self.send(
            UpdateCardEntity(card_id=card_id, sequence=sequence, card=card, terms=terms)
        )

    async def stream_card_text(
        self,
        card_id: str,
        element_id: str,
        text: str,
        *,
        sequence: int,
        terms: CallTerms = NO_TERMS,
    ) -> None:
        change = StreamCardText(
            card_id=card_id, sequence=sequence, element_id=element_id, text=text, terms=terms
        )
        await self.send(change)

    async def update_card_element(
        self, card_id: str, element: dict[str, Any], *, sequence: int, terms: CallTerms = NO_TERMS
    ) -> None:
        change = UpdateCardElement(card_id=card_id, sequence=sequence, element=element, terms=terms)
        await self.send(change)

    async def patch_card_element(
        self,
        card_id: str,
        element_id: str,
        partial: dict[str, Any],
        *,
        sequence: int,
        terms: CallTerms = NO_TERMS,
    ) -> None:
        change = PatchCardElement(
            card_id=card_id, sequence=sequence, element_id=element_id, partial=partial, terms=terms
        )
        await self.send(change)

    async def batch_update_card(
        self,
        card_id: str,
        actions: list[dict[str, Any]],
        *,
        sequence: int,
        terms: CallTerms = NO_TERMS,
    ) -> None:
        change = BatchUpdateCard(card_id=card_id, sequence=sequence, actions=actions, terms=terms)
        await self.send(change)

    async def card_settings(
        self, card_id: str, settings: dict[str, Any], *, sequence: int, terms: CallTerms = NO_TERMS
    ) -> None:
        change = CardSettings(card_id=card_id, sequence=sequence, settings=settings, terms=terms)
        await self.send(change)

    # --- files (bytes through `FileTransfer`) -----------------------------------------

    async def download_resource(
        self, message_id: str, key: str, resource_type: str, dest: Path, *, max_bytes: int
    ) -> Downloaded:
        return await self._files.download(message_id, key, resource_type, dest, max_bytes=max_bytes)

    async def upload_and_reply(
        self,
        reply_to: str,
        path: Path,
        *,
        uuid: str,
        in_thread: bool = False,
        terms: CallTerms = NO_TERMS,
    ) -> str:
        """Upload `path` (an image as an image, anything else as a file) and post it as a
        reply; its message id. The caller checked the size against the limits."""
        file_type, key = await self._files.upload(path)
        post = PostFile(
            file_type=file_type,
            key=key,
            uuid=uuid[-50:],
            reply_to=reply_to,
            in_thread=in_thread,
            terms=terms,
        )
        return await self.send(post)

    # --- speech recognition -----------------------------------------------------------

    async def recognize_speech(self, pcm: bytes) -> str:
        """The words in `pcm` (16 kHz mono s16le); "" when none were recognized. Up to the
        file API's limit in one call, longer in 200 ms pieces of one stream (speech.py)."""
        heard = ""
        for op, path, body in speech.calls(pcm):
            answer = await self.send(Recognize(op, path, body))
            heard = speech.recognized(answer) or heard  # the text so far; the last is the whole
        return heard

    # --- reactions (best effort: never raise) -----------------------------------------

    async def add_reaction(
        self, message_id: str, emoji_type: str, *, terms: CallTerms = NO_TERMS
    ) -> str | None:
        try:
            return await self.send(AddReaction(message_id, emoji_type, terms=terms))
        except FeishuError:
            return None  # logged by the session, or skipped

    async def remove_reaction(
        self, message_id: str, reaction_id: str, *, terms: CallTerms = NO_TERMS
    ) -> bool:
        try:
            return await self.send(RemoveReaction(message_id, reaction_id, terms=terms))
        except FeishuError:
            return False

    # --- bot ----------------------------------------------------------------------------

    async def bot_info(self) -> BotInfo:
        return await self.send(GetBotInfo())

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
