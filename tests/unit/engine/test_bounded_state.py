"""What a finished turn leaves behind in the engine is bounded: many turns in one
conversation leave its actor's bookkeeping no larger than one turn does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bridge.engine.turn_runner import NOTED_KEPT
from bridge.runtime.events import MessageChunk
from bridge.store import MemoryStore
from tests.unit.engine.engine_fakes import CHAT, Harness

TURNS = 20


class SlowOwe(MemoryStore):
    """A store whose record of an owed post lands late: after the post it is for went out
    (the work lane's write behind the shown lane's post, as on a busy SQLite)."""

    async def owe(self, *args: object, **kwargs: object) -> bool:
        for _ in range(20):
            await asyncio.sleep(0)
        return await super().owe(*args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(params=[MemoryStore, SlowOwe])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    store = request.param()
    await store.open()
    harness = Harness(store)
    yield harness
    harness.feishu.release()
    await harness.engine.drain(0.1)
    await store.close()


async def answered_turns(harness: Harness, count: int) -> None:
    for number in range(1, count + 1):
        await harness.say(f"question {number}")
        turn = await harness.runtime.turn(number)
        turn.emit(MessageChunk(turn.session_id, f"answer {number}"))
        turn.end()
        await harness.idle()


async def test_owed_marks_do_not_outlive_their_posts(harness: Harness) -> None:
    await answered_turns(harness, TURNS)
    assert harness.feishu.texts()[-1] == f"answer {TURNS}"
    actor = harness.engine.conversations[CHAT]
    assert actor.owed_at == {}
    assert await harness.store.owed() == []  # every record settled, late ones included


async def test_notes_of_sessions_lost_with_their_agent_do_not_pile_up(harness: Harness) -> None:
    for number in range(1, NOTED_KEPT * 2):
        await harness.say(f"question {number}")
        turn = await harness.runtime.turn(number)
        turn.end()
        await harness.idle()
        harness.runtime.lost.add(turn.session_id)  # its agent restarted without it
        harness.clock += 30.0
    assert len({t.session_id for t in harness.runtime.turns}) == NOTED_KEPT * 2 - 1
    assert len(harness.engine.runner._noted) <= NOTED_KEPT  # the bound is the point
