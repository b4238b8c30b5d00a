"""Agent stdout: a line over the cap is skipped as it streams by, the next lines still come,
and the SDK's own transport reads through it unchanged, except that a line which would
decode to a lone surrogate is repaired (issue 35)."""

from __future__ import annotations

import asyncio
import json

import pytest
from acp._transport import NdjsonTransport
from hypothesis import given
from hypothesis import strategies as st

from bridge.runtime.acp.lines import CappedLines
from bridge.utf8 import utf8_safe

CAP = 64


def reader_with(*chunks: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=CAP)
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


async def test_lines_under_the_cap_pass_whole() -> None:
    sizes: list[int] = []
    lines = CappedLines(reader_with(b"one\n", b"two\n"), label="t", on_oversize=sizes.append)
    assert await lines.readuntil() == b"one\n"
    assert await lines.readuntil() == b"two\n"
    assert sizes == []


@pytest.mark.parametrize("size", [CAP + 1, 3 * CAP, 10 * CAP + 7])
async def test_a_line_over_the_cap_is_dropped_and_the_next_one_read(size: int) -> None:
    sizes: list[int] = []
    big = b"x" * size + b"\n"
    lines = CappedLines(reader_with(big, b"after\n"), label="t", on_oversize=sizes.append)
    assert await lines.readuntil() == b"after\n"
    assert sizes == [size + 1]


async def test_a_line_arriving_in_pieces_is_dropped_without_waiting_for_it_whole() -> None:
    reader = asyncio.StreamReader(limit=CAP)
    sizes: list[int] = []
    lines = CappedLines(reader, label="t", on_oversize=sizes.append)
    read = asyncio.create_task(lines.readuntil())
    for _ in range(50):
        reader.feed_data(b"y" * CAP)
        await asyncio.sleep(0)
        # What the reader holds stays bounded: the head of the line is discarded as it comes.
        assert len(reader._buffer) <= 2 * CAP  # the bound is the point
    reader.feed_data(b"z\nnext\n")
    assert await read == b"next\n"
    assert sizes == [50 * CAP + 2]


async def test_end_of_stream_inside_an_oversize_line_is_end_of_stream() -> None:
    lines = CappedLines(reader_with(b"x" * (3 * CAP)), label="t")
    with pytest.raises(asyncio.IncompleteReadError):
        await lines.readuntil()


async def test_the_sdk_transport_reads_frames_through_it() -> None:
    first, last = {"jsonrpc": "2.0", "method": "a"}, {"jsonrpc": "2.0", "method": "b"}
    huge = {"jsonrpc": "2.0", "method": "huge", "params": "x" * (5 * CAP)}
    data = "".join(json.dumps(frame) + "\n" for frame in (first, huge, last)).encode()
    transport = NdjsonTransport(CappedLines(reader_with(data), label="t"), sender=None)  # type: ignore[arg-type]
    assert await transport.receive() == first
    assert await transport.receive() == last
    assert await transport.receive() is None


def transport_over(data: bytes) -> NdjsonTransport:
    reader = asyncio.StreamReader(limit=1 << 20)
    reader.feed_data(data)
    reader.feed_eof()
    return NdjsonTransport(CappedLines(reader, label="t"), sender=None)  # type: ignore[arg-type]


async def test_agent_text_that_is_not_unicode_is_repaired_before_the_sdk_parses_it() -> None:
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
