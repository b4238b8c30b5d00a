"""Memory of idle conversations: the real engine, Feishu client, SQLite store and operator
projection of the bridge in one process, with an in-process agent and a Feishu (at the HTTP
transport, tests/fakes/feishu.py) that keep nothing. N chats each
send one message and get one answer; once every conversation is idle again the resident
memory grown is divided by N and extrapolated to 100,000 conversations.

    python bench/idle_bench.py [--n 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bridge.clock import LoopClock, new_id
from bridge.core import Options, Timings
from bridge.engine.engine import Engine, EngineConfig
from bridge.feishu.events import InboundMessage
from bridge.i18n import Translator
from bridge.ops.projection import Projection
from bridge.runtime.events import MessageChunk, PromptSent, SessionFacts, StopReason, TurnEnded
from bridge.runtime.port import EventSink, PromptFile, SessionHandle
from bridge.store.sqlite import SqliteStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.feishu import FakeFeishu

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


class EchoAgent:
    """The AgentRuntime port: every prompt answered at once with one chunk."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    async def open_session(self, key: str, **kwargs: Any) -> SessionHandle:
        return SessionHandle(f"sess_{next(self._ids)}", loaded=False)

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        sink(PromptSent(session_id))
        sink(MessageChunk(session_id, "done"))
        sink(TurnEnded(session_id, stop_reason=StopReason.END_TURN))

    async def facts(self, session_id: str) -> SessionFacts:
        return SessionFacts("agent", "/work")

    async def commands(self, session_id: str) -> tuple[str, ...]:
        return ()

    def snapshot(self) -> dict[str, Any]:
        return {}

    def __getattr__(self, name: str) -> Any:
        async def anything(*args: Any, **kwargs: Any) -> None:
            return None

        return anything


async def run(n: int, folder: Path) -> None:
    store = SqliteStore(folder / "bridge.sqlite3")
    await store.open()
    projection = Projection(new_id(), time.time)
    quiet = Timings(first_hint=600, heartbeat=600, stale=3600, approval_timeout=3600)
    clock = LoopClock()
    feishu = FakeFeishu(remember=False).client(clock=clock.now)
    engine = Engine(
        feishu=feishu,
        runtime=EchoAgent(),  # type: ignore[arg-type]
        store=store,
        translator=Translator("zh_CN"),
        config=EngineConfig(
            timings=quiet, options=Options(), ack_emoji="OnIt", max_running_turns=64
        ),
        clock=clock,
        publish=projection.publish,
    )
    gc.collect()
    before = rss_mib()
    start = time.perf_counter()
    batch = 500
    for first in range(0, n, batch):
        for i in range(first, min(n, first + batch)):
            chat = f"oc_{i:06d}"
            message = InboundMessage(
                event_id=f"ev_{i}",
                message_id=f"om_{i}",
                chat_id=chat,
                chat_type="p2p",
                sender_open_id=f"ou_{i}",
                message_type="text",
                text="hello",
            )
            await store.journal_message(
                chat, message.message_id, message.sender_open_id, chat, "hello", time.time()
            )
            engine.accept(message)
        await engine.wait_idle()
        await asyncio.sleep(0)
    await engine.wait_idle()
    elapsed = time.perf_counter() - start
    gc.collect()
    after = rss_mib()
    idle = sum(1 for a in engine.conversations.values() if a.conv.turn is None)
    per = (after - before) * 2**20 / n
    print(f"conversations {n}, idle {idle}, in {elapsed:.1f} s")
    print(f"resident memory {before:.0f} MiB -> {after:.0f} MiB: {per / 1024:.2f} KiB each")
    print(f"100,000 idle conversations: about {per * 100_000 / 2**20:.0f} MiB (extrapolated)")
    await engine.drain(1.0)
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(n, Path(folder)))


if __name__ == "__main__":
    main()
