"""A voice message's audio (Feishu stores it as Ogg Opus) decoded to what Feishu's speech
recognition takes: 16 kHz mono signed 16-bit little-endian PCM.

PyAV (FFmpeg's libraries, inside its wheel) decodes and resamples, so nothing outside the
Python environment is needed. CPU-bound: the caller runs it in a worker thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

RATE: Final = 16_000
BYTES_PER_SECOND: Final = RATE * 2  # 16-bit mono


class Undecodable(Exception):
    """Not audio PyAV can read (a broken or foreign file); `reason` is safe to log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TooLong(Exception):
    """The audio runs past `limit_seconds`; decoding stopped there."""

    def __init__(self, limit_seconds: int) -> None:
        super().__init__(limit_seconds)
        self.limit_seconds = limit_seconds


def decode_pcm16k(path: Path, *, max_seconds: int) -> bytes:
    """The whole audio of `path` as 16 kHz mono PCM; `TooLong` past `max_seconds` (checked
    as it decodes, so an hour-long file costs no more than the limit), `Undecodable` when
    it is not audio."""
    import av  # FFmpeg's libraries load on the first voice message, not at start-up

    limit = max_seconds * BYTES_PER_SECOND
    out = bytearray()
    try:
        # Only Ogg and Opus, what Feishu keeps a voice as: no other of FFmpeg's demuxers or
        # decoders ever sees these bytes from the chat.
        with av.open(str(path), mode="r", format="ogg") as container:
            audio = container.streams.audio
            if not audio or audio[0].codec_context.name != "opus":
                raise Undecodable("not Opus audio")
            resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
            for frame in container.decode(audio=0):
                for piece in resampler.resample(frame):
                    out += bytes(piece.planes[0])[: piece.samples * 2]
                if len(out) > limit:
                    raise TooLong(max_seconds)
            for piece in resampler.resample(None):
                out += bytes(piece.planes[0])[: piece.samples * 2]
    except av.FFmpegError as exc:
        raise Undecodable(type(exc).__name__) from None
    if len(out) > limit:
        raise TooLong(max_seconds)
    if not out:
        raise Undecodable("no samples")
    return bytes(out)
