"""One long answer, watched as it grows (issue 43): one chat, card style by default, the
scripted agent thinking `--think` seconds (thoughts and tool calls) and then streaming a
`--size`-character answer evenly over `--stream` seconds, against the emulator enforcing
Feishu's rate limits (bench/stream_bench.py runs it; its docstring says how the chat is
read back from the emulator's call record and how exactness is judged).

    python bench/long_answer.py                    # 20,000 characters of prose over 20 s
    python bench/long_answer.py --code 1           # Markdown with long ```python blocks
    python bench/long_answer.py --runs 3 --trace   # three seeds, each growth printed

It prints, per run: the longest interval between visible growths of the answer, from the
agent's first chunk until the chat showed the whole answer (the issue: at most 2 s), and
whether it was shown exactly once (all its words, once, in order: no message repeating
what a card shows); then the cards and messages it took, whether its code came through
intact, the agent's end → whole answer, and chunk→visible p95. `--trace` lists each growth
(seconds after the first chunk, characters of the answer shown) and each change of the
chat that did not grow it. The exit status is 1 when a run failed either check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.stream_bench import Turns, one  # noqa: E402

LIMIT = 2.0  # the bound on the wait between two growths


def trace(turn: dict[str, Any]) -> list[str]:
    grew = {round(at, 3): chars for at, chars in turn["growth"]}
    lines = []
    for at, what in turn["changes"]:
        chars = grew.pop(round(at, 3), None)
        shown = f"{chars:6} characters shown" if chars is not None else f"{'':6} ({what})"
        lines.append(f"  {at:7.2f}s {shown}")
    return lines


def report(turn: dict[str, Any]) -> str:
    ok = turn["growth_max_s"] <= LIMIT and turn["judged"] == "exact"
    code = {None: "no code", True: "code intact", False: "code NOT intact"}[turn["code_intact"]]
    end = turn["end_s"]
    return (
        f"{'ok  ' if ok else 'FAIL'} longest wait between growths {turn['growth_max_s']:5.2f}s"
        f" (limit {LIMIT:.0f}s) | shown {turn['judged']}"
        f"{' once' if turn['judged'] == 'exact' else ''} | {turn['size']} characters in"
        f" {turn['cards']} cards + {turn['messages']} messages, {code} | end → whole"
        f" {'never' if end is None else f'{end:.2f}s'} | chunk→visible p95"
        f" {turn['chunk_p95_s']:.2f}s | first chunk {turn['first_chunk_s']:.1f}s after the"
        f" message, streamed {turn['last_chunk_s']:.1f}s"
    )


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--style", default="card", choices=["card", "messages"])
    parser.add_argument("--size", type=int, default=20000, help="the answer's characters")
    parser.add_argument("--stream", type=float, default=20.0, help="seconds it streams over")
    parser.add_argument("--think", type=float, default=5.0, help="seconds before the answer")
    parser.add_argument("--code", type=float, default=0.0, help="1: Markdown with code blocks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=1, help="runs, seeds seed, seed+1, …")
    parser.add_argument("--settle", type=float, default=30.0, help="extra wait for the end")
    parser.add_argument("--trace", action="store_true", help="print each change of the chat")
    parser.add_argument("--json", action="store_true", help="also print each run as JSON")
    args = parser.parse_args(argv)
    failed = 0
    for run in range(args.runs):
        seconds = args.think + args.stream
        turns = Turns(seconds, (args.size, args.size), args.code, args.seed + run, args.stream)
        result = await one(args.style, 1, turns, args.settle, detail=True)
        if not result["turns"]:
            print(f"FAIL the agent never finished ({result['folder']})", flush=True)
            failed += 1
            continue
        turn = result["turns"][0]
        failed += turn["growth_max_s"] > LIMIT or turn["judged"] != "exact"
        print(f"{args.style} seed {args.seed + run}: {report(turn)}", flush=True)
        if turn["code_difference"]:
            print(f"  {turn['code_difference']}", flush=True)
        if args.trace:
            print("\n".join(trace(turn)), flush=True)
        if args.json:
            print(json.dumps(result), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
