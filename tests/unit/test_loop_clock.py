"""The real clock's timers on the loops the service runs on: never before their time.

A timer that fires early wakes its waiter for nothing (it re-checks and re-arms): uvloop
rounds a delay to the nearest millisecond and counts it from a time cut to milliseconds.
These timers wait a few milliseconds in all; no assertion is about how late they are."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from bridge.clock import LoopClock

LOOPS: dict[str, Callable[[Coroutine[Any, Any, list[float]]], list[float]]] = {
    "uvloop": uvloop.run,
    "asyncio": asyncio.run,
}


async def fired_early_by() -> list[float]:
    """How early each of 200 timers fired (seconds; 0 when on time or late): delays drawn
    between nothing and 3 ms, half of them set from inside another timer's callback (as a
    waiter re-arms), the rest at once."""
    clock, rng = LoopClock(), random.Random(7)
    early: list[float] = []
    done = asyncio.get_running_loop().create_future()
    chained = 0

    def arm(chain: bool) -> None:
        when = clock.now() + rng.uniform(0.0, 0.003)

        def fired() -> None:
            nonlocal chained
            early.append(max(0.0, when - clock.now()))
            if chain and (chained := chained + 1) < 100:
                arm(chain=True)
            if len(early) == 200:
                done.set_result(None)

        clock.call_at(when, fired)

    arm(chain=True)
    for _ in range(100):
        arm(chain=False)
    await done
    return early


@pytest.mark.parametrize("loop", LOOPS)
def test_a_timer_never_fires_before_its_time(loop: str) -> None:
    early = LOOPS[loop](fired_early_by())
    assert len(early) == 200
    assert max(early) == 0.0


def test_a_timer_already_due_fires_at_once() -> None:
    async def order() -> list[str]:
        clock, seen = LoopClock(), []
        clock.call_at(clock.now() - 1.0, lambda: seen.append("due"))
        asyncio.get_running_loop().call_later(0.0005, lambda: seen.append("later"))
        await asyncio.sleep(0.002)
        return seen

    assert uvloop.run(order()) == ["due", "later"]
