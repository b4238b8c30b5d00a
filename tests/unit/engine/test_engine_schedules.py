"""Scheduled prompts through the real engine (core, actors, executor, scheduler, store) over
the recording fakes. The clock is the harness's: a test moves it and asks the scheduler to
look (`check`), as its timer would."""

from __future__ import annotations

from bridge.store.port import ScheduleKind
from tests.unit.engine.engine_fakes import ALICE, CHAT, Call, Harness, T

HOUR = 3600.0
BOB = "ou_bob"


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
