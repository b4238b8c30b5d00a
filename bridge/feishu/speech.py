"""Feishu's speech recognition (`speech_to_text/v1`): the calls that recognize a recording,
which `FeishuClient.recognize_speech` makes, and what their answers say.

What the Open Platform documents: `file_recognize` takes a whole recording "within 60
seconds" (16 kHz mono 16-bit PCM, base64, `format` "pcm", `engine_type` "16k_auto", a
16-character `file_id` the caller makes up); longer audio goes to `stream_recognize` in
pieces of 100–200 ms under one 16-character `stream_id`, `sequence_id` from 0, `action` 1
on the first piece, 0 after, 2 on the last ("end normally, wait for the result"). Both
answer `data.recognition_text`. Both need the app scope `speech_to_text:speech`; without it
Feishu answers 99991672 ("Access denied. One of the following scopes is required").
"""

from __future__ import annotations

import base64
import secrets
import string
from collections.abc import Iterator
from typing import Any, Final

from bridge.feishu.errors import BusinessError, FeishuError

FILE_RECOGNIZE: Final = "/open-apis/speech_to_text/v1/speech/file_recognize"
STREAM_RECOGNIZE: Final = "/open-apis/speech_to_text/v1/speech/stream_recognize"
SCOPE: Final = "speech_to_text:speech"
SCOPE_MISSING: Final = 99991672  # the gateway's "Access denied. One of the following scopes…"
FILE_LIMIT_SECONDS: Final = 60
BYTES_PER_SECOND: Final = 16_000 * 2
PIECE_BYTES: Final = BYTES_PER_SECOND // 5  # 200 ms, the top of the documented 100–200 ms
FIRST, MIDDLE, LAST = 1, 0, 2  # `action` of a stream piece
_ID_CHARS: Final = string.ascii_letters + string.digits


def new_id() -> str:
    """A `file_id` / `stream_id`: 16 letters and digits, as the API asks."""
    return "".join(secrets.choice(_ID_CHARS) for _ in range(16))


def scope_missing(exc: FeishuError) -> bool:
    return isinstance(exc, BusinessError) and exc.code == SCOPE_MISSING


def _config(**fields: Any) -> dict[str, Any]:
    return {**fields, "format": "pcm", "engine_type": "16k_auto"}


def recognized(answer: dict[str, Any]) -> str:
    """The words an answer of either API says it heard ("" for none)."""
    text = (answer.get("data") or {}).get("recognition_text")
    return text.strip() if isinstance(text, str) else ""


def calls(pcm: bytes) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(op, path, body) of each call that recognizes `pcm` (16 kHz mono s16le), in order:
    up to the file API's limit one call, longer 200 ms pieces of one stream (each body made
    as it is sent). The last answer's text is the whole."""
    if len(pcm) <= FILE_LIMIT_SECONDS * BYTES_PER_SECOND:
        body = {
            "speech": {"speech": base64.b64encode(pcm).decode("ascii")},
            "config": _config(file_id=new_id()),
        }
        yield "file_recognize", FILE_RECOGNIZE, body
        return
    stream_id = new_id()
    pieces = [pcm[i : i + PIECE_BYTES] for i in range(0, len(pcm), PIECE_BYTES)]
    for sequence, piece in enumerate(pieces):
        action = LAST if sequence == len(pieces) - 1 else FIRST if sequence == 0 else MIDDLE
        body = {
            "speech": {"speech": base64.b64encode(piece).decode("ascii")},
            "config": _config(stream_id=stream_id, sequence_id=sequence, action=action),
        }
        yield "stream_recognize", STREAM_RECOGNIZE, body
