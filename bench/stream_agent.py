"""A lean fake ACP agent for `stream_cpu.py`: it answers `initialize`, `session/new` and
`session/prompt`, and streams each prompt's turn the way a coding agent does: text chunks
of 5-40 characters at 30-80 a second, and every `tool_every` chunks a tool call (pending,
then in_progress three times, then completed, over about half a second). Written with
plain json and one 5 ms ticker for all its sessions, so the agent's own CPU stays small
and out of the bridge's figure (it is another process anyway).

    python bench/stream_agent.py CHUNKS TOOL_EVERY SEED

Each session streams the script `turn_script(its id, ...)`; the bench regenerates it to check
every answer byte for byte.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import random
import sys
from typing import Any

ALPHABET = "abcdefghijklmnopqrstuvwxyz     ,.;`*\n你好世界代码"
TICK = 0.005

Step = tuple[float, dict[str, Any]]  # seconds after the prompt, the update


def turn_script(session: str, chunks: int, tool_every: int, seed: int) -> list[Step]:
    rng = random.Random(f"{seed}:{session}")
    steps: list[Step] = []
    at = 0.0
    for number in range(chunks):
        at += rng.uniform(1 / 80, 1 / 30)
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(5, 40)))
        content = {"type": "text", "text": text}
        steps.append((at, {"sessionUpdate": "agent_message_chunk", "content": content}))
        if tool_every and (number + 1) % tool_every == 0:
            tool = f"tool-{session}-{number}"
            start = {"sessionUpdate": "tool_call", "toolCallId": tool, "title": f"Run {number}"}
            steps.append((at, {**start, "kind": "execute", "status": "pending"}))
            for status in ("in_progress", "in_progress", "in_progress", "completed"):
                at += rng.uniform(0.05, 0.2)
                update = {"sessionUpdate": "tool_call_update", "toolCallId": tool}
                steps.append((at, {**update, "status": status}))
    return steps


def answer_of(steps: list[Step]) -> str:
    return "".join(
        u["content"]["text"] for _, u in steps if u["sessionUpdate"] == "agent_message_chunk"
    )


class Agent:
    def __init__(self, chunks: int, tool_every: int, seed: int) -> None:
        self.chunks, self.tool_every, self.seed = chunks, tool_every, seed
        self.sessions = 0
        self.due: list[tuple[float, int, str, Any]] = []  # (when, order, session, step or id)
        self.order = 0
        self.out = sys.stdout.buffer

    def write(self, messages: list[dict[str, Any]]) -> None:
        if messages:
            self.out.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
            self.out.flush()

    def handle(self, message: dict[str, Any]) -> None:
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            return  # session/cancel and other notifications: nothing to do here
        if method == "initialize":
            result: Any = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        elif method == "session/new":
            result = {"sessionId": f"s{os.getpid()}-{self.sessions}"}
            self.sessions += 1
        elif method == "session/prompt":
            self.start(message["params"]["sessionId"], ident)
            return
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
            self.write([{"jsonrpc": "2.0", "id": ident, "error": error}])
            return
        self.write([{"jsonrpc": "2.0", "id": ident, "result": result}])

    def start(self, session: str, ident: Any) -> None:
        now = asyncio.get_running_loop().time()
        steps = turn_script(session, self.chunks, self.tool_every, self.seed)
        for at, update in steps:
            self.push(now + at, session, update)
        self.push(now + (steps[-1][0] if steps else 0) + TICK, session, ("end", ident))

    def push(self, when: float, session: str, item: Any) -> None:
        self.order += 1
        heapq.heappush(self.due, (when, self.order, session, item))

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(TICK)
            now, batch = loop.time(), []
            while self.due and self.due[0][0] <= now:
                _, _, session, item = heapq.heappop(self.due)
                if isinstance(item, tuple):
                    result = {"stopReason": "end_turn"}
                    batch.append({"jsonrpc": "2.0", "id": item[1], "result": result})
                else:
                    params = {"sessionId": session, "update": item}
                    batch.append({"jsonrpc": "2.0", "method": "session/update", "params": params})
            self.write(batch)


async def main(chunks: int, tool_every: int, seed: int) -> None:
    agent = Agent(chunks, tool_every, seed)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    ticker = asyncio.create_task(agent.tick())
    while line := await reader.readline():
        if line.strip():
            agent.handle(json.loads(line))
    ticker.cancel()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
