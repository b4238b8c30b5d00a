"""Store throughput on this machine: the inbound hot path (claim_event + journal_message).

Run: python bench/store_bench.py [--n 5000]   (a temporary SQLite file; about 5 s)
Each "message" is one claim_event and one journal_message, awaited in sequence, as the
receiver does; a second pass runs 50 conversations concurrently (aiosqlite serialises them).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge.store import MemoryStore, SqliteStore, Store, TurnOutcome


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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000, help="messages per pass")
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory() as tmp:
        async with SqliteStore(Path(tmp) / "bench.sqlite3") as sqlite:
            seq = await _sequential(sqlite, n, "seq")
            conc = await _concurrent(sqlite, n, "conc")
            turns = await _turn_cycle(sqlite, n // 5)
            settings = await sqlite.settings()
    async with MemoryStore() as memory:
        mem = await _sequential(memory, n, "seq")
    print(f"SqliteStore ({settings['journal_mode']}, synchronous={settings['synchronous']}):")
    print(f"  claim_event + journal_message, sequential : {seq:8.0f} msg/s")
    print(f"  claim_event + journal_message, 50 tasks   : {conc:8.0f} msg/s")
    print(f"  start_turn + trace + finish_turn          : {turns:8.0f} turns/s")
    print(f"MemoryStore claim_event + journal_message   : {mem:8.0f} msg/s")


if __name__ == "__main__":
    asyncio.run(main())
