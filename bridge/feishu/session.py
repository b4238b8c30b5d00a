"""`FeishuSession.send`: the one way a JSON call reaches Feishu, in the manner of aiogram's
`BaseSession.make_request` and httpx's transports. A typed request (requests.py) goes
through the middlewares, outermost first, down to the transport:

- `Breaker`: a best-effort call (a reaction) is skipped while a rate limit's cool-down
  lasts, so the quota goes to replies;
- `Logged`: a call that finally fails is logged once (code, msg, log_id; never the body);
- `Retried`: 5xx, 429 and transport errors are retried with the very same bytes (so the same
  `uuid`), unless the call became moot meanwhile (its terms' `moot`);
- `Authorized`: a try Feishu refused for its tenant token is made once more, with a new one;
- `Paced`: each try waits for its turn in the app's call budget, as its terms' chat and
  lane (unless its caller paid ahead); a 429 tells the budget;
- `Bearer`: the tenant token, taken once the try's turn has come;
- the transport: httpx over the client's pool; every answer mapped once
  (`errors.check_response`).

A fake Feishu is an httpx transport under all of this (tests/sim/transport.py, the engine's
recording Feishu), never a second implementation of the calls."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode

import httpx

from bridge.feishu.budget import CallBudget
from bridge.feishu.delivery import CircuitBreaker, Superseded
from bridge.feishu.errors import (
    FeishuError,
    RateLimited,
    Skipped,
    TokenInvalid,
    TransportError,
    check_response,
)
from bridge.feishu.http import PARSED_URLS
from bridge.feishu.json_codec import dumps_utf8
from bridge.feishu.requests import CallTerms, FeishuRequest
from bridge.feishu.retry import RetryPolicy, Sleep, retried
from bridge.logs import app_prefix

log = logging.getLogger("bridge.feishu.client")  # the client's calls, logged as its own

R = TypeVar("R")
_SPENT = httpx.ByteStream(b"")  # a read response's stream (see `HttpTransport`)


@dataclass(slots=True)
class Sending:
    """One request on its way down: the body's bytes (encoded once, so every try sends the
    same) and the token the try carries."""

    request: FeishuRequest[Any]
    content: bytes | None
    token: str = ""


Next = Callable[[Sending], Awaitable[dict[str, Any]]]


class Middleware(Protocol):
    async def __call__(self, sending: Sending, call_next: Next) -> dict[str, Any]: ...


class Tokens(Protocol):
    async def get(self) -> str: ...

    async def invalidate(self, token: str) -> None: ...


class Breaker:
    def __init__(self, breaker: CircuitBreaker, app: str = "") -> None:
        self.breaker = breaker
        self._who = app_prefix(app)

    async def __call__(self, sending: Sending, call_next: Next) -> dict[str, Any]:
        request = sending.request
        if not request.best_effort:
            return await call_next(sending)
        if not self.breaker.allow():
            log.debug("%s skipped: reactions paused after a rate limit", request.label())
            raise Skipped(request.label())
        limited: RateLimited | None = None
        try:
            return await call_next(sending)
        except RateLimited as exc:
            limited = exc
            raise
        finally:
            if limited is not None:
                window = self.breaker.record_rate_limited(limited.reset_after)
                log.info("%sreactions paused for %.0fs after a rate limit", self._who, window)
            else:
                self.breaker.record_ok()


class Logged:
    def __init__(self, app: str = "") -> None:
        self._who = app_prefix(app)

    async def __call__(self, sending: Sending, call_next: Next) -> dict[str, Any]:
        try:
            return await call_next(sending)
        except Skipped:
            raise
        except FeishuError as exc:
            request = sending.request
            log.log(
                request.failure_level,
                "%sfeishu %s failed: %s code=%s msg=%r http_status=%s log_id=%s",
                self._who,
                request.label(),
                type(exc).__name__,
                exc.code,
                exc.msg,
                exc.http_status,
                exc.log_id,
            )
            raise


class Retried:
    def __init__(self, policy: RetryPolicy, sleep: Sleep) -> None:
        self.policy = policy
        self._sleep = sleep

    async def __call__(self, sending: Sending, call_next: Next) -> dict[str, Any]:
        request = sending.request

        async def again() -> dict[str, Any]:
            if became_moot(request.terms):  # not retried: a "still working" line whose first
                raise Superseded  # try timed out is not posted after its turn ended
            return await call_next(sending)

        try:
            return await call_next(sending)
        except FeishuError as first:  # retried (bridge/feishu/retry.py) when worth it
            best_effort = request.best_effort
            return await retried(
                first,
                again,
                op=request.label(),
                policy=self.policy,
                sleep=self._sleep,
                attempts=self.policy.best_effort_attempts if best_effort else None,
                retry_rate_limited=not best_effort,
            )


def became_moot(terms: CallTerms) -> bool:
    return terms.moot is not None and terms.moot()


class Authorized:
    def __init__(self, tokens: Tokens) -> None:
        self._tokens = tokens

    async def __call__(self, sending: Sending, call_next: Next) -> dict[str, Any]:
        try:
            return await call_next(sending)
        except TokenInvalid:
            # Revoked or expired early: forget it and try exactly once more (paced again,
            # and `Bearer` takes a new token).
            await self._tokens.invalidate(sending.token)
            return await call_next(sending)


class Bearer:
    """The token, taken as the try goes out: one taken before its wait in the call budget
    (a 429's reset can hold a call for tens of seconds) may have lapsed by then."""

    def __init__(self, tokens: Tokens) -> None:
        self._tokens = tokens

    async def __call__(self, sending: Sending, call_next: Next) -> dict[str, Any]:
        sending.token = await self._tokens.get()
        return await call_next(sending)


class Paced:
    def __init__(self, budget: CallBudget | None = None) -> None:
        self.budget = budget

    async def __call__(self, sending: Sending, call_next: Next) -> dict[str, Any]:
        budget = self.budget
        if budget is None:
            return await call_next(sending)
        request = sending.request
        terms, path = request.terms, request.path
        credit = terms.paid.spend() if terms.paid is not None else None
        api = await budget.before_call(request.method, path, terms, credit)
        budget.going(api)
        try:
            return await call_next(sending)
        except RateLimited as exc:
            budget.rate_limited(exc.reset_after, request.method, path, terms.chat)
            raise
        finally:
            budget.answered(api)


class HttpTransport:
    """The bottom of the chain: the request over httpx, its answer checked.

    The request is the one `AsyncClient.build_request` makes (the client's headers, then
    the token and the body's type and length, its timeouts), built without its merges,
    which cost about as much as the call's transport in the simulator: the client's
    headers with `Host` are kept ready, and each URL with its query is parsed once while
    in use (`PARSED_URLS`). It goes to the transport the client picks for its URL (its
    proxies' mounts; `_send`)."""

    def __init__(self, http: httpx.AsyncClient, domain: str) -> None:
        self._http = http
        self._domain = domain
        # An httpx.URL never changes: one may serve every request.
        self._parsed = lru_cache(maxsize=PARSED_URLS)(self._parse)
        self._head: tuple[httpx.Headers, httpx.Headers] | None = None  # the client's, ready

    async def __call__(self, sending: Sending) -> dict[str, Any]:
        try:
            response = await self._send(self._request(sending))
        except httpx.RequestError as exc:
            raise TransportError.from_httpx(exc) from None
        # The body is read (the request was not streamed): the spent stream, which holds
        # the connection's response, is let go now (httpx's own `send` binds a response and
        # its stream to each other, a cycle only the garbage collector would break).
        response.stream = _SPENT
        return check_response(response)

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """`AsyncClient.send` for a JSON call, without the layers it never uses (an auth
        flow, redirects, event hooks, cookies: a third of the client's CPU per call): the
        transport the client picks for the URL (its mounts and proxies; respx's mock in
        tests), the body read, the connection given back."""
        http = self._http
        if http.auth is not None or any(http.event_hooks.values()):
            return await http.send(request)
        if http.is_closed:
            raise RuntimeError("the Feishu client's HTTP client is closed")
        transport = http._transport_for_url(request.url)  # (as `send` picks it)
        response = await transport.handle_async_request(request)
        response.request = request
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    def _request(self, sending: Sending) -> httpx.Request:
        request, content, http = sending.request, sending.content, self._http
        params = request.params()
        if http.params or http.cookies:  # the client's own, merged as httpx merges them
            merged = {"Authorization": f"Bearer {sending.token}"}
            if content is not None:
                merged["Content-Type"] = _JSON
            return http.build_request(
                request.method,
                self._domain + request.path,
                params=params,
                content=content,
                headers=merged,
            )
        url = self._url(request.path, params)
        headers = self._headers(http.headers, url)
        headers["Authorization"] = f"Bearer {sending.token}"
        if content is not None:
            headers["Content-Type"] = _JSON
            headers["Content-Length"] = str(len(content))
        elif request.method in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = "0"
        built = httpx.Request(
            request.method,
            url,
            headers=headers,
            stream=httpx.ByteStream(content or b""),
            extensions={"timeout": http.timeout.as_dict()},
        )
        built.read()  # as a request with content is: its bytes at hand (`request.content`)
        return built

    def _url(self, path: str, params: dict[str, str] | None) -> httpx.URL:
        return self._parsed(path, tuple(params.items()) if params else ())

    def _parse(self, path: str, query: tuple[tuple[str, str], ...]) -> httpx.URL:
        query_string = "?" + urlencode(query) if query else ""  # as httpx encodes it
        return httpx.URL(self._domain + path + query_string)

    def _headers(self, client: httpx.Headers, url: httpx.URL) -> httpx.Headers:
        head = self._head
        if head is None or head[0] is not client:  # the client's headers were replaced
            ready = httpx.Headers([(b"Host", url.netloc), *client.raw])
            head = self._head = (client, ready)
        return head[1].copy()


_JSON = "application/json; charset=utf-8"


class FeishuSession:
    def __init__(self, middlewares: Sequence[Middleware], transport: Next) -> None:
        self.middlewares = tuple(middlewares)
        chain = transport
        for middleware in reversed(self.middlewares):
            chain = partial(middleware, call_next=chain)
        self._chain: Next = chain

    async def send(self, request: FeishuRequest[R]) -> R:
        body = request.body()
        content = dumps_utf8(body) if body is not None else None
        answer = await self._chain(Sending(request, content))
        return request.answer(answer)
