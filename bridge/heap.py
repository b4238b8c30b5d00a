"""The garbage collector's settings for `feishu-bridge run`, applied once the bridge's modules
are imported (before anything is served).

Python's defaults suit short scripts. A bridge holds a large, long-lived heap (its imported
modules: ~65,000 tracked objects) and makes many short-lived containers per message, so
with the defaults a collection ran every few messages and a full one, walking the whole heap
(~30 ms of CPU, the event loop stopped meanwhile), every few hundred: about 6% of the CPU
per message and the longest ack delays in bench/relay_bench.py.

- `gc.freeze()`: what exists after the imports lives as long as the process; collections
  no longer walk it.
- A young generation of `YOUNG` allocations instead of 700: reference counting frees almost
  everything a message makes, so a young collection finds little either way, and costs by
  what survives, not by how seldom it runs. Cyclic garbage waits at most that many
  allocations (a few MB).
"""

from __future__ import annotations

import gc

YOUNG = 20_000  # allocations between young collections (Python's default: 700)
MIDDLE = 20  # young collections between middle ones (default 10)
OLD = 20  # middle collections between full ones (default 10)


def settle() -> None:
    """Collect what the start-up left, freeze the rest, and space collections out."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG, MIDDLE, OLD)
