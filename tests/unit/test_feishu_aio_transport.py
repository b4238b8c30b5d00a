"""FeishuClient's httpx calls carried by aiohttp (`bridge.feishu.http`), on uvloop and
on plain asyncio, against real sockets on 127.0.0.1: plain and TLS calls, a large and a
streamed body, a multipart upload, and each failure as the httpx error that means it."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import trustme

from bridge.feishu import http
from bridge.feishu.http import FeishuHttp
from bridge.loops import loop_factory

BIG = 3 * http.CHUNK_BYTES + 17  # streamed in several pieces


def _answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold: asyncio.Event
) -> None:
    """Answers a call with its path (`/big`: BIG bytes; `/echo`: the request's body);
    `/hold` waits for `hold`, `/close` hangs up without answering, `/garbage` is not HTTP."""
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            path = head.split(b" ")[1]
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            sent = await reader.readexactly(length)
            if path == b"/hold":
                await hold.wait()
            if path == b"/close":
                return
            if path == b"/garbage":
                writer.write(b"this is not http\r\n\r\n")
                await writer.drain()
                return
            body = b"x" * BIG if path == b"/big" else sent if path == b"/echo" else path
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
def test_plain_and_tls_calls_a_large_and_a_streamed_body(
    loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # httpx's context trusts it
    connections: list[bool] = []

    async def scenario() -> None:
        hold = asyncio.Event()
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server_tls)
        for tls in (None, server_tls):

            async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                connections.append(w.get_extra_info("ssl_object") is not None)
                await _serve(r, w, hold)

            server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
            port = server.sockets[0].getsockname()[1]
            scheme = "https" if tls else "http"
            async with server, FeishuHttp(base_url=f"{scheme}://127.0.0.1:{port}") as client:
                for i in range(3):  # kept alive: three calls, one connection
                    assert (await client.get(f"/call-{i}")).text == f"/call-{i}"
                quoted = "/om_a%2Fb%20c/%E4%BD%A0"  # as the client quotes ids: sent as is
                assert (await client.get(quoted)).text == quoted
                big = await client.get("/big")
                assert big.content == b"x" * BIG
                async with client.stream("GET", "/big") as streamed:
                    chunks = [c async for c in streamed.aiter_raw()]
                assert b"".join(chunks) == b"x" * BIG
                assert len(chunks) > 1  # it arrived in pieces, not read whole first

    _run(loop, scenario)
    assert connections == [False, True]


@LOOPS
def test_a_multipart_upload_arrives_whole(loop: str, tmp_path: Path) -> None:
    """The upload's body is a stream (httpx's multipart over an open file), sent as it is
    read, with its length."""
    upload = tmp_path / "a.bin"
    upload.write_bytes(bytes(range(256)) * 1000)

    async def scenario() -> None:
        hold = asyncio.Event()
        server = await asyncio.start_server(lambda r, w: _serve(r, w, hold), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, FeishuHttp(base_url=f"http://127.0.0.1:{port}") as client:
            with upload.open("rb") as handle:
                echoed = await client.post(
                    "/echo", data={"file_type": "stream"}, files={"file": ("a.bin", handle)}
                )
        assert b'name="file_type"\r\n\r\nstream\r\n' in echoed.content
        assert bytes(range(256)) * 1000 in echoed.content

    _run(loop, scenario)


@LOOPS
def test_each_failure_is_the_httpx_error_that_means_it(loop: str) -> None:
    async def scenario() -> None:
        hold = asyncio.Event()
        server = await asyncio.start_server(lambda r, w: _serve(r, w, hold), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with socket.socket() as unused:  # a port nobody listens on
            unused.bind(("127.0.0.1", 0))
            refused = f"http://127.0.0.1:{unused.getsockname()[1]}/x"
        async with server, FeishuHttp(base_url=f"http://127.0.0.1:{port}") as client:
            with pytest.raises(httpx.ConnectError):  # never sent: safe to send again
                await client.get(refused)
            with pytest.raises(httpx.ReadTimeout):
                await client.get("/hold", timeout=0.05)
            with pytest.raises(httpx.RemoteProtocolError):  # hung up after the request
                await client.get("/close")
            with pytest.raises(httpx.RemoteProtocolError):  # answered, but not in HTTP
                await client.get("/garbage")
            with pytest.raises(httpx.UnsupportedProtocol):
                await client.get("ftp://127.0.0.1/x")
            hold.set()
            assert (await client.get("/after")).text == "/after"  # a fresh connection

    _run(loop, scenario)


@LOOPS
def test_verify_is_the_tls_trust_of_the_calls(loop: str) -> None:
    """`verify=` given to the client is what the aiohttp side trusts; without it, a server
    whose certificate no known CA signed is refused before anything is sent."""
    ca = trustme.CA()
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)

    async def scenario() -> None:
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server_tls)
        hold = asyncio.Event()
        server = await asyncio.start_server(
            lambda r, w: _serve(r, w, hold), "127.0.0.1", 0, ssl=server_tls
        )
        base = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server:
            async with FeishuHttp(base_url=base, verify=trusting) as client:
                assert (await client.get("/trusted")).text == "/trusted"
            async with FeishuHttp(base_url=base) as client:
                with pytest.raises(httpx.ConnectError):
                    await client.get("/unknown-ca")

    _run(loop, scenario)
