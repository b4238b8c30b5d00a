"""httpcore's network streams on the event loop's own transports, not through anyio.

httpcore's default backend goes through anyio, which per read and per write of a call
opens a cancel scope with its own timer, yields one extra loop turn after each write, and
speaks TLS through a Python memory-BIO wrapper. Here a read or a write is a buffer check
and, only when it must wait, one future and one timer; TLS is the loop's own (uvloop's is
C). In bench/relay_bench.py --profile anyio was the largest single part of an outbound call.

An idle connection also answers httpcore's "is it readable" (a server that closed it)
from what the loop has seen, and polls its socket only if it has been idle longer than
`FRESH_SECONDS` (a close the loop has not delivered yet)."""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, cast

import httpcore

FRESH_SECONDS = 1.0
# A streamed download stops reading from the socket while this much waits unread.
HIGH_WATER = 256 * 1024


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = None if local_address is None else (local_address, 0)
        with _mapped(TimeoutError, httpcore.ConnectTimeout, OSError, httpcore.ConnectError):
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Buffered, host, port, local_addr=local
                )
        return _opened(transport, protocol, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        with _mapped(TimeoutError, httpcore.ConnectTimeout, OSError, httpcore.ConnectError):
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_unix_connection(_Buffered, path)
        return _opened(transport, protocol, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _opened(
    transport: asyncio.BaseTransport, protocol: _Buffered, options: Iterable[Any] | None
) -> AsyncioStream:
    """`transport` is `protocol.transport` (told in `connection_made`)."""
    sock = transport.get_extra_info("socket")
    for option in options or ():
        sock.setsockopt(*option)
    return AsyncioStream(protocol)


class _Buffered(asyncio.Protocol):
    """What the socket delivered and not yet read, and who waits for it; and its transport
    (the TLS one after `start_tls`)."""

    transport: asyncio.Transport  # set in connection_made, before anyone reads it

    def __init__(self) -> None:
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.ended = False  # EOF or connection lost: nothing more will come
        self.error: BaseException | None = None
        self.paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        if self.size > HIGH_WATER and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def readable(self, seconds: float | None) -> None:
        """Until data, EOF or loss; TimeoutError after `seconds` (None: no limit)."""
        self._waiter = asyncio.get_running_loop().create_future()
        await _within(self._waiter, seconds)

    async def writable(self, seconds: float | None) -> None:
        if self._writable is not None:
            await _within(asyncio.shield(self._writable), seconds)


async def _within(future: asyncio.Future[None], seconds: float | None) -> None:
    if seconds is None:
        await future
        return
    timer = asyncio.get_running_loop().call_later(seconds, _expire, future)
    try:
        await future
    finally:
        timer.cancel()


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, protocol: _Buffered) -> None:
        self._protocol = protocol
        self._used_at = time.monotonic()

    @property
    def _transport(self) -> asyncio.Transport:
        return self._protocol.transport

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        protocol = self._protocol
        if not protocol.chunks and not protocol.ended:
            with _mapped(TimeoutError, httpcore.ReadTimeout):
                await protocol.readable(timeout)
        self._used_at = time.monotonic()
        if not protocol.chunks:
            if protocol.error is not None:
                raise httpcore.ReadError(str(protocol.error)) from protocol.error
            return b""
        chunk = protocol.chunks.popleft()
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            protocol.chunks.appendleft(rest)
        protocol.size -= len(chunk)
        if protocol.paused and protocol.size <= HIGH_WATER // 4:
            protocol.paused = False
            self._transport.resume_reading()
        return chunk

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        if self._transport.is_closing() or self._protocol.error is not None:
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        with _mapped(TimeoutError, httpcore.WriteTimeout):
            await self._protocol.writable(timeout)  # the transport's buffer is full

    async def aclose(self) -> None:
        self._transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            with _mapped(TimeoutError, httpcore.ConnectTimeout, OSError, httpcore.ConnectError):
                transport = await loop.start_tls(
                    self._transport,
                    self._protocol,
                    ssl_context,
                    server_hostname=server_hostname,
                    ssl_handshake_timeout=timeout,
                )
        except BaseException:
            self._transport.abort()
            raise
        # asyncio's and uvloop's start_tls do not call connection_made again
        self._protocol.transport = cast(asyncio.Transport, transport)
        return AsyncioStream(self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return self._is_readable()
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return self._transport.get_extra_info(info)  # "ssl_object", "socket"

    def _is_readable(self) -> bool:
        protocol = self._protocol
        if protocol.chunks or protocol.ended or self._transport.is_closing():
            return True
        if time.monotonic() - self._used_at < FRESH_SECONDS:
            return False
        return readable(self._transport.get_extra_info("socket"))


def readable(sock: socket.socket | None) -> bool:
    """True when a read would not block: data, or the peer closed (what httpcore checks of
    an idle connection). A closed or unknown socket counts as readable: drop it."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class _mapped:
    """Re-raises `(caught, raised)` pairs as httpcore's own exceptions."""

    def __init__(self, *pairs: type[BaseException]) -> None:
        self._pairs = list(zip(pairs[::2], pairs[1::2], strict=True))

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        for caught, raised in self._pairs:
            if kind is not None and issubclass(kind, caught):
                raise raised(str(exc)) from exc
