#!/usr/bin/env bash
# Makes the emulator's spoken clip again (bridge/devtools/emulator/clips/spoken.ogg): Debian's
# espeak-ng says SPOKEN_TRANSCRIPT, PyAV encodes it as Feishu keeps a voice message (Ogg Opus,
# 16 kHz mono). Only for changing the clip: the committed one is what tests and the demo use,
# so neither needs espeak-ng. Needs root (or sudo) the first time, to install espeak-ng.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v espeak-ng >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends espeak-ng >/dev/null
fi
wav=$(mktemp --suffix=.wav)
trap 'rm -f "$wav"' EXIT
text=$(.venv/bin/python -c 'from bridge.devtools.emulator.clips import SPOKEN_TRANSCRIPT as t; print(t)')
espeak-ng -v en-us -s 160 -w "$wav" "$text"
.venv/bin/python - "$wav" <<'PY'
import sys

import av

from bridge.devtools.emulator.clips import RATE, SPOKEN_CLIP, encode_opus

pcm = bytearray()
with av.open(sys.argv[1], mode="r") as container:
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    for frame in container.decode(audio=0):
        for piece in resampler.resample(frame):
            pcm += bytes(piece.planes[0])[: piece.samples * 2]
    for piece in resampler.resample(None):
        pcm += bytes(piece.planes[0])[: piece.samples * 2]
SPOKEN_CLIP.write_bytes(encode_opus(bytes(pcm)))
print(f"{SPOKEN_CLIP}: {len(pcm) / 2 / RATE:.2f} s, {SPOKEN_CLIP.stat().st_size} bytes")
PY
