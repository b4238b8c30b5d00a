"""The emulator's hand-written long-connection frames are byte-for-byte what lark-oapi's
protobuf `pbbp2.Frame` writes, and it reads what lark-oapi writes."""

from __future__ import annotations

import pytest

from bridge.devtools.emulator.frames import CONTROL, DATA, Frame

from bridge.feishu import sdk_import  # noqa: F401  # isort: skip
from lark_oapi.ws.pb.pbbp2_pb2 import Frame as LarkFrame  # isort: skip

EVENT = Frame(
    seq_id=3,
    log_id=2**40,
    service=7,
    method=DATA,
    headers=[("type", "event"), ("message_id", "msg_1"), ("sum", "1"), ("seq", "0")],
    payload='{"schema":"2.0","text":"你好"}'.encode(),
)


def _lark(frame: Frame) -> LarkFrame:
    theirs = LarkFrame()
    theirs.SeqID, theirs.LogID = frame.seq_id, frame.log_id
    theirs.service, theirs.method = frame.service, frame.method
    for key, value in frame.headers:
        header = theirs.headers.add()
        header.key, header.value = key, value
    if frame.payload is not None:
        theirs.payload = frame.payload
    return theirs


@pytest.mark.parametrize(
    "frame",
    [
        EVENT,
        Frame(service=7, method=CONTROL, headers=[("type", "ping")]),  # zeros still written
        Frame(service=-1, method=DATA, payload=b""),
    ],
)
def test_frames_are_written_as_lark_writes_them(frame: Frame) -> None:
    assert frame.encode() == _lark(frame).SerializeToString()


def test_frames_lark_writes_are_read_back() -> None:
    theirs = _lark(EVENT)
    theirs.payload_type = "json"
    theirs.LogIDNew = "log-new"
    read = Frame.decode(theirs.SerializeToString())
    assert read == Frame(
        seq_id=3,
        log_id=2**40,
        service=7,
        method=DATA,
        headers=EVENT.headers,
        payload_type="json",
        payload=EVENT.payload,
        log_id_new="log-new",
    )
    assert read.header("message_id") == "msg_1"
    assert read.header("trace_id") is None
    assert Frame.decode(Frame(service=-1).encode()).service == -1


def test_a_truncated_frame_is_refused() -> None:
    with pytest.raises(ValueError, match="truncated"):
        Frame.decode(EVENT.encode()[:-3])
