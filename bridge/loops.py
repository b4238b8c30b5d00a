"""The event loop `feishu-bridge run` runs on (`BRIDGE_EVENT_LOOP`).

uvloop by default: the bridge is many small hops (a store call, a Feishu call, an ACP frame
per step), and libuv's loop makes each wake-up and socket write cheaper. Python's own loop
stays fully supported (the test suite runs in-process on it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

EVENT_LOOP_HELP = (
    "The event loop the bridge runs on: uvloop (libuv; less CPU per message, see"
    " bench/relay_bench.py) or Python's own asyncio loop. Without uvloop installed (it is a"
    " dependency on Linux and macOS) the bridge says so in its log and runs on asyncio."
)

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: str) -> LoopFactory | None:
    """The factory for `asyncio.Runner`; None means asyncio's own loop."""
    if choice != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:
        log.warning("BRIDGE_EVENT_LOOP=uvloop but uvloop is not installed: running on asyncio")
        return None
    return uvloop.new_event_loop
