"""CPU per agent update while N turns stream at once (issue 33): the bridge's runtime path
beside a floor, a minimal client of the same ACP SDK that reads and parses the same stream
and does nothing else.

    python bench/stream_cpu.py [--n 1 200] [--chunks 300] [--tool-every 100] [--agents 4]
                               [--window 0.2]

The agent is `stream_agent.py` (text chunks of 5-40 characters at 30-80 a second, a tool
call every `--tool-every` chunks with repeated status updates), `--agents` processes,
sessions spread over them. Each row runs in its own process and counts only that
process's CPU (`time.process_time`, the agents excluded) from the first prompt to the last
answer, divided by the updates the agents wrote.

`bridge`: `AcpRuntime` (the pool, the batched stdout, the SDK's validation, normalization,
the turn's sink), every answer checked byte for byte against what the agent streamed.
`floor`: `acp.spawn_agent_process` with a client whose `session_update` does nothing.
`--window 0` turns merging off. STREAM_CPU_ROOT=/path runs the bridge of another checkout
(the figure before this change: `git archive main bridge | tar -x -C /tmp/before`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ.get("STREAM_CPU_ROOT") or HERE.parent)
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from stream_agent import answer_of, turn_script  # noqa: E402


def agent_argv(args: argparse.Namespace) -> list[str]:
    script = str(HERE / "stream_agent.py")
    return [sys.executable, script, str(args.chunks), str(args.tool_every), str(args.seed)]


def updates_written(args: argparse.Namespace, sessions: list[str]) -> int:
    return sum(len(turn_script(s, args.chunks, args.tool_every, args.seed)) for s in sessions)


async def run_bridge(args: argparse.Namespace) -> dict[str, Any]:
    from bridge.clock import LoopClock
    from bridge.runtime.acp.runtime import AcpRuntime
    from bridge.runtime.events import MessageChunk

    n = args.n[0]
    folder = Path(tempfile.mkdtemp())
    runtime = AcpRuntime(agent_argv(args), folder, clock=LoopClock(), max_agents=args.agents)
    limits = runtime._pool._limits
    if args.window is not None and hasattr(limits, "batch_window"):
        runtime._pool._limits = dataclasses.replace(limits, batch_window=args.window)
    texts: dict[str, list[str]] = {}
    events = [0]
    sessions = [(await runtime.open_session(f"chat-{i}")).session_id for i in range(n)]

    def sink_for(session_id: str) -> Any:
        parts = texts.setdefault(session_id, [])

        def sink(event: Any) -> None:
            events[0] += 1
            if isinstance(event, MessageChunk):
                parts.append(event.text)

        return sink

    start = time.process_time()
    wall = time.perf_counter()
    await asyncio.gather(*(runtime.prompt(s, "go", sink_for(s)) for s in sessions))
    cpu, wall = time.process_time() - start, time.perf_counter() - wall
    await runtime.close()
    exact = all(
        "".join(texts[s]) == answer_of(turn_script(s, args.chunks, args.tool_every, args.seed))
        for s in sessions
    )
    updates = updates_written(args, sessions)
    return {"cpu": cpu, "wall": wall, "events": events[0], "exact": exact, "updates": updates}


async def run_floor(args: argparse.Namespace) -> dict[str, Any]:
    from acp import spawn_agent_process, text_block

    class Client:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            pass

        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        def on_connect(self, conn: Any) -> None:
            pass

    n, cwd = args.n[0], tempfile.mkdtemp()
    argv = agent_argv(args)
    async with contextlib_stack(
        [spawn_agent_process(Client(), argv[0], *argv[1:]) for _ in range(min(n, args.agents))]
    ) as agents:
        conns = [conn for conn, _ in agents]
        for conn in conns:
            await conn.initialize(protocol_version=1)
        sessions = [
            (conns[i % len(conns)], (await conns[i % len(conns)].new_session(cwd=cwd)).session_id)
            for i in range(n)
        ]
        start = time.process_time()
        wall = time.perf_counter()
        prompts = [conn.prompt(session_id=s, prompt=[text_block("go")]) for conn, s in sessions]
        await asyncio.gather(*prompts)
        cpu, wall = time.process_time() - start, time.perf_counter() - wall
    updates = updates_written(args, [s for _, s in sessions])
    return {"cpu": cpu, "wall": wall, "events": None, "exact": None, "updates": updates}


def contextlib_stack(managers: list[Any]) -> Any:
    import contextlib

    @contextlib.asynccontextmanager
    async def stack() -> Any:
        async with contextlib.AsyncExitStack() as exits:
            yield [await exits.enter_async_context(m) for m in managers]

    return stack()


def child(args: argparse.Namespace) -> None:
    run = run_bridge if args.child == "bridge" else run_floor
    print(json.dumps(asyncio.run(run(args))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 200])
    parser.add_argument("--chunks", type=int, default=300)
    parser.add_argument("--tool-every", type=int, default=100)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--window", type=float, default=None, help="seconds; 0: no merging")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", choices=["bridge", "floor"])
    parser.add_argument("--rows", default="bridge,floor")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    print(f"bridge at {ROOT}; {args.chunks} chunks a turn, a tool every {args.tool_every}")
    print(f"{'N':>4} {'row':>7} {'updates':>8} {'µs/update':>10} {'cpu s':>7} {'wall s':>7}  note")
    for n in args.n:
        for row in args.rows.split(","):
            command = [sys.executable, __file__, "--child", row, "--n", str(n)]
            command += ["--chunks", str(args.chunks), "--tool-every", str(args.tool_every)]
            command += ["--agents", str(args.agents), "--seed", str(args.seed)]
            if args.window is not None:
                command += ["--window", str(args.window)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode:
                print(f"{n:>4} {row:>7} failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            per = r["cpu"] / r["updates"] * 1e6
            note = ""
            if r["events"] is not None:
                note = f"{r['events']} turn events; answers exact: {r['exact']}"
            line = f"{n:>4} {row:>7} {r['updates']:>8} {per:>10.1f} {r['cpu']:>7.2f}"
            print(f"{line} {r['wall']:>7.2f}  {note}")


if __name__ == "__main__":
    main()
