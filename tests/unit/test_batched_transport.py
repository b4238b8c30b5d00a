"""Issue 33: agent stdout read in batches. Malformed and oversize lines are refused as the
SDK's own transport refuses them, a request or a response is let through at once with
everything read before it, and a run of chunks reaches the connection merged."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from bridge.clock import LoopClock
from bridge.runtime.acp.transport import (
    BUSY_SESSIONS,
    MAX_WINDOW_SECONDS,
    BatchedTransport,
    CappedLines,
    window_for,
)

CAP = 256


def line(message: Any) -> bytes:
    return json.dumps(message).encode() + b"\n"


def chunk(text: str, session: str = "s") -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    params = {"sessionId": session, "update": update}
    return {"jsonrpc": "2.0", "method": "session/update", "params": params}


REQUEST = {"jsonrpc": "2.0", "id": 1, "method": "session/request_permission", "params": {}}


class _Writer:
    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass


def transport(
    reader: asyncio.StreamReader, window: float = 60.0, sizes: list[int] | None = None
) -> BatchedTransport:
    on_oversize = (sizes if sizes is not None else []).append
    lines = CappedLines(reader, label="t", cap=CAP, on_oversize=on_oversize)
    return BatchedTransport(lines, _Writer(), now=LoopClock().now, window=window)  # type: ignore[arg-type]


async def received(t: BatchedTransport) -> list[Any]:
    out: list[Any] = []
    while (message := await t.receive()) is not None:
        out.append(message)
    await t.close()
    return out


def fed(*data: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=CAP)
    for piece in data:
        reader.feed_data(piece)
    if eof:
        reader.feed_eof()
    return reader


async def test_a_run_of_chunks_is_received_as_one() -> None:
    # The first goes on at once (a sign of life is never held), the run behind it merged.
    t = transport(fed(line(chunk("a")), line(chunk("b")), line(chunk("c")), line(chunk("d"))))
    assert await received(t) == [chunk("a"), chunk("bcd")]
    assert (t.lines_read, t.messages_out) == (4, 2)


async def test_a_quiet_sessions_first_update_is_not_held_behind_another_sessions_run() -> None:
    reader = fed(line(chunk("a")), line(chunk("b")), line(chunk("x", "other")), eof=False)
    t = transport(reader, window=60.0)
    async with asyncio.timeout(5):
        assert [await t.receive(), await t.receive()] == [chunk("a"), chunk("x", "other")]
    reader.feed_eof()
    assert await received(t) == [chunk("b")]


async def test_a_line_that_is_not_json_is_logged_skipped_and_the_rest_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = b'{"jsonrpc": "2.0", "method": \n'
    reader = fed(line(chunk("a")), line(chunk("b")), bad, b"\n", line(chunk("c")))
    with caplog.at_level(logging.ERROR):
        assert await received(transport(reader)) == [chunk("a"), chunk("bc")]
    assert "Error parsing JSON-RPC message" in caplog.text


async def test_a_line_over_the_cap_is_dropped_and_counted() -> None:
    sizes: list[int] = []
    big = line(chunk("x" * (2 * CAP)))
    reader = fed(line(chunk("a")), line(chunk("b")), big, line(chunk("c")))
    assert await received(transport(reader, sizes=sizes)) == [chunk("a"), chunk("bc")]
    assert sizes == [len(big)]


async def test_a_shape_the_sdk_refuses_passes_through_unmerged_for_it_to_refuse() -> None:
    bad = chunk("b")
    bad["params"]["update"]["content"]["text"] = 5
    reader = fed(line(chunk("a")), line(bad), line(chunk("c")))
    # The SDK drops the bad one (and the text either side stays apart, as it came).
    assert await received(transport(reader)) == [chunk("a"), bad, chunk("c")]


async def test_json_that_is_not_an_object_is_handed_on_as_the_sdk_would() -> None:
    reader = fed(line(chunk("a")), b"[1, 2]\n", line(chunk("b")))
    assert await received(transport(reader)) == [chunk("a"), [1, 2], chunk("b")]


async def test_the_last_line_without_its_newline_is_read() -> None:
    reader = fed(line(chunk("a")), line(chunk("b")), json.dumps(chunk("c")).encode())
    assert await received(transport(reader)) == [chunk("a"), chunk("bc")]


async def test_a_request_is_let_through_at_once_with_what_came_before_it() -> None:
    reader = fed(*(line(chunk(c)) for c in "abc"), line(REQUEST), line(chunk("d")), eof=False)
    t = transport(reader, window=60.0)  # held chunks would wait a minute: a request does not
    async with asyncio.timeout(5):
        assert await t.receive() == chunk("a")
        assert await t.receive() == chunk("bc")
        assert await t.receive() == REQUEST
    reader.feed_eof()
    assert await received(t) == [chunk("d")]


async def test_held_chunks_go_on_when_the_window_ends() -> None:
    reader = fed(line(chunk("a")), line(chunk("b")), line(chunk("c")), eof=False)
    t = transport(reader, window=0.01)
    async with asyncio.timeout(5):
        assert [await t.receive(), await t.receive()] == [chunk("a"), chunk("bc")]
    reader.feed_data(line(chunk("d")))
    async with asyncio.timeout(5):
        assert await t.receive() == chunk("d")
    reader.feed_eof()
    assert await received(t) == []


async def test_a_zero_window_merges_nothing() -> None:
    reader = fed(line(chunk("a")), line(chunk("b")))
    assert await received(transport(reader, window=0)) == [chunk("a"), chunk("b")]


async def test_a_read_error_is_raised_after_what_was_read_before_it() -> None:
    reader = fed(line(chunk("a")), eof=False)
    t = transport(reader, window=0.01)
    assert await t.receive() == chunk("a")
    reader.feed_data(line(chunk("b")))
    await asyncio.sleep(0)  # read, held
    reader.set_exception(ConnectionResetError("gone"))
    assert await t.receive() == chunk("b")
    with pytest.raises(ConnectionResetError):
        await t.receive()
    await t.close()


async def test_sends_reach_the_writer() -> None:
    written: list[bytes] = []

    class Writer(_Writer):
        def write(self, data: bytes) -> None:
            written.append(data)

    lines = CappedLines(fed(), label="t", cap=CAP)
    t = BatchedTransport(lines, Writer(), now=LoopClock().now, window=0.1)  # type: ignore[arg-type]
    await t.send({"jsonrpc": "2.0", "id": 0, "method": "initialize"})
    await t.close()
    assert [json.loads(w) for w in written] == [{"jsonrpc": "2.0", "id": 0, "method": "initialize"}]


def test_the_window_grows_with_the_sessions_streaming_up_to_its_ceiling() -> None:
    assert window_for(1, 0.2) == window_for(BUSY_SESSIONS, 0.2) == 0.2
    assert window_for(2 * BUSY_SESSIONS, 0.2) == pytest.approx(0.4)
    assert window_for(100 * BUSY_SESSIONS, 0.2) == MAX_WINDOW_SECONDS
    assert window_for(100 * BUSY_SESSIONS, 0.0) == 0.0  # no merging stays no merging
    assert window_for(1, 2.0) == 2.0  # a longer window asked for is kept


async def test_many_sessions_streaming_hold_their_updates_longer_and_still_merge() -> None:
    sessions = [f"s{i}" for i in range(3 * BUSY_SESSIONS)]
    first = b"".join(line(chunk("a", s)) for s in sessions)
    reader = fed(first, eof=False)
    t = transport(reader, window=0.01)
    async with asyncio.timeout(5):
        assert [await t.receive() for _ in sessions] == [chunk("a", s) for s in sessions]
        reader.feed_data(b"".join(line(chunk(x, s)) for x in "bc" for s in sessions))
        assert [await t.receive() for _ in sessions] == [chunk("bc", s) for s in sessions]
    assert t.hold == pytest.approx(window_for(len(sessions), 0.01))
    assert t.hold > 0.01
    reader.feed_eof()
    assert await received(t) == []


def _prompt(request_id: int, session: str) -> dict[str, Any]:
    params = {"sessionId": session, "prompt": []}
    return {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": params}


async def test_the_answer_to_a_sessions_prompt_takes_only_that_sessions_held_updates() -> None:
    reader = fed(eof=False)
    t = transport(reader, window=60.0)  # held updates would wait a minute
    await t.send(_prompt(7, "a"))
    await t.send(_prompt(8, "b"))
    answer = {"jsonrpc": "2.0", "id": 7, "result": {"stopReason": "end_turn"}}
    stream = [chunk("1", "a"), chunk("x", "b"), chunk("2", "a"), chunk("y", "b"), chunk("3", "a")]
    reader.feed_data(b"".join(map(line, [*stream, answer])))
    async with asyncio.timeout(5):
        got = [await t.receive() for _ in range(4)]
    # The first of each goes at once; a's run behind it, then the answer. b's run stays
    # held behind the answer (before, every session's held updates went ahead of it).
    assert got == [chunk("1", "a"), chunk("x", "b"), chunk("23", "a"), answer]
    reader.feed_eof()
    assert await received(t) == [chunk("y", "b")]


async def test_a_response_to_no_sessions_request_lets_everything_held_go_first() -> None:
    reader = fed(eof=False)
    t = transport(reader, window=60.0)
    await t.send({"jsonrpc": "2.0", "id": 3, "method": "authenticate", "params": {}})
    answer = {"jsonrpc": "2.0", "id": 3, "result": {}}
    reader.feed_data(b"".join(map(line, [chunk("1", "a"), chunk("2", "a"), answer])))
    async with asyncio.timeout(5):
        assert [await t.receive() for _ in range(3)] == [chunk("1", "a"), chunk("2", "a"), answer]
    reader.feed_eof()
    assert await received(t) == []


def _new_session(request_id: int) -> dict[str, Any]:
    params = {"cwd": "/", "mcpServers": []}
    return {"jsonrpc": "2.0", "id": request_id, "method": "session/new", "params": params}


async def test_the_answer_to_a_session_new_takes_only_the_new_sessions_held_updates() -> None:
    # Turns starting one after another while others stream: each new session's answer
    # leaves the streaming sessions' runs held (before, it let them all go, cutting every
    # window short); an update of the new session read before its answer still goes first.
    reader = fed(eof=False)
    t = transport(reader, window=60.0)
    await t.send(_new_session(3))
    answer = {"jsonrpc": "2.0", "id": 3, "result": {"sessionId": "c"}}
    stream = [chunk("1", "a"), chunk("2", "a"), chunk("x", "c"), chunk("y", "c"), answer]
    reader.feed_data(b"".join(map(line, stream)))
    async with asyncio.timeout(5):
        got = [await t.receive() for _ in range(3)]
    assert got == [chunk("1", "a"), chunk("x", "c"), chunk("y", "c")]
    async with asyncio.timeout(5):
        assert await t.receive() == answer
    reader.feed_eof()
    assert await received(t) == [chunk("2", "a")]


async def test_a_refused_session_new_lets_everything_held_go_first() -> None:
    reader = fed(eof=False)
    t = transport(reader, window=60.0)
    await t.send(_new_session(4))
    refused = {"jsonrpc": "2.0", "id": 4, "error": {"code": -32603, "message": "no"}}
    reader.feed_data(b"".join(map(line, [chunk("1", "a"), chunk("2", "a"), refused])))
    async with asyncio.timeout(5):
        assert [await t.receive() for _ in range(3)] == [chunk("1", "a"), chunk("2", "a"), refused]
    reader.feed_eof()
    assert await received(t) == []


@pytest.mark.parametrize("window", [0.0, 60.0])
async def test_a_sessions_requests_are_forgotten_once_answered(window: float) -> None:
    reader = fed(eof=False)
    t = transport(reader, window=window)
    for request_id in range(50):
        await t.send(_prompt(request_id, "a"))
        answer = {"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}}
        reader.feed_data(line(answer))
        async with asyncio.timeout(5):
            assert await t.receive() == answer
    for request_id in range(50, 100):
        await t.send(_new_session(request_id))
        made = {"jsonrpc": "2.0", "id": request_id, "result": {"sessionId": f"s{request_id}"}}
        reader.feed_data(line(made))
        async with asyncio.timeout(5):
            assert await t.receive() == made
    assert t._asked == {}  # the bound is the point (session/new ids are kept there too)
    reader.feed_eof()
    assert await received(t) == []
