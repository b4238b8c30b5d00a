"""What a finished turn leaves behind in the engine is bounded: many turns in one
conversation leave its actor's bookkeeping no larger than one turn does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from bridge.clock import LoopClock
from bridge.core import Conversation
from bridge.core.delivery import Lane, Terms, presence_group, turn_news
from bridge.engine.actor import GROUPS_KEPT, ConversationActor, Route, Work
from bridge.engine.turn_runner import NOTED_KEPT
from bridge.runtime.events import MessageChunk
from bridge.store import MemoryStore
from bridge.tasks import TaskTracker
from tests.unit.engine.engine_fakes import CHAT, QUIET, Harness

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


@dataclass(frozen=True)
class Hint:
    idempotency_key: str
    terms: Terms


class Busy:
    """Work that holds the actor's work lane until released."""


async def test_a_conversation_never_idle_forgets_the_groups_nothing_queued_is_in() -> None:
    busy, released, all_shown = Busy(), asyncio.Event(), asyncio.Event()
    performed: list[str] = []

    async def perform(actor: ConversationActor, work: Work) -> None:
        if work is busy:
            await released.wait()
            return
        performed.append(getattr(work, "idempotency_key", ""))
        if len(performed) == 500:
            all_shown.set()

    tasks = TaskTracker("test")
    actor = ConversationActor(
        CHAT,
        conv=Conversation(key=CHAT),
        timings=QUIET,
        clock=LoopClock(),
        perform=perform,
        route=lambda work: Route.WORK if work is busy else Route.SHOWN,
        watchers=(),
        tasks=tasks,
    )
    actor.enqueue(busy)  # type: ignore[arg-type]  # the actor is never idle from now on
    for number in range(500):
        turn = f"t{number}"
        terms = Terms(
            Lane.HINT,
            CHAT,
            False,
            group=presence_group(turn),
            presence=True,
            news_for=turn_news(turn),
        )
        actor.enqueue(Hint(f"{turn}:hint", terms))  # type: ignore[arg-type]
        await asyncio.sleep(0)
    await asyncio.wait_for(all_shown.wait(), 5)
    assert len(actor._moot) + len(actor._news) <= GROUPS_KEPT  # the bound is the point
    released.set()
    await actor.wait_idle()
