"""The call budget's cost per wake-up against how many calls wait (docs/scaling.md).

    python bench/budget_grants.py [--waiting 50,200,1000,4000] [--wakeups 3000]

A budget (`CallQueue`, its default policy) holds N calls waiting on three APIs (a card's
changes, replies, reactions; refreshes and cards, many chats), and is woken every 5 ms of
its own clock, as its timer wakes it under load: each wake-up grants what may go (`grant`)
and finds the next time one could (`next_wake`); each call granted is replaced by a new
one, so N stay waiting. It prints the CPU of a wake-up, both parts, for each N.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bridge.core.delivery import Lane
from bridge.feishu.budget import BudgetPolicy, CallQueue, api_of

APIS = (
    api_of("PUT", "/open-apis/cardkit/v1/cards/c/elements/e/content"),
    api_of("POST", "/open-apis/im/v1/messages/m/reactions"),
    api_of("PATCH", "/open-apis/cardkit/v1/cards/c/settings"),
)


def wakeups(waiting: int, count: int) -> tuple[float, float, int]:
    """(µs of `grant`, µs of `next_wake`) a wake-up, and the calls granted."""
    queue = CallQueue(BudgetPolicy(), now=-61.0)  # a quiet minute before
    offered = 0

    def offer(now: float) -> int:
        nonlocal offered
        lane = Lane.CARD if offered % 3 == 0 else Lane.REFRESH
        waiter = queue.waiter(lane, f"oc_{offered % waiting}", False, now, APIS[offered % 3])
        offered += 1
        return len(queue.offer(waiter, now))

    now = 0.0
    granted = 0
    while offered - granted < waiting:
        granted += offer(now)
    in_grant = in_wake = 0.0
    for _ in range(count):
        now += 0.005
        started = time.process_time()
        went = queue.grant(now)
        between = time.process_time()
        queue.next_wake(now)
        in_grant += between - started
        in_wake += time.process_time() - between
        granted += len(went)
        for _ in went:  # as many new calls as went: N stay waiting
            granted += offer(now)
    return 1e6 * in_grant / count, 1e6 * in_wake / count, granted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--waiting", default="50,200,1000,4000")
    parser.add_argument("--wakeups", type=int, default=3000)
    args = parser.parse_args()
    for n in (int(x) for x in args.waiting.split(",")):
        grant, wake, granted = wakeups(n, args.wakeups)
        print(
            f"{n:>5} waiting: {grant + wake:7.1f} µs a wake-up"
            f" (grant {grant:.1f}, next_wake {wake:.1f}); {granted} granted"
        )


if __name__ == "__main__":
    main()
