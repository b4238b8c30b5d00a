"""The HTTP client under `FeishuClient`: httpx, with three costs of its defaults removed
(each measured in bench/feishu_client_bench.py or bench/relay_bench.py --profile)."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from typing import Any

import httpcore
import httpx

# Connections kept open to Feishu, and the most calls in flight at once. Feishu answers in
# tens of milliseconds, so 16 carry several hundred calls a second; more calls wait in
# `FeishuHttp.send`, where waiting costs nothing.
MAX_CONNECTIONS = 16
FRESH_SECONDS = 1.0  # see `_ReadinessStream`


class _NoCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class FeishuHttp(httpx.AsyncClient):
    """- No cookies: Feishu's Open API sets none the bridge needs, yet httpx parses every
      response's cookies through urllib's cookie machinery (about 6% of the bridge's CPU per
      message in a profile).
    - No queue inside httpcore: its pool re-scans every waiting request whenever one
      finishes, so calls beyond its connections cost more the more there are. At most
      `max_connections` calls reach it; the rest wait on a semaphore.
    - A cheap readiness check (`_ReadinessBackend`)."""

    def __init__(self, *, max_connections: int = MAX_CONNECTIONS, **kwargs: Any) -> None:
        # keep-alive = connections: httpcore closes idle connections while the pool holds
        # more than its keep-alive count (it counts all, not the idle), so fewer would churn.
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        if "transport" not in kwargs:
            kwargs["transport"] = pooled_transport(limits)
        super().__init__(limits=limits, **kwargs)
        self._cookies = _NoCookies()  # one jar that never fills, not one per request
        self._gate = asyncio.Semaphore(max_connections)

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        async with self._gate:
            return await super().send(request, **kwargs)


def pooled_transport(limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """httpx's transport, its connections made through `_ReadinessBackend`. httpx takes no
    network backend, so the pool it built is given one (`_pool` is httpx's own name;
    tests/unit/test_feishu_http.py fails if a new httpx moves it)."""
    transport = httpx.AsyncHTTPTransport(limits=limits)
    pool = transport._pool
    if isinstance(pool, httpcore.AsyncConnectionPool):
        pool._network_backend = _ReadinessBackend(pool._network_backend)
    return transport


class _ReadinessBackend(httpcore.AsyncNetworkBackend):
    """Before each request httpcore asks every idle connection whether its socket is
    readable (a server that closed it). anyio answers by building all of the socket's
    attributes, a `getpeername` system call among them: with 16 idle connections that was a
    third of a concurrent caller's CPU. These streams keep their socket and poll it."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return _ReadinessStream(await self._inner.connect_tcp(*args, **kwargs))

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return _ReadinessStream(await self._inner.connect_unix_socket(*args, **kwargs))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _ReadinessStream(httpcore.AsyncNetworkStream):
    """The check exists for connections the server closed at its keep-alive timeout (many
    seconds): one that carried a call less than `FRESH_SECONDS` ago is not polled. A server
    that closes it sooner anyway is the race any check has (the call fails and is retried)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")
        self._used_at = time.monotonic()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 - httpcore's signature
        data = await self._inner.read(max_bytes, timeout)
        self._used_at = time.monotonic()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return _ReadinessStream(await self._inner.start_tls(*args, **kwargs))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            fresh = time.monotonic() - self._used_at < FRESH_SECONDS
            return False if fresh else readable(self._socket)
        return self._inner.get_extra_info(info)


def readable(sock: socket.socket | None) -> bool:
    """True when a read would not block: data, or the peer closed (what httpcore checks of
    an idle connection). A closed or unknown socket counts as readable: drop it."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
