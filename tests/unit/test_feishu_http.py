"""The HTTP client under FeishuClient, against a real socket server on 127.0.0.1: calls beyond
its connections wait for one, and an idle connection the server closed is not used
again. Also the event loop choice of `feishu-bridge run`."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from bridge.feishu import http
from bridge.feishu.http import FeishuHttp
from bridge.loops import loop_factory

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


@dataclass
class Server:
    """Minimal HTTP/1.1 keep-alive server: counts connections and how many are busy at
    once (`one_busy`, `four_busy`: the first time one, four are); `hold` keeps answers back
    until set; `close_after_next` closes the connection after its next answer, as a server
    does at its keep-alive timeout."""

    port: int = 0
    connections: int = 0
    busy: int = 0
    most_busy: int = 0
    hold: asyncio.Event = field(default_factory=asyncio.Event)
    one_busy: asyncio.Event = field(default_factory=asyncio.Event)
    four_busy: asyncio.Event = field(default_factory=asyncio.Event)
    close_after_next: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                self.busy += 1
                self.most_busy = max(self.most_busy, self.busy)
                self.one_busy.set()
                if self.busy == 4:
                    self.four_busy.set()
                await self.hold.wait()
                self.busy -= 1
                writer.write(OK)
                await writer.drain()
                if self.close_after_next:
                    self.close_after_next = False
                    writer.close()
                    await writer.wait_closed()
                    self.closed.set()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()
    listener = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    state.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield state


async def test_calls_beyond_the_connections_wait_their_turn_and_all_succeed(
    server: Server,
) -> None:
    async with FeishuHttp(base_url=f"http://127.0.0.1:{server.port}", max_connections=4) as client:
        calls = [asyncio.create_task(client.get("/x")) for _ in range(40)]
        await server.four_busy.wait()  # four reached the server; the rest must be waiting
        for _ in range(20):
            await asyncio.sleep(0)
        assert server.busy == 4
        server.hold.set()
        answers = await asyncio.gather(*calls)
    assert [a.text for a in answers] == ["ok"] * 40
    assert server.most_busy == 4
    assert server.connections == 4  # kept alive and reused, none churned


async def test_issue_18_calls_at_once_share_the_kept_connections(server: Server) -> None:
    server.hold.set()
    async with FeishuHttp(base_url=f"http://127.0.0.1:{server.port}", max_connections=8) as client:
        for _ in range(3):
            answers = await asyncio.gather(*(client.get("/x") for _ in range(20)))
            assert [a.text for a in answers] == ["ok"] * 20
    assert server.connections == 8  # opened by the first round, reused by the next two


async def test_a_failed_or_cancelled_call_gives_its_connection_back(server: Server) -> None:
    async with FeishuHttp(base_url=f"http://127.0.0.1:{server.port}", max_connections=1) as client:
        with socket.socket() as unused:  # a port nobody listens on
            unused.bind(("127.0.0.1", 0))
            refused = f"http://127.0.0.1:{unused.getsockname()[1]}/x"
            for _ in range(3):
                with pytest.raises(httpx.ConnectError):
                    await client.get(refused)
        held = asyncio.create_task(client.get("/held"))
        await server.one_busy.wait()
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        server.hold.set()
        async with asyncio.timeout(5):  # a connection never given back would hang here
            assert (await client.get("/after")).text == "ok"


async def test_an_idle_connection_the_server_closed_is_not_used_again(server: Server) -> None:
    server.hold.set()
    async with FeishuHttp(base_url=f"http://127.0.0.1:{server.port}", max_connections=2) as client:
        server.close_after_next = True
        assert (await client.get("/first")).text == "ok"
        await server.closed.wait()
        assert (await client.get("/second")).text == "ok"  # on a new connection, no error
    assert server.connections == 2


def test_the_bridge_runs_on_uvloop_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import uvloop

    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("asyncio") is None
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed
    with caplog.at_level(logging.WARNING, logger="bridge.loops"):
        assert loop_factory("uvloop") is None
    assert "uvloop is not installed" in caplog.text


async def test_each_url_is_parsed_once_and_every_call_goes_where_it_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []
    parse = httpx._urls.urlparse

    def counted(url: str = "", **kwargs: object) -> object:
        parsed.append(url)
        return parse(url, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(httpx._urls, "urlparse", counted)
    monkeypatch.setattr(http, "PARSED_URLS", 3)
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200)

    base = "https://open.feishu.test"
    async with FeishuHttp(base_url=base, transport=httpx.MockTransport(answer)) as client:
        parsed.clear()  # the base URL's
        await client.post(f"{base}/a/reply")
        await client.post(f"{base}/a/reply")  # the same string: not parsed again
        assert parsed == [f"{base}/a/reply"]
        await client.post("/relative", params={"receive_id_type": "chat_id"})
        for n in range(5):  # past the cap: the least recent are let go, every call still goes right
            await client.patch(f"{base}/cards/{n}")
        await client.post(f"{base}/a/reply")
    assert seen == [
        f"{base}/a/reply",
        f"{base}/a/reply",
        f"{base}/relative?receive_id_type=chat_id",
        *(f"{base}/cards/{n}" for n in range(5)),
        f"{base}/a/reply",
    ]
    assert client._parsed.cache_info().currsize == 3
