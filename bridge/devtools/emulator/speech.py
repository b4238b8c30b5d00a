"""Feishu's speech recognition as the emulator serves it (`speech_to_text/v1`): the request
and response shapes of `file_recognize` (up to 60 s) and `stream_recognize` (pieces under a
`stream_id`, `sequence_id` from 0, `action` 1 first, 0 after, 2 last, 3 abort), the gateway's
99991672 without the scope, 99992402 for a malformed request.

It checks what the bridge sends is real 16 kHz mono 16-bit PCM of a voice a user sent here:
the length must match the clip (within 20 ms) and its loudness, frame by frame, must follow
the clip's own decode. Such audio gets the transcript the test scripted for the clip; silence
gets nothing recognized; anything else is refused (and noted in `problems`)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.devtools.emulator import codes
from bridge.devtools.emulator.clips import BYTES_PER_SECOND, pcm_of

FILE_LIMIT_SECONDS = 60
NO_SCOPE = codes.FeishuError(
    400, 99991672, "Access denied. One of the following scopes is required: [speech_to_text:speech]"
)
_ID = re.compile(r"[A-Za-z0-9_]{16}")
_FRAME = 640  # bytes: 20 ms at 16 kHz, 16-bit
_SLACK = 640  # a clip decoded elsewhere may differ by a frame


@dataclass(frozen=True)
class Recognition:
    api: str  # file or stream
    seconds: float
    transcript: str
    pieces: int = 1


@dataclass
class _Clip:
    pcm: bytes
    envelope: list[float]
    transcript: str
    heard: bool = False


@dataclass
class _Stream:
    pcm: bytearray = field(default_factory=bytearray)
    next_sequence: int = 0


def _envelope(pcm: bytes) -> list[float]:
    samples = memoryview(pcm[: len(pcm) // 2 * 2]).cast("h")
    step = _FRAME // 2
    return [sum(map(abs, samples[i : i + step])) / step for i in range(0, len(samples), step)]


def _alike(a: list[float], b: list[float]) -> bool:
    n = min(len(a), len(b))
    if n < 2:
        return False
    a, b = a[:n], b[:n]
    ma, mb = sum(a) / n, sum(b) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    return va > 0 and vb > 0 and cov / (va * vb) ** 0.5 > 0.9


class SpeechRecognition:
    def __init__(self) -> None:
        self.scope_granted = True
        self.recognitions: list[Recognition] = []
        self.problems: list[str] = []  # audio that was not what a user sent
        self._clips: list[_Clip] = []
        self._streams: dict[str, _Stream] = {}

    def expect(self, clip: bytes, transcript: str) -> float:
        """A voice a user sends: its words, when its audio comes back to be heard. Returns
        its length in seconds."""
        pcm = pcm_of(clip)
        self._clips.append(_Clip(pcm, _envelope(pcm), transcript))
        return len(pcm) / BYTES_PER_SECOND

    def file_recognize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        pcm, config = self._request(body)
        self._check_id(config, "file_id")
        if len(pcm) > FILE_LIMIT_SECONDS * BYTES_PER_SECOND:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("speech longer than 60s")
        text = self._hear(pcm)
        self.recognitions.append(Recognition("file", len(pcm) / BYTES_PER_SECOND, text))
        return {"recognition_text": text}

    def stream_recognize(self, body: Mapping[str, Any]) -> dict[str, Any]:
        piece, config = self._request(body)
        stream_id = self._check_id(config, "stream_id")
        sequence, action = config.get("sequence_id"), config.get("action")
        if not isinstance(sequence, int) or action not in (0, 1, 2, 3):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("sequence_id or action")
        if action == 1:
            self._streams[stream_id] = _Stream()
        stream = self._streams.get(stream_id)
        if stream is None or sequence != stream.next_sequence or (sequence == 0) != (action == 1):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("stream out of order")
        stream.next_sequence += 1
        stream.pcm += piece
        answer = {"stream_id": stream_id, "sequence_id": sequence, "recognition_text": ""}
        if action == 3:
            del self._streams[stream_id]
        elif action == 2:
            del self._streams[stream_id]
            text = self._hear(bytes(stream.pcm))
            seconds = len(stream.pcm) / BYTES_PER_SECOND
            self.recognitions.append(Recognition("stream", seconds, text, sequence + 1))
            answer["recognition_text"] = text
        return answer

    def _request(self, body: Mapping[str, Any]) -> tuple[bytes, Mapping[str, Any]]:
        if not self.scope_granted:
            raise NO_SCOPE
        speech, config = body.get("speech"), body.get("config")
        if not isinstance(speech, Mapping) or not isinstance(config, Mapping):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("speech and config are required")
        if config.get("format") != "pcm" or config.get("engine_type") != "16k_auto":
            raise codes.FIELD_VALIDATION_FAILED.with_detail("format pcm, engine_type 16k_auto")
        try:
            pcm = base64.b64decode(str(speech.get("speech") or ""), validate=True)
        except binascii.Error:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("speech is not base64") from None
        if len(pcm) % 2:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("pcm of 16-bit samples")
        return pcm, config

    @staticmethod
    def _check_id(config: Mapping[str, Any], name: str) -> str:
        value = config.get(name)
        if not isinstance(value, str) or not _ID.fullmatch(value):
            raise codes.FIELD_VALIDATION_FAILED.with_detail(f"{name} of 16 letters and digits")
        return value

    def _hear(self, pcm: bytes) -> str:
        if not any(pcm):
            return ""  # silence: nothing recognized
        envelope = _envelope(pcm)
        alike = [
            clip
            for clip in self._clips
            if abs(len(clip.pcm) - len(pcm)) <= _SLACK and _alike(clip.envelope, envelope)
        ]
        if alike:
            # The same clip sent twice with other words: the first not heard yet, in the
            # order sent (a retry of the last one hears it again).
            clip = next((c for c in alike if not c.heard), alike[-1])
            clip.heard = True
            return clip.transcript
        seconds = len(pcm) / BYTES_PER_SECOND
        self.problems.append(f"{seconds:.2f} s of audio that no voice sent here decodes to")
        raise codes.FIELD_VALIDATION_FAILED.with_detail("not 16 kHz PCM of a voice sent here")
