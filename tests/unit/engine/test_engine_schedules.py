"""Scheduled prompts through the real engine (core, actors, executor, scheduler, store) over
the recording fakes. The clock is the harness's: a test moves it and asks the scheduler to
look (`check`), as its timer would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bridge.schedules.scheduler import ScheduleSettings
from bridge.store import MemoryStore
from bridge.store.port import ScheduleKind
from tests.fakes.feishu import Call
from tests.unit.engine.engine_fakes import ALICE, CHAT, Harness, T

HOUR = 3600.0
BOB = "ou_bob"


class SuspendingStore(MemoryStore):
    """Its schedule writes give the loop a turn before they land, as SQLite's (a thread)
    and PostgreSQL's (a socket) do; the plain MemoryStore never suspends."""

    async def note_schedule_run(
        self, schedule_id: int, slot: float, ran_at: float, next_due_at: float
    ) -> bool:
        await asyncio.sleep(0)
        return await super().note_schedule_run(schedule_id, slot, ran_at, next_due_at)

    async def remove_schedule(self, schedule_id: int) -> bool:
        await asyncio.sleep(0)
        return await super().remove_schedule(schedule_id)


@pytest.fixture
async def every_3s() -> AsyncIterator[Harness]:
    """/every 3s allowed; the real timer kept out of the way (the test is the clock)."""
    store = SuspendingStore()
    await store.open()
    h = Harness(store, schedules=ScheduleSettings(min_interval=1.0, retry=HOUR))
    yield h
    h.feishu.release()
    await h.engine.drain(0.1)
    await store.close()


async def _every_hour(harness: Harness, prompt: str = "check the build") -> int:
    await harness.engine.start_schedules()
    mid = await harness.say(f"/every 1h {prompt}")
    await harness.idle()
    (made,) = await harness.store.schedules(CHAT)
    assert made.kind is ScheduleKind.EVERY
    assert made.next_due_at == harness.clock + HOUR
    assert harness.feishu.calls[-1].target == mid
    assert "#1" in harness.feishu.calls[-1].text  # the "added" line names its number
    return made.schedule_id


async def test_a_due_schedule_in_an_idle_chat_runs_as_a_turn_under_its_header(
    harness: Harness,
) -> None:
    sid = await _every_hour(harness)
    harness.feishu.calls.clear()
    harness.clock += HOUR
    harness.engine.schedules.check()
    turn = await harness.runtime.turn(1)
    assert turn.text == "check the build"
    turn.end()
    await harness.idle()
    header = T("schedule.header", number=sid, prompt="check the build")
    assert harness.feishu.calls == [
        Call("send_text", CHAT, header),
        Call("reply_text", "om_bot_2", T("presence.ended_empty")),  # answers the header
    ]
    record = await harness.store.schedule(sid)
    assert record is not None
    assert record.last_run_at == harness.clock
    assert record.next_due_at == harness.clock + HOUR


async def test_due_during_a_running_turn_is_skipped_then_runs_once_when_idle(
    harness: Harness,
) -> None:
    sid = await _every_hour(harness)
    await harness.say("a long job")
    first = await harness.runtime.turn(1)
    harness.clock += HOUR
    harness.engine.schedules.check()
    await harness.idle()
    record = await harness.store.schedule(sid)
    assert record is not None
    assert record.last_skip_reason == "running"
    assert record.last_run_at is None
    # Two more occurrences pass while the round runs: still one run, never a stack.
    harness.clock += 2 * HOUR + 5
    harness.engine.schedules.check()
    await harness.idle()
    assert len(harness.runtime.turns) == 1

    first.end()  # the round ends: the conversation is idle, the schedule runs at once
    run = await harness.runtime.turn(2)
    assert run.text == "check the build"
    run.end()
    await harness.idle()
    assert len(harness.runtime.turns) == 2
    record = await harness.store.schedule(sid)
    assert record is not None
    assert record.last_run_at == harness.clock
    assert record.next_due_at == harness.clock - 5 + HOUR  # the next grid occurrence
    harness.engine.schedules.check()
    await harness.idle()
    assert len(harness.runtime.turns) == 2


async def test_a_restart_runs_a_schedule_that_came_due_meanwhile_once(harness: Harness) -> None:
    sid = await _every_hour(harness)
    await harness.engine.drain(0.1)

    restarted = Harness(harness.store)
    restarted.clock = harness.clock + 5 * HOUR + 60  # five occurrences missed
    await restarted.engine.recover(before=restarted.clock)
    await restarted.engine.start_schedules()
    (await restarted.runtime.turn(1)).end()
    await restarted.idle()
    restarted.engine.schedules.check()
    await restarted.idle()
    assert len(restarted.runtime.turns) == 1
    record = await restarted.store.schedule(sid)
    assert record is not None
    assert record.next_due_at == harness.clock + 6 * HOUR
    restarted.feishu.release()
    await restarted.engine.drain(0.1)


async def test_schedules_are_listed_and_removed_only_by_their_creator(harness: Harness) -> None:
    sid = await _every_hour(harness)
    await harness.say("/schedules")
    await harness.idle()
    listing = harness.feishu.calls[-1].text
    assert f"#{sid}" in listing
    assert "check the build" in listing

    await harness.say(f"/unschedule {sid}", sender=BOB)
    await harness.idle()
    assert harness.feishu.calls[-1].text == T("schedule.not_yours", number=sid)
    await harness.say(f"/unschedule {sid}", sender=ALICE)
    await harness.idle()
    assert harness.feishu.calls[-1].text == T("schedule.removed", number=sid)
    assert await harness.store.schedules() == []


async def test_a_one_time_schedule_is_removed_after_it_runs(harness: Harness) -> None:
    await harness.engine.start_schedules()
    await harness.say("/at 2099-01-01T09:30+00:00 happy new year")
    await harness.idle()
    (made,) = await harness.store.schedules()
    assert made.kind is ScheduleKind.AT
    harness.clock = made.next_due_at + 1
    harness.engine.schedules.check()
    (await harness.runtime.turn(1)).end()
    await harness.idle()
    assert await harness.store.schedules() == []


async def test_a_one_time_schedule_due_during_a_turn_runs_once_when_idle(
    harness: Harness,
) -> None:
    """It has no next occurrence for its late run to take the place of: it runs, late,
    and is removed, like one on time."""
    await harness.engine.start_schedules()
    await harness.say("/at 2099-01-01T09:30+00:00 happy new year")
    await harness.idle()
    (made,) = await harness.store.schedules()
    await harness.say("a long job")
    job = await harness.runtime.turn(1)
    harness.clock = made.next_due_at + 1
    harness.engine.schedules.check()
    await harness.idle()
    (record,) = await harness.store.schedules()
    assert record.last_skip_reason == "running"
    job.end()
    (await harness.runtime.turn(2)).end()
    await harness.idle()
    assert [t.text for t in harness.runtime.turns] == ["a long job", "happy new year"]
    assert await harness.store.schedules() == []


async def test_unreadable_requests_are_answered_with_the_usage(harness: Harness) -> None:
    await harness.engine.start_schedules()
    for text, key, params in (
        ("/every soon check", "schedule.bad_interval", {"interval": "soon"}),
        ("/every 10s check", "schedule.too_short", {"minimum": "1m"}),
        ("/every 1h", "schedule.no_prompt", {}),
        ("/unschedule x", "schedule.unschedule_usage", {}),
        ("/unschedule 9", "schedule.not_found", {"number": "9"}),
        ("/schedules", "schedule.empty", {}),
    ):
        await harness.say(text)
        await harness.idle()
        assert harness.feishu.calls[-1].text == T(key, **params), text


async def test_issue_34_every_3s_during_a_5s_turn_runs_each_slot_once_never_twice(
    every_3s: Harness,
) -> None:
    harness = every_3s
    await harness.engine.start_schedules()
    await harness.say("/every 3s hello")
    await harness.idle()
    start = harness.clock  # the slots: start + 3, + 6, + 9, ...
    header = T("schedule.header", number=1, prompt="hello")

    def headers() -> int:
        return sum(c == Call("send_text", CHAT, header) for c in harness.feishu.calls)

    await harness.say("sleep 5")
    job = await harness.runtime.turn(1)
    harness.clock = start + 3  # the slot comes while the 5 s turn runs: skipped
    harness.engine.schedules.check()
    await harness.idle()
    assert headers() == 0
    harness.clock = start + 5  # the turn ends: the skipped slot runs once, now
    job.end()
    (await harness.runtime.turn(2)).end()
    await harness.idle()
    assert headers() == 1
    (record,) = await harness.store.schedules()
    assert (record.last_run_at, record.next_due_at) == (start + 5, start + 9)
    harness.clock = start + 6  # 1 s after the catch-up, less than half a period: skipped
    harness.engine.schedules.check()
    await harness.idle()
    assert headers() == 1, "the slot +6s ran 1 s after the catch-up"
    assert len(harness.runtime.turns) == 2
    for number, slot in enumerate((9.0, 12.0), start=3):
        harness.clock = start + slot  # the timer's wake-up at the slot
        harness.engine.schedules.check()
        await harness.idle()
        assert headers() == number - 1, f"slot +{slot:g}s ran {headers() - number + 2} times"
        (await harness.runtime.turn(number)).end()
        await harness.idle()
        assert len(harness.runtime.turns) == number
    assert [t.text for t in harness.runtime.turns] == ["sleep 5"] + ["hello"] * 3
    (record,) = await harness.store.schedules()
    assert (record.last_run_at, record.next_due_at) == (start + 12, start + 15)


async def test_an_early_timer_wake_up_re_arms_and_the_slot_still_runs_once(
    harness: Harness,
) -> None:
    """A timer may fire a few ms before its wall-clock deadline (uvloop rounds delays to
    whole ms; its loop time can be stale): the wake-up finds nothing due and re-arms for
    the remainder; the re-armed timer, a real one, runs the slot once."""
    sid = await _every_hour(harness)
    slot = harness.clock + HOUR
    harness.clock = slot - 0.004  # the wake-up 4 ms early
    harness.engine.schedules.check()
    await harness.idle()
    assert harness.runtime.turns == []
    harness.clock = slot  # the wall clock reaches the slot; nobody calls check() now
    async with asyncio.timeout(5):
        run = await harness.runtime.turn(1)
    run.end()
    await harness.idle()
    header = Call("send_text", CHAT, T("schedule.header", number=sid, prompt="check the build"))
    assert harness.feishu.calls.count(header) == 1
    assert len(harness.runtime.turns) == 1
    record = await harness.store.schedule(sid)
    assert record is not None
    assert (record.last_run_at, record.next_due_at) == (slot, slot + HOUR)
