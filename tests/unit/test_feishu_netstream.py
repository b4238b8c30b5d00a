"""The network streams under FeishuClient's httpx (`bridge.feishu.netstream`), on uvloop and
on plain asyncio, against real sockets on 127.0.0.1: plain and TLS calls, a body larger
than the read-ahead limit, a read timeout, and a server that goes away."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trustme

from bridge.feishu import netstream
from bridge.feishu.http import FeishuHttp
from bridge.loops import loop_factory

BIG = 3 * netstream.HIGH_WATER + 17  # read-ahead pauses and resumes several times


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold: asyncio.Event
) -> None:
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            path = head.split(b" ")[1]
            if path == b"/hold":
                await hold.wait()
            if path == b"/close":
                return
            body = b"x" * BIG if path == b"/big" else path
            writer.write(_answer(body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _run(loop: str, scenario: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        runner.run(scenario())


LOOPS = pytest.mark.parametrize("loop", ["uvloop", "asyncio"])


@LOOPS
def test_plain_and_tls_calls_and_a_large_body(
    loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # httpx's context trusts it

    async def scenario() -> None:
        hold = asyncio.Event()
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server_tls)
        for tls in (None, server_tls):
            server = await asyncio.start_server(
                lambda r, w: _serve(r, w, hold), "127.0.0.1", 0, ssl=tls
            )
            port = server.sockets[0].getsockname()[1]
            scheme = "https" if tls else "http"
            async with server, FeishuHttp(base_url=f"{scheme}://127.0.0.1:{port}") as client:
                for i in range(3):  # kept alive: three calls, one connection
                    assert (await client.get(f"/call-{i}")).text == f"/call-{i}"
                big = await client.get("/big")
                assert big.content == b"x" * BIG
                stream = big.extensions["network_stream"]
                assert isinstance(stream, netstream.AsyncioStream)  # not anyio's
                assert (stream.get_extra_info("ssl_object") is not None) == (tls is not None)
                async with client.stream("GET", "/big") as streamed:
                    chunks = [c async for c in streamed.aiter_raw()]
                assert b"".join(chunks) == b"x" * BIG

    _run(loop, scenario)


@LOOPS
def test_a_stalled_answer_is_a_read_timeout_and_a_vanished_server_a_clear_error(
    loop: str,
) -> None:
    async def scenario() -> None:
        hold = asyncio.Event()
        server = await asyncio.start_server(lambda r, w: _serve(r, w, hold), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, FeishuHttp(base_url=f"http://127.0.0.1:{port}") as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get("/hold", timeout=0.05)
            with pytest.raises(httpx.RemoteProtocolError):  # closed without an answer
                await client.get("/close")
            hold.set()
            assert (await client.get("/after")).text == "/after"  # a fresh connection

    _run(loop, scenario)
