"""Voice messages: what decoding costs, and how much later the prompt goes out.

    python bench/voice_bench.py [--n 20] [--minutes 1] [--repeat 5]   (about 30 s)

1. Decode: the committed spoken clip said over and over into an Ogg Opus file of `--minutes`
   (PyAV encodes it), decoded `--repeat` times by the bridge's decoder (bridge/feishu/opus.py:
   Ogg Opus → 16 kHz mono s16). Wall time and CPU (user + system of this process, every
   thread) per minute of audio.
2. Latency: the demo stack on loopback (emulator, bridge in webhook mode, scripted agent),
   one message at a time: `--n` texts, then `--n` voice messages of the same words (3.6 s
   clip). For each, from the push of the message to the agent's echo of its words (the
   emulator's clock). The difference of the medians is the latency a voice adds; the bridge's
   log line splits it into download, decode and recognition. Recognition is the emulator's
   (it decodes the clip itself to check the PCM), not Feishu's: a real tenant adds Feishu's
   own recognition time on top, which nothing here can measure.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.devtools.emulator.clips import (  # noqa: E402
    SPOKEN_TRANSCRIPT,
    repeated,
    spoken_clip,
)
from bridge.feishu.opus import decode_pcm16k  # noqa: E402
from tests.integration.stack import Stack, running_stack  # noqa: E402


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def decode_figures(minutes: float, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "long.ogg"
        path.write_bytes(repeated(spoken_clip(), minutes * 60))
        walls, cpus = [], []
        for _ in range(repeat):
            wall, cpu = time.perf_counter(), _cpu()
            pcm = decode_pcm16k(path, max_seconds=int(minutes * 60) + 1)
            walls.append(time.perf_counter() - wall)
            cpus.append(_cpu() - cpu)
        short = Path(folder) / "short.ogg"
        short.write_bytes(spoken_clip())
        wall = time.perf_counter()
        decode_pcm16k(short, max_seconds=60)
        first_short = time.perf_counter() - wall
    audio_min = len(pcm) / 32_000 / 60
    print(f"decode: {audio_min:.2f} min of Ogg Opus ({path.name}), {repeat} runs")
    print(
        f"  per minute of audio: wall median {statistics.median(walls) / audio_min * 1000:.0f} ms"
        f" (min {min(walls) / audio_min * 1000:.0f}), CPU median"
        f" {statistics.median(cpus) / audio_min * 1000:.0f} ms"
    )
    print(f"  the 3.6 s spoken clip: {first_short * 1000:.1f} ms")


class _Heard(logging.Handler):
    """The bridge's own split of a voice: fetched, decoded, heard (seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.splits: list[tuple[float, float, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("voice of turn %s: %.1f s"):
            args = record.args
            assert isinstance(args, tuple)
            self.splits.append((float(args[2]), float(args[3]), float(args[4])))


async def _one(stack: Stack, voice: bool) -> float:
    before = len(stack.texts())
    sent = await stack.emu.send_user_voice() if voice else await stack.say(SPOKEN_TRANSCRIPT)
    echo = f"echo: {SPOKEN_TRANSCRIPT}"
    await stack.emu.wait_for(lambda: echo in stack.texts()[before:], timeout=30)
    reply = next(m for m in stack.bot() if m.text == echo and m.parent_id == sent.message_id)
    await stack.settled()
    assert sent.first_attempt is not None
    return reply.create_time_ms / 1000 - sent.first_attempt.at


async def latency_figures(n: int) -> None:
    heard = _Heard()
    logging.getLogger("bridge.media.voice").addHandler(heard)
    logging.getLogger("bridge.media.voice").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as folder:
        async with running_stack(Path(folder) / "bridge") as stack:
            await stack.emu.wait_for(lambda: stack.emu.speech.recognitions)  # the probe
            await _one(stack, voice=False)  # the agent starts here, not in the figures
            texts = [await _one(stack, voice=False) for _ in range(n)]
            voices = [await _one(stack, voice=True) for _ in range(n)]
    text_ms, voice_ms = statistics.median(texts) * 1000, statistics.median(voices) * 1000
    print(f"latency: push → the agent's answer to those words, {n} each, one at a time")
    print(f"  text median {text_ms:.1f} ms (max {max(texts) * 1000:.1f})")
    print(f"  voice median {voice_ms:.1f} ms (max {max(voices) * 1000:.1f})")
    print(f"  added by a voice: {voice_ms - text_ms:.1f} ms (median of each)")
    if heard.splits:
        columns = zip(*heard.splits, strict=True)
        fetched, decoded, recognized = (statistics.median(c) * 1000 for c in columns)
        print(
            f"  of which (bridge log, medians): download {fetched:.1f} ms, decode {decoded:.1f} ms,"
            f" recognition {recognized:.1f} ms (the emulator's)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    decode_figures(args.minutes, args.repeat)
    asyncio.run(latency_figures(args.n))


if __name__ == "__main__":
    main()
