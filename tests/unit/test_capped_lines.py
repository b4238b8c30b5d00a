"""Agent stdout read in bulk: any split of the bytes into reads gives the same lines, a line
over the cap is skipped as it streams by and the next lines still come, and a line which
would decode to a lone surrogate is repaired before it is parsed (issue 35), even when the
escape is split between two reads."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.clock import LoopClock
from bridge.runtime.acp.transport import BatchedTransport, CappedLines, decoded
from bridge.utf8 import utf8_safe

CAP = 64


def reader_with(*chunks: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


async def all_lines(lines: CappedLines) -> list[bytes]:
    out: list[bytes] = []
    while batch := await lines.batch():
        out.extend(batch)
    return out


async def test_lines_under_the_cap_pass_whole_in_one_batch() -> None:
    sizes: list[int] = []
    lines = CappedLines(reader_with(b"one\ntwo\n"), label="t", cap=CAP, on_oversize=sizes.append)
    assert await lines.batch() == [b"one", b"two"]
    assert await lines.batch() == []
    assert sizes == []


@given(
    texts=st.lists(st.text(alphabet='ab{}"\u00e9', max_size=20), max_size=8),
    cuts=st.lists(st.integers(0, 200), max_size=6),
    last_newline=st.booleans(),
)
def test_any_split_of_the_stream_into_reads_gives_the_same_lines(
    texts: list[str], cuts: list[int], last_newline: bool
) -> None:
    data = "\n".join(texts).encode() + (b"\n" if last_newline and texts else b"")
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]

    async def read() -> list[bytes]:
        return await all_lines(CappedLines(reader_with(*pieces), label="t", cap=CAP))

    expected = [t.encode() for t in texts]
    if expected and expected[-1] == b"" and not last_newline:
        expected.pop()  # an empty last line without a newline is no line
    assert asyncio.run(read()) == expected


@pytest.mark.parametrize("size", [CAP + 1, 3 * CAP, 10 * CAP + 7])
async def test_a_line_over_the_cap_is_dropped_and_the_next_one_read(size: int) -> None:
    sizes: list[int] = []
    big = b"x" * size + b"\n"
    lines = CappedLines(reader_with(big, b"after\n"), label="t", cap=CAP, on_oversize=sizes.append)
    assert await all_lines(lines) == [b"after"]
    assert sizes == [size + 1]


async def test_a_line_arriving_in_pieces_is_dropped_without_waiting_for_it_whole() -> None:
    reader = asyncio.StreamReader()
    sizes: list[int] = []
    lines = CappedLines(reader, label="t", cap=CAP, on_oversize=sizes.append)
    read = asyncio.create_task(lines.batch())
    for _ in range(50):
        reader.feed_data(b"y" * CAP)
        await asyncio.sleep(0)
        # What is held stays bounded: the head of the line is discarded as it comes.
        assert len(reader._buffer) + lines._head_size <= 2 * CAP  # the bound is the point
    reader.feed_data(b"z\nnext\n")
    assert await read == [b"next"]
    assert sizes == [50 * CAP + 2]


async def test_end_of_stream_inside_an_oversize_line_is_end_of_stream() -> None:
    sizes: list[int] = []
    lines = CappedLines(reader_with(b"x" * (3 * CAP)), label="t", cap=CAP, on_oversize=sizes.append)
    assert await lines.batch() == []
    assert sizes == [3 * CAP]


class _Writer:
    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass


def transport_over(*data: bytes) -> BatchedTransport:
    lines = CappedLines(reader_with(*data), label="t", cap=1 << 20)
    return BatchedTransport(lines, _Writer(), now=LoopClock().now, window=0)  # type: ignore[arg-type]


async def test_agent_text_that_is_not_unicode_is_repaired_before_it_is_parsed() -> None:
    data = (
        b'{"method": "a", "params": {"text": "x\\ud800y", "\\udc00k": ["\\ud83d"]}}\n'
        b'{"method": "b", "params": "\xed\xa0\x80"}\n'  # a surrogate's bytes, UTF-8 style
        b'{"method": "c", "params": "\\ud83d\\ude00 \\\\ud800"}\n'  # a pair; an escaped backslash
        b'{"method": "d", "params": "last\\udfff"}'  # the last line, without its newline
    )
    transport = transport_over(data)
    assert await transport.receive() == {
        "method": "a",
        "params": {"text": "x\ufffdy", "\ufffdk": ["\ufffd"]},
    }
    assert await transport.receive() == {"method": "b", "params": "\ufffd"}
    assert await transport.receive() == {"method": "c", "params": "\U0001f600 \\ud800"}
    assert await transport.receive() == {"method": "d", "params": "last\ufffd"}
    assert await transport.receive() is None


@pytest.mark.parametrize("cut", range(1, 12))
async def test_a_surrogate_escape_split_between_reads_is_repaired(cut: int) -> None:
    first = b'{"method": "z"}\n{"method": "a", "params": "'
    data = first + b'x\\ud800y"}\n{"method": "b"}\n'
    transport = transport_over(data[: len(first) + cut], data[len(first) + cut :])
    assert await transport.receive() == {"method": "z"}
    assert await transport.receive() == {"method": "a", "params": "x\ufffdy"}
    assert await transport.receive() == {"method": "b"}


@pytest.mark.parametrize(
    "line",
    [
        b'{"a": NaN}',
        b"[1e400, -Infinity]",
        b'{"jsonrpc": "2.0", "id": 123456789012345678901234567890, "result": null}',
        b' {"a": 1}\r',
    ],
)
def test_lines_decode_as_json_loads_decodes_them(line: bytes) -> None:
    ours, theirs = decoded(line)[1], json.loads(line)
    assert json.dumps(ours) == json.dumps(theirs)
    if isinstance(theirs, dict) and isinstance(theirs.get("a"), float):
        assert math.isnan(ours["a"])


@pytest.mark.parametrize("line", [b"{", b'{"a": 1} x', b"\xff"])
def test_what_json_loads_refuses_is_refused(line: bytes) -> None:
    try:
        json.loads(line)
    except ValueError as exc:
        refused: type[ValueError] = type(exc)
    with pytest.raises(refused):
        decoded(line)


LONE = st.integers(0xD800, 0xDFFF).map(chr)
STRINGS = st.text(max_size=6) | st.tuples(st.text(max_size=3), LONE, st.text(max_size=3)).map(
    "".join
)
TREES = st.recursive(
    st.none() | st.integers() | STRINGS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(STRINGS, inner, max_size=3),
    max_leaves=15,
)


@given(tree=TREES, ascii_only=st.booleans())
def test_any_agent_frame_reaches_the_sdk_encodable_and_otherwise_unchanged(
    tree: object, ascii_only: bool
) -> None:
    frame = {"jsonrpc": "2.0", "method": "m", "params": tree}
    line = json.dumps(frame, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")

    async def receive() -> object:
        return await transport_over(line + b"\n").receive()

    received = asyncio.run(receive())
    text = json.dumps(received, ensure_ascii=False)
    text.encode("utf-8")  # no lone surrogate anywhere: the store and Feishu can take it
    assert received == json.loads(utf8_safe(json.dumps(frame, ensure_ascii=False)))


@given(text=st.text(), ascii_only=st.booleans(), message_id=st.none() | st.text(max_size=5))
def test_a_streaming_chunk_decodes_as_json_loads_decodes_it(
    text: str, ascii_only: bool, message_id: str | None
) -> None:
    update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk"}
    update["content"] = {"type": "text", "text": utf8_safe(text)}
    if message_id is not None:
        update["messageId"] = message_id
    frame = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s", "update": update},
    }
    line = json.dumps(frame, ensure_ascii=ascii_only).encode()
    key, message = decoded(line)
    assert key is not None
    assert message == json.loads(line)
