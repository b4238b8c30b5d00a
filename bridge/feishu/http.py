"""The HTTP client under `FeishuClient`: httpx, with three costs of its defaults removed
(each measured in bench/feishu_client_bench.py or bench/relay_bench.py --profile)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpcore
import httpx

from bridge.feishu.netstream import AsyncioBackend

# Connections kept open to Feishu, and the most calls in flight at once. Feishu answers in
# tens of milliseconds, so 16 carry several hundred calls a second; more calls wait in
# `Lanes`, where waiting costs nothing.
MAX_CONNECTIONS = 16


class _NoCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class FeishuHttp(httpx.AsyncClient):
    """- No cookies: Feishu's Open API sets none the bridge needs, yet httpx parses every
      response's cookies through urllib's cookie machinery (about 6% of the bridge's CPU per
      message in a profile).
    - One connection per call, without httpcore's shared pool (`Lanes`).
    - Streams on the loop's own transports, not anyio's (`netstream`)."""

    def __init__(self, *, max_connections: int = MAX_CONNECTIONS, **kwargs: Any) -> None:
        # For the pools httpx makes itself (a proxy's): keep-alive = connections, since
        # httpcore closes idle connections while a pool holds more than its keep-alive count
        # (it counts all, not the idle), so fewer would churn.
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        if "transport" not in kwargs:
            kwargs["transport"] = Lanes(max_connections)
        super().__init__(limits=limits, **kwargs)
        self._cookies = _NoCookies()  # one jar that never fills, not one per request

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None


class Lanes(httpx.AsyncBaseTransport):
    """`size` lanes, each an httpx transport whose pool holds one connection, given to one
    call at a time: the lane freed last goes first, so a quiet bridge keeps reusing one warm
    connection. Calls beyond `size` wait here for a lane, where waiting costs nothing.

    Not one httpcore pool of `size` connections: it hands the first idle connection to every
    request that arrives in the same turn of the loop; all but one then fail with
    ConnectionNotAvailable and go round again, and each round checks every connection (and,
    for every idle one, every connection again). At 20 calls at once over 16 connections a
    call went round 4.4 times and checked 85 connections: in bench/feishu_client_bench.py,
    1.5 to 2 ms of the client's CPU per call against about 1 ms one at a time, so calls at
    once ran slower than one by one. A lane's pool has one connection and one call to place."""

    def __init__(self, size: int) -> None:
        ssl_context = httpx.create_ssl_context()  # one for all: loading the CAs is slow
        self._lanes = [_lane(ssl_context) for _ in range(size)]
        self._free = list(self._lanes)  # a stack
        self._gate = asyncio.Semaphore(size)  # a permit is a lane on the stack

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self._gate.acquire()
        lane = self._free.pop()
        release = self._releaser(lane)
        try:
            response = await lane.handle_async_request(request)
        except BaseException:
            release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Releasing(response.stream, release),
            extensions=response.extensions,
        )

    def _releaser(self, lane: httpx.AsyncHTTPTransport) -> Callable[[], None]:
        """Gives `lane` back, once however often it is called."""
        held = [lane]

        def release() -> None:
            if held:
                self._free.append(held.pop())
                self._gate.release()

        return release

    async def aclose(self) -> None:
        for lane in self._lanes:
            await lane.aclose()


class _Releasing(httpx.AsyncByteStream):
    """A response body that frees its lane when closed (httpx closes every response: after
    reading it, or when a streamed one's block ends)."""

    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._release()


def _lane(ssl_context: ssl.SSLContext) -> httpx.AsyncHTTPTransport:
    """httpx's transport for one connection, on the loop's own streams (`netstream`).
    httpx takes no network backend, so the pool it built is given one (`_pool` is httpx's
    own name; tests/unit/test_feishu_http.py fails if a new httpx moves it)."""
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, limits=one)
    pool = transport._pool
    if isinstance(pool, httpcore.AsyncConnectionPool):
        pool._network_backend = AsyncioBackend()
    return transport
