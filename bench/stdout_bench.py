"""CPU per line of reading an agent's stdout (issue 33): the bridge's transport alone
(`CappedLines` in bulk, `decoded`, the merge window), fed the lines of many sessions'
streaming chunks as fast as it takes them, on uvloop as in the bridge.

    python bench/stdout_bench.py [--lines 200000] [--sessions 200] [--window 0.5]

Prints the lines read, the messages handed on (runs merged) and the CPU per line. The
whole bridge's figure is bench/stream_bench.py's; this is the part of it that grows with
every line an agent writes, where the rest grows with merged updates and Feishu calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.clock import LoopClock
from bridge.runtime.acp.transport import READ_BYTES, BatchedTransport, CappedLines

WORDS = ("the", "parser", "reads", "each", "token", "and", "checks", "the", "cache")


class _Writer:
    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass


def stream(lines: int, sessions: int) -> bytes:
    """`lines` thought chunks of 1-6 words, the sessions taking turns."""
    rng = random.Random(1)
    out = []
    for i in range(lines):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
        update = {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": text}}
        params = {"sessionId": f"sess-{i % sessions:04d}", "update": update}
        out.append(json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}))
    return ("\n".join(out) + "\n").encode()


async def read_all(data: bytes, window: float) -> tuple[int, float]:
    reader = asyncio.StreamReader(limit=READ_BYTES)
    lines = CappedLines(reader, label="bench")
    transport = BatchedTransport(lines, _Writer(), now=LoopClock().now, window=window)  # type: ignore[arg-type]

    async def feed() -> None:
        for at in range(0, len(data), 64 * 1024):  # a pipe's worth at a time
            reader.feed_data(data[at : at + 64 * 1024])
            await asyncio.sleep(0)
        reader.feed_eof()

    start = time.process_time()
    feeding = asyncio.create_task(feed())
    messages = 0
    while await transport.receive() is not None:
        messages += 1
    cpu = time.process_time() - start
    await feeding
    await transport.close()
    return messages, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--window", type=float, default=0.5)
    args = parser.parse_args()
    data = stream(args.lines, args.sessions)
    import uvloop

    messages, cpu = uvloop.run(read_all(data, args.window))
    print(
        f"{args.lines} lines of {args.sessions} sessions -> {messages} messages: "
        f"{cpu / args.lines * 1e6:.2f} µs of CPU per line"
    )


if __name__ == "__main__":
    main()
