"""The simulator's speed (issue 42): seeds checked per second of CPU, one process.

    PYTHONHASHSEED=0 python bench/sim_speed.py [--seeds 200] [--first 0] [--workers 2]
                                              [--profile FILE]

Each seed is what a sweep does with it (tests/sim/sweep.py `checked`: the world, its
invariants, its transcript when it breaks one). The figure is `time.process_time`, this
process's CPU only, so a machine loaded by others does not move it much; the imports and
a first seed (warming caches) are left out. `--workers N` adds a sweep's wall figure over
the same seeds in N forked processes (`tests.sim.sweep.sweep`), which a loaded machine
does move. `--profile FILE` writes cProfile's stats of the timed seeds (read them with
`python -m pstats FILE`).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":  # the sweep's own set order (tests/sim)
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="also a forked sweep's wall")
    parser.add_argument("--profile", help="write cProfile stats of the timed seeds here")
    args = parser.parse_args()

    from tests.sim.sweep import checked, sweep

    seeds = range(args.first, args.first + args.seeds)
    checked(seeds[0])  # warm: lazy imports, caches
    profile = cProfile.Profile() if args.profile else None
    failed = 0
    started = time.process_time()
    if profile is not None:
        profile.enable()
    for seed in seeds:
        failed += bool(checked(seed).problems)
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)
    cpu = time.process_time() - started
    print(
        f"one process: {args.seeds} seeds in {cpu:.2f} s CPU, {args.seeds / cpu:.1f} seeds/s"
        f" ({1000 * cpu / args.seeds:.1f} ms a seed), {failed} failed"
    )
    if args.workers:
        wall = time.perf_counter()
        done = sum(1 for _ in sweep(seeds, processes=args.workers))
        took = time.perf_counter() - wall
        rate = done / took
        print(f"{args.workers} processes: {done} seeds in {took:.2f} s wall, {rate:.1f} seeds/s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
