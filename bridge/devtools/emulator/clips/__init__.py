"""Voice clips for the emulator, made without a microphone: `spoken.ogg` is espeak-ng
saying `SPOKEN_TRANSCRIPT`, encoded as Feishu stores voice messages (Ogg Opus, 16 kHz mono).
`scripts/make-voice-clip.sh` makes it again; PyAV encodes longer clips at run time."""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path
from typing import Final

SPOKEN_CLIP: Final = Path(__file__).with_name("spoken.ogg")
SPOKEN_TRANSCRIPT: Final = "Please fix the login page error, then run the tests."
RATE: Final = 16_000
BYTES_PER_SECOND: Final = RATE * 2  # 16-bit mono


def spoken_clip() -> bytes:
    return SPOKEN_CLIP.read_bytes()


def pcm_of(clip: bytes) -> bytes:
    """The clip as 16 kHz mono signed 16-bit PCM: what the bridge must send to recognition
    (the emulator's own decode, to check the bridge's against)."""
    import av  # FFmpeg's libraries load with the first voice, not with the emulator

    out = bytearray()
    with av.open(io.BytesIO(clip), mode="r") as container:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        for frame in container.decode(audio=0):
            for piece in resampler.resample(frame):
                out += bytes(piece.planes[0])[: piece.samples * 2]
        for piece in resampler.resample(None):
            out += bytes(piece.planes[0])[: piece.samples * 2]
    return bytes(out)


def encode_opus(pcm: bytes, rate: int = RATE) -> bytes:
    """Mono 16-bit PCM at `rate` as an Ogg Opus file at 16 kHz, as a Feishu client sends one."""
    import av

    buffer = io.BytesIO()
    with av.open(buffer, "w", format="ogg") as container:
        stream = container.add_stream("libopus", rate=RATE, layout="mono")
        stream.bit_rate = 24_000
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        frame = av.AudioFrame(format="s16", layout="mono", samples=len(pcm) // 2)
        frame.planes[0].update(pcm[: len(pcm) // 2 * 2])
        frame.sample_rate = rate
        frame.time_base = Fraction(1, rate)
        frame.pts = 0
        for piece in resampler.resample(frame):
            for packet in stream.encode(piece):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


def repeated(clip: bytes, seconds: float) -> bytes:
    """A clip at least `seconds` long: the spoken clip said again and again (a long voice
    message, for the limits and for recognition in pieces)."""
    pcm = pcm_of(clip)
    want = int(seconds * BYTES_PER_SECOND)
    times = -(-want // len(pcm))
    return encode_opus((pcm * times)[:want])


def duration_ms(clip: bytes) -> int:
    return len(pcm_of(clip)) * 1000 // BYTES_PER_SECOND
