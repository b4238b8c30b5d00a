"""Run the simulator: `python -m tests.sim --seed N` replays one seed and prints its
transcript; `python -m tests.sim --seeds 100000` sweeps (overnight); see docs/architecture.md."""

from __future__ import annotations

import argparse
import os
import sys
import time

OVERNIGHT = """\
The overnight sweep, on every core (a progress line every 1,000 seeds, then a summary):
  python -m tests.sim --seeds 100000 | tee sim-sweep.log
Each failing seed is printed with the command that replays it. SIM_WORKERS=1 (or
--workers 1) runs the seeds in this process, one after another."""


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":  # set order must not vary between processes
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "tests.sim", *sys.argv[1:]])
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim",
        epilog=OVERNIGHT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, help="replay this seed and print its transcript")
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds to sweep")
    parser.add_argument("--first", type=int, default=0, help="the first seed of the sweep")
    parser.add_argument(
        "--workers", type=int, default=0, help="processes (default: SIM_WORKERS, else the cores)"
    )
    parser.add_argument(
        "--every", type=int, default=1000, help="a progress line every this many seeds"
    )
    args = parser.parse_args()
    # Imported once the hash seed is settled: the world's modules are most of the start.
    from .invariants import check, transcript
    from .sweep import sweep, workers
    from .world import run_seed

    if args.seed is not None:
        run = run_seed(args.seed)
        print(transcript(run))
        problems = check(run)
        print("\n".join(["", *problems]) if problems else "\nall invariants hold")
        return 1 if problems else 0
    processes = args.workers or workers()
    print(f"sweeping {args.seeds} seeds from {args.first} in {processes} processes", flush=True)
    started, done, failed = time.perf_counter(), 0, 0

    def progress() -> str:
        took = time.perf_counter() - started
        return f"{done} seeds, {failed} failed, {took:.1f} s, {done / took:.0f} seeds/s"

    seeds = range(args.first, args.first + args.seeds)
    for result in sweep(seeds, processes=processes):
        done += 1
        if result.problems:
            failed += 1
            seed = result.seed
            print(f"seed {seed}: {result.problems[0]}  (python -m tests.sim --seed {seed})")
        if done % args.every == 0 and done < args.seeds:
            print(progress(), flush=True)
    print(progress())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
