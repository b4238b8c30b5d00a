"""Store throughput on this machine: the inbound hot path (claim_event + journal_message).

Run: python bench/store_bench.py [--n 5000]   (a temporary SQLite file; about 10 s)
Each "message" is one claim_event and one journal_message, awaited in sequence, as the
receiver does; a second pass runs 50 conversations concurrently (aiosqlite serialises them).

Then the store's CPU per simple turn (a message, its answer), this process's user + system
time: the calls the engine makes today (journal, begin_turn, mark_sent, end_turn; the
timeline written behind, many turns a statement) beside the eight round trips it made before
(journal, start_turn, running, sent?, mark_sent, finish_turn, done, the turn's timeline).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge.store import MemoryStore, MessageState, SqliteStore, Store, TurnOutcome


async def _sequential(store: Store, n: int, tag: str) -> float:
    start = time.perf_counter()
    for i in range(n):
        mid = f"om_{tag}_{i}"
        assert await store.claim_event(f"ev_{tag}_{i}", mid, float(i))
        assert await store.journal_message(f"conv{i % 50}", mid, "ou_x", "oc_x", "hello", float(i))
    return n / (time.perf_counter() - start)


async def _concurrent(store: Store, n: int, tag: str, workers: int = 50) -> float:
    async def worker(w: int) -> None:
        for i in range(w, n, workers):
            mid = f"om_{tag}_{i}"
            assert await store.claim_event(f"ev_{tag}_{i}", mid, float(i))
            assert await store.journal_message(f"conv{w}", mid, "ou_x", "oc_x", "hello", float(i))

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(workers)))
    return n / (time.perf_counter() - start)


async def _turn_cycle(store: Store, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        tid = f"t{i}"
        await store.start_turn(tid, "conv", f"om_seq_{i}", float(i))
        await store.trace(tid, "prompt_sent", "", float(i))
        await store.finish_turn(tid, TurnOutcome.COMPLETED, float(i))
    return n / (time.perf_counter() - start)


async def _simple_turns(store: Store, n: int, tag: str) -> float:
    """CPU ms per simple turn, the store calls of today's engine."""
    cpu = time.process_time()
    timeline = []
    for i in range(n):
        mid, key, at = f"om_{tag}_{i}", f"oc_{i % 20}", float(i)
        await store.journal_message(key, mid, "ou_x", key, "hello", at)
        await store.begin_turn(mid, key, mid, at)
        await store.mark_sent(f"{mid}:reply:1", [f"om_r_{tag}_{i}"], at)
        await store.end_turn(mid, mid, TurnOutcome.COMPLETED, at)
        timeline += [(mid, kind, "", at) for kind in ("start", "prompt", "reply", "terminal")]
        if len(timeline) >= 256:  # the trace buffer's FLUSH_AT
            await store.trace_many(timeline)
            timeline = []
    await store.trace_many(timeline)
    return (time.process_time() - cpu) * 1000 / n


async def _simple_turns_before(store: Store, n: int, tag: str) -> float:
    """CPU ms per simple turn, the store calls the engine made before issue 18."""
    cpu = time.process_time()
    for i in range(n):
        mid, key, at = f"om_{tag}_{i}", f"oc_{i % 20}", float(i)
        await store.journal_message(key, mid, "ou_x", key, "hello", at)
        await store.start_turn(mid, key, mid, at)
        await store.set_message_state(mid, MessageState.RUNNING, at)
        await store.sent(f"{mid}:reply:1")
        await store.mark_sent(f"{mid}:reply:1", [f"om_r_{tag}_{i}"], at)
        await store.finish_turn(mid, TurnOutcome.COMPLETED, at)
        await store.set_message_state(mid, MessageState.DONE, at)
        kinds = ("start", "prompt", "reply", "terminal")
        await store.trace_many([(mid, kind, "", at) for kind in kinds])
    return (time.process_time() - cpu) * 1000 / n


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000, help="messages per pass")
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory() as tmp:
        async with SqliteStore(Path(tmp) / "bench.sqlite3") as sqlite:
            seq = await _sequential(sqlite, n, "seq")
            conc = await _concurrent(sqlite, n, "conc")
            turns = await _turn_cycle(sqlite, n // 5)
            before = await _simple_turns_before(sqlite, n // 5, "before")
            now = await _simple_turns(sqlite, n // 5, "now")
            settings = await sqlite.settings()
    async with MemoryStore() as memory:
        mem = await _sequential(memory, n, "seq")
    print(f"SqliteStore ({settings['journal_mode']}, synchronous={settings['synchronous']}):")
    print(f"  claim_event + journal_message, sequential : {seq:8.0f} msg/s")
    print(f"  claim_event + journal_message, 50 tasks   : {conc:8.0f} msg/s")
    print(f"  start_turn + trace + finish_turn          : {turns:8.0f} turns/s")
    print(f"  CPU per simple turn, 8 round trips (before): {before:7.2f} ms")
    print(f"  CPU per simple turn, 4 + timeline behind   : {now:7.2f} ms")
    print(f"MemoryStore claim_event + journal_message   : {mem:8.0f} msg/s")


if __name__ == "__main__":
    from bridge.loops import loop_factory

    with asyncio.Runner(loop_factory=loop_factory("uvloop")) as runner:  # as the bridge runs
        runner.run(main())
