"""Issue 35, "A database restart costs nothing": the store away while a turn starts is
waited out (not told as "cannot start", which is the agent's line), and a turn cut before
its prompt went out is run again after a restart, never turned into a resend line."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bridge.runtime.events import MessageChunk
from bridge.store import MemoryStore
from bridge.store.port import MessageState, Schedule, StoreUnavailable, TurnOutcome
from bridge.store.steady import StoreRetry
from tests.fakes.feishu import Call
from tests.unit.engine.engine_fakes import ACK, CHAT, Harness, T

NO_WAIT = StoreRetry(base_delay=0.0, max_delay=0.0)


class AwayStore(MemoryStore):
    """The memory store whose database is away for the next `away[name]` calls of a
    method, as PostgreSQL restarting under it."""

    def __init__(self) -> None:
        super().__init__()
        self.away: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()

    def _gone(self, name: str) -> None:
        if self.away[name] > 0:
            self.away[name] -= 1
            self.failed[name] += 1
            raise StoreUnavailable("OperationalError")

    async def session_for(self, conversation_key: str) -> str | None:
        self._gone("session_for")
        return await super().session_for(conversation_key)

    async def preferences(self, conversation_key: str) -> dict[str, str]:
        self._gone("preferences")
        return await super().preferences(conversation_key)

    async def bind_session(self, conversation_key: str, session_id: str, now: float) -> None:
        self._gone("bind_session")
        await super().bind_session(conversation_key, session_id, now)

    async def begin_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        self._gone("begin_turn")
        return await super().begin_turn(turn_id, conversation_key, message_id, now)

    async def mark_prompted(self, turn_id: str, now: float) -> bool:
        self._gone("mark_prompted")
        return await super().mark_prompted(turn_id, now)

    async def add_schedule(self, *args: Any, **kwargs: Any) -> Schedule | None:
        made = await super().add_schedule(*args, **kwargs)
        self._gone("add_schedule")  # after the write: the answer lost, the row committed
        return made

    async def schedule(self, schedule_id: int) -> Schedule | None:
        self._gone("schedule")
        return await super().schedule(schedule_id)

    async def remove_schedule(self, schedule_id: int) -> bool:
        self._gone("remove_schedule")
        return await super().remove_schedule(schedule_id)

    async def end_turn(
        self,
        turn_id: str,
        message_id: str,
        outcome: TurnOutcome,
        now: float,
        *,
        sent: tuple[str, Sequence[str]] | None = None,
    ) -> bool:
        self._gone("end_turn")
        return await super().end_turn(turn_id, message_id, outcome, now, sent=sent)


async def _answer(harness: Harness, number: int, text: str) -> None:
    async with asyncio.timeout(5):  # a guard: a prompt that never comes fails, not hangs
        turn = await harness.runtime.turn(number)
    turn.emit(MessageChunk(turn.session_id, text))
    turn.end()
    await harness.idle()


async def test_the_store_away_while_a_turn_starts_and_ends_is_waited_out() -> None:
    store = AwayStore()
    await store.open()
    h = Harness(store, store_retry=NO_WAIT)
    # Every store call of the turn fails at first: the connection dropped under it.
    names = ["begin_turn", "session_for", "preferences", "bind_session"]
    store.away.update({name: 2 for name in [*names, "mark_prompted", "end_turn"]})
    mid = await h.say("hello")
    await _answer(h, 1, "hi there")

    assert h.feishu.calls == [Call("add_reaction", mid, ACK), Call("reply_text", mid, "hi there")]
    assert T("presence.runtime_unavailable") not in h.feishu.texts()
    assert h.runtime.calls == [("open_session", CHAT, None), ("prompt", "sess_1", "hello")]
    assert +store.away == Counter()  # every failure was met, and retried
    turn = await store.turn(mid)
    assert turn is not None
    assert turn.outcome is TurnOutcome.COMPLETED
    assert turn.prompted_at is not None
    await h.engine.drain(0.1)


async def test_a_store_away_past_the_bound_ends_the_turn_as_the_bridges_fault() -> None:
    store = AwayStore()
    await store.open()
    h = Harness(store, store_retry=StoreRetry(max_attempts=3, base_delay=0.0, max_delay=0.0))
    store.away["session_for"] = 3
    mid = await h.say("hello")
    await h.idle()

    # The bridge's own part failed (the resend line), not the agent ("cannot start").
    assert h.feishu.calls == [
        Call("add_reaction", mid, ACK),
        Call("reply_text", mid, T("presence.unrecoverable")),
    ]
    assert h.runtime.calls == []
    await h.engine.drain(0.1)


async def test_a_turn_cut_before_its_prompt_went_out_runs_again_after_a_restart() -> None:
    store = MemoryStore()
    await store.open()
    old = Harness(store)
    old.runtime.opening = asyncio.Event()  # its session never opens: the process dies first
    mid = await old.say("hello")
    await old.idle()
    running = await store.running_turns()
    assert [(t.turn_id, t.prompted_at) for t in running] == [(mid, None)]

    restarted = Harness(store)
    restarted.clock = old.clock + 5
    await restarted.engine.recover(before=restarted.clock)
    await _answer(restarted, 1, "hi there")

    assert restarted.feishu.calls == [
        Call("reply_text", mid, T("recovery.resumed")),
        Call("reply_text", mid, "hi there"),
    ]
    assert restarted.runtime.calls == [
        ("open_session", CHAT, None),
        ("prompt", "sess_1", "hello"),
    ]
    journaled = await store.message(mid)
    assert journaled is not None
    assert journaled.state is MessageState.DONE
    turn = await store.turn(mid)
    assert turn is not None
    assert turn.outcome is TurnOutcome.COMPLETED
    old.runtime.opening.set()
    await old.engine.drain(0.1)
    await restarted.engine.drain(0.1)


async def test_schedule_commands_wait_out_the_store_and_add_once() -> None:
    """/every and /unschedule with the database away: each is answered once it is back. An
    add whose answer was lost after it committed is found by its command's message, not
    added twice (simulator seeds 664 and 490: an /unschedule failed silently and the
    schedule ran on for ever)."""
    store = AwayStore()
    await store.open()
    h = Harness(store, store_retry=NO_WAIT)
    await h.engine.start_schedules()
    store.away["add_schedule"] = 1
    mid = await h.say("/every 1h check the build")
    await h.idle()
    (made,) = await store.schedules(CHAT)
    assert h.feishu.calls[-1].target == mid
    assert f"#{made.schedule_id}" in h.feishu.calls[-1].text

    store.away.update({"schedule": 2, "remove_schedule": 2})
    await h.say(f"/unschedule {made.schedule_id}")
    await h.idle()
    assert h.feishu.calls[-1].text == T("schedule.removed", number=made.schedule_id)
    assert await store.schedules() == []
    assert +store.away == Counter()
    await h.engine.drain(0.1)
