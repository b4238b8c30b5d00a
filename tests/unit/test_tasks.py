"""The engine's task set at shutdown: work that finishes a running round may still start
during the grace and is waited for; anything else is refused."""

from __future__ import annotations

import asyncio

import pytest

from bridge.tasks import TaskTracker


async def test_drain_waits_for_work_started_during_the_grace_and_refuses_new_rounds() -> None:
    tasks = TaskTracker("engine")
    release = asyncio.Event()
    done: list[str] = []

    async def answer() -> None:
        done.append("answer")

    async def round_() -> None:
        await release.wait()
        tasks.spawn(answer(), name="perform", while_draining=True)  # the round's answer
        done.append("round")

    tasks.spawn(round_(), name="turn:1")
    draining = asyncio.create_task(tasks.drain(5.0))
    await asyncio.sleep(0)
    assert tasks.draining
    with pytest.raises(RuntimeError, match="shutting down"):
        tasks.spawn(answer(), name="turn:2")  # a new round does not start
    release.set()
    await draining
    assert done == ["round", "answer"]
    with pytest.raises(RuntimeError, match="shutting down"):
        tasks.spawn(answer(), name="perform", while_draining=True)  # over: nothing starts


async def test_drain_cancels_what_outlives_the_grace() -> None:
    tasks = TaskTracker("engine")
    never = asyncio.Event()
    task = tasks.spawn(never.wait(), name="turn:1")
    await tasks.drain(0.01)
    assert task.cancelled()
    assert len(tasks) == 0
