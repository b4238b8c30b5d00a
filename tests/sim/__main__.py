"""Run the simulator: `python -m tests.sim --seed N` replays one seed and prints its
transcript; `python -m tests.sim --seeds 100000` sweeps (overnight); see docs/architecture.md."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .invariants import check, transcript
from .world import run_seed


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":  # set order must not vary between processes
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "tests.sim", *sys.argv[1:]])
    parser = argparse.ArgumentParser(prog="python -m tests.sim")
    parser.add_argument("--seed", type=int, help="replay this seed and print its transcript")
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds to sweep")
    parser.add_argument("--first", type=int, default=0, help="the first seed of the sweep")
    args = parser.parse_args()
    if args.seed is not None:
        run = run_seed(args.seed)
        print(transcript(run))
        problems = check(run)
        print("\n".join(["", *problems]) if problems else "\nall invariants hold")
        return 1 if problems else 0
    started, failed = time.perf_counter(), 0
    for seed in range(args.first, args.first + args.seeds):
        problems = check(run_seed(seed))
        if problems:
            failed += 1
            print(f"seed {seed}: {problems[0]}  (python -m tests.sim --seed {seed})", flush=True)
    took = time.perf_counter() - started
    print(f"{args.seeds} seeds, {failed} failed, {took:.1f} s, {args.seeds / took:.0f} seeds/s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
