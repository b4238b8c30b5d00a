"""`feishu-bridge run` under coverage.py, measured in a window the caller opens and closes with
signals: which of the bridge's lines ran in it, in every thread of the process.

    python bench/covered_bridge.py RESULT.json    (the environment of `feishu-bridge run`)

Coverage starts before anything of the bridge is imported, so every thread the bridge starts is
traced from its first line (on Python 3.11 a tracer only reaches the threads started after it).
Only files under this checkout's bridge/ are traced. SIGUSR1 opens the window: what ran so far
is filed under coverage's "before" context and what runs next under "window"; RESULT.json.open
appears once that is done. SIGUSR2 closes it: RESULT.json is written (atomically) with
{"files": {path: [line, ...]}} for every file with at least one line run inside the window.
The bridge itself runs on, until SIGTERM, as `feishu-bridge run` would. bench/hello_modules.py
drives it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType

import coverage

ROOT = Path(__file__).resolve().parents[1]
BEFORE, WINDOW, AFTER = "before", "window", "after"


def main() -> int:
    result = Path(sys.argv[1])
    cov = coverage.Coverage(
        data_file=None,  # in memory
        config_file=False,
        include=[f"{ROOT / 'bridge'}/*"],
        concurrency=["thread"],
    )
    cov.start()
    cov.switch_context(BEFORE)

    def open_window(signum: int, frame: FrameType | None) -> None:
        cov.switch_context(WINDOW)  # flushes what ran so far into BEFORE
        Path(f"{result}.open").touch()

    def close_window(signum: int, frame: FrameType | None) -> None:
        cov.switch_context(AFTER)  # flushes what ran in the window into WINDOW
        data = cov.get_data()
        data.set_query_contexts([f"^{WINDOW}$"])
        files = {f: sorted(data.lines(f) or ()) for f in data.measured_files()}
        temporary = result.with_suffix(".tmp")
        temporary.write_text(json.dumps({"files": {f: n for f, n in files.items() if n}}))
        os.replace(temporary, result)

    signal.signal(signal.SIGUSR1, open_window)
    signal.signal(signal.SIGUSR2, close_window)

    sys.path.insert(0, str(ROOT))
    import bridge
    from bridge.app import main as bridge_main

    if Path(bridge.__file__).resolve().parent != ROOT / "bridge":
        sys.exit(f"bridge imported from {bridge.__file__}, not from {ROOT}")
    return bridge_main(["run"])


if __name__ == "__main__":
    sys.exit(main())
