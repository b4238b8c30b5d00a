"""Seeds checked on every core: a sweep's worlds are independent, so a pool of forked
workers runs them side by side and hands back, in seed order, each seed's problems (and,
for a seed that broke a rule, its transcript).

Forked, not spawned: a worker starts as a copy of the process that sweeps, with its
imports done (seconds saved per worker), its hash seed (so set order, and thus each run,
is what a replay in that process gives) and whatever a test put back by monkeypatching (a
mutation test's sweep runs the mutant). Where fork is not there, or with `SIM_WORKERS=1`,
the seeds run here, one after another.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from .invariants import check, transcript
from .world import run_seed

CHUNK = 8  # seeds a worker takes at a time: few round trips, yet an early stop stops soon


@dataclass(frozen=True)
class Checked:
    seed: int
    problems: list[str]
    transcript: str = ""  # only for a seed with problems


def workers() -> int:
    """How many processes a sweep uses: `SIM_WORKERS`, else one per core."""
    return int(os.environ.get("SIM_WORKERS") or os.cpu_count() or 1)


def checked(seed: int, *, storms: bool = True) -> Checked:
    run = run_seed(seed, storms=storms)
    problems = check(run)
    return Checked(seed, problems, transcript(run) if problems else "")


def sweep(
    seeds: Iterable[int], *, skip: Collection[int] = (), processes: int = 0
) -> Iterator[Checked]:
    """Each seed's result, in seed order. A caller that stops early (at the first failure)
    stops the workers too: close the generator, or let it be collected."""
    todo = [seed for seed in seeds if seed not in skip]
    processes = min(processes or workers(), len(todo))
    if processes <= 1 or not _forkable():
        yield from map(checked, todo)
        return
    # The parent's objects (imports, a test session) are never collected again: a worker's
    # collections then skip them, and do not touch the pages it shares with the parent.
    gc.collect()
    gc.freeze()
    pool = multiprocessing.get_context("fork").Pool(processes)
    try:
        yield from pool.imap(checked, todo, chunksize=CHUNK)
    finally:
        pool.terminate()
        pool.join()
        gc.unfreeze()


def _forkable() -> bool:
    # From Python 3.12 a fork while other threads run warns (a lock one of them holds stays
    # held in the child), and the suite turns warnings into errors.
    alone = sys.version_info < (3, 12) or threading.active_count() == 1
    return alone and "fork" in multiprocessing.get_all_start_methods()
