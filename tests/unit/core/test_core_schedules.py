"""Scheduled prompts in the core (seed 000): the gate reads the execution state — never
"the agent is alive" — and a run is a turn like any other. The clock is driven by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from bridge.core.effects import (
    AnnounceSchedule,
    CancelTurn,
    ManageSchedules,
    PostApprovalCard,
    React,
    ScheduleSkipped,
    StartTurn,
)
from bridge.core.inputs import Command, CommandName, ScheduledRun, ScheduleDue
from bridge.core.schedules import (
    Gate,
    excerpt,
    following,
    format_interval,
    gate,
    next_after,
    parse_interval,
    split_request,
)
from bridge.core.state import Conversation, ExecState, Options
from bridge.runtime.events import (
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    RuntimeExited,
    StopReason,
    TurnEnded,
)
from bridge.schedules.times import parse_at
from tests.unit.core.core_driver import ALICE, SID, Driver, T, keys, of_type
from tests.unit.core.test_core_waiting import QUESTION

BOB = "ou_bob"
ASK = PermissionRequested(
    SID, "r1", "Run tests", (PermissionOption("allow", "Allow", PermissionKind.ALLOW_ONCE),)
)


def due(d: Driver, at: float, sid: int = 2, prompt: str = "check the build") -> list[object]:
    return list(d.feed(ScheduleDue(sid, BOB, prompt), at=at))


def skipped(effects: list[object]) -> list[str]:
    return [e.reason for e in effects if isinstance(e, ScheduleSkipped)]


def test_an_idle_conversation_runs_the_schedule_as_a_turn_of_its_creator() -> None:
    d = Driver()
    out = due(d, 5.0)
    (announce,) = of_type(out, AnnounceSchedule)
    assert announce.requester == BOB
    assert announce.key == "schedule.header"
    assert dict(announce.params) == {"number": 2, "prompt": "check the build"}
    assert d.conv.state is ExecState.IDLE  # nothing starts before the header is out

    run = d.feed(ScheduledRun("om_header", 2, BOB, "check the build"), at=5.1)
    (start,) = of_type(run, StartTurn)
    assert start.text == "check the build"
    assert not of_type(run, React)  # the header is the bridge's own message: no ack
    assert d.conv.turn is not None
    assert d.conv.turn.requester == BOB  # approvals and /stop follow the creator
    assert d.conv.turn.message_id == "om_header"  # its lines answer the header


def test_due_during_a_running_turn_is_skipped_as_running() -> None:
    d = Driver()
    d.start()
    assert skipped(due(d, 3.0)) == ["running"]
    d.advance(T.stale + 1)  # an agent silent past the stale window is still running
    assert d.conv.state is ExecState.STALE
    assert skipped(due(d, d.now)) == ["running"]


def test_due_during_an_approval_is_skipped_until_the_wait_is_stale() -> None:
    d = Driver()
    d.start()
    d.ask(ASK, at=10.0)
    assert d.conv.state is ExecState.WAITING_APPROVAL
    assert skipped(due(d, 20.0)) == ["waiting_on_user"]
    assert skipped(due(d, 10.0 + T.approval_timeout - 1)) == ["waiting_on_user"]

    # Past its timeout the wait is stale: the run is allowed; the wait ends as its timer
    # would have ended it (the person told), and the run waits for the agent to let go.
    out = due(d, 10.0 + T.approval_timeout + 5)
    assert "presence.approval_timed_out" in keys(out)
    assert of_type(out, CancelTurn)
    assert of_type(out, AnnounceSchedule)
    run = d.feed(ScheduledRun("om_header", 2, BOB, "check the build"))
    assert not of_type(run, StartTurn)  # queued behind the round letting go, no line
    assert keys(run) == []
    ended = d.feed(TurnEnded(SID, stop_reason=StopReason.CANCELLED))
    (start,) = of_type(ended, StartTurn)
    assert start.turn_id == "om_header"


def test_due_during_a_question_past_its_timeout_is_allowed_too() -> None:
    d = Driver()
    d.start()
    assert gate(d.conv, 1.0, T) is Gate.RUNNING
    d.ask(QUESTION, at=10.0)
    assert gate(d.conv, 11.0, T) is Gate.WAITING_ON_USER
    assert gate(d.conv, 10.0 + T.approval_timeout, T) is Gate.STALE_WAIT


def test_a_wait_whose_card_is_not_shown_yet_is_never_stale() -> None:
    # The person has not been asked yet (the card waits for Feishu): the wait is young.
    d = Driver()
    d.start()
    (card,) = of_type(d.feed(ASK, at=10.0), PostApprovalCard)
    assert gate(d.conv, 10.0 + 2 * T.approval_timeout, T) is Gate.WAITING_ON_USER
    d.shown([card], at=10.0 + 2 * T.approval_timeout)
    assert gate(d.conv, 10.0 + 3 * T.approval_timeout - 1, T) is Gate.WAITING_ON_USER
    assert gate(d.conv, 10.0 + 3 * T.approval_timeout, T) is Gate.STALE_WAIT


def test_due_during_the_grace_window_waits_for_the_round_to_end() -> None:
    d = Driver()
    d.start()
    d.feed(TurnEnded(SID, stop_reason=StopReason.MAX_TOKENS), at=4.0)
    assert d.conv.state is ExecState.FINISHING
    assert skipped(due(d, 5.0)) == ["finishing"]
    d.advance(4.0 + T.finish_grace)
    assert d.conv.state is ExecState.IDLE
    assert of_type(due(d, d.now), AnnounceSchedule)


def test_due_while_a_stop_lands_or_the_agent_recovers_is_skipped() -> None:
    d = Driver()
    d.start()
    d.feed(Command(CommandName.STOP, "c1", ALICE), at=2.0)
    assert skipped(due(d, 3.0)) == ["cancelling"]

    r = Driver()
    r.start()
    r.feed(RuntimeExited(SID, returncode=-9), at=3.0)
    assert r.conv.state is ExecState.RECOVERING
    assert skipped(due(r, 4.0)) == ["unsynced"]


def test_a_closed_conversation_never_runs_a_schedule() -> None:
    assert gate(Conversation(state=ExecState.CLOSED), 0.0, T) is Gate.CLOSED


def test_a_run_whose_header_came_after_a_message_waits_behind_it() -> None:
    d = Driver()
    assert of_type(due(d, 1.0), AnnounceSchedule)
    d.start("m1", at=1.5)  # a person wrote while the header was being posted
    run = d.feed(ScheduledRun("om_header", 2, BOB, "check the build"), at=2.0)
    assert not of_type(run, StartTurn)
    assert [q.message_id for q in d.conv.queue] == ["om_header"]
    # A queue waiting makes the conversation not idle for another schedule either.
    assert gate(d.conv, 2.0, T) is Gate.RUNNING


def test_a_redelivered_run_starts_nothing_twice() -> None:
    d = Driver()
    d.feed(ScheduledRun("om_header", 2, BOB, "x"), at=1.0)
    again = d.feed(ScheduledRun("om_header", 2, BOB, "x"), at=1.1)
    assert not of_type(again, StartTurn)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        (CommandName.EVERY, "2h check"),
        (CommandName.AT, "09:30 check"),
        (CommandName.SCHEDULES, ""),
        (CommandName.UNSCHEDULE, "3"),
    ],
)
def test_schedule_commands_go_to_the_engine_with_the_senders_authority(
    name: CommandName, raw: str
) -> None:
    d = Driver(Conversation(options=Options(approvers=frozenset({BOB}))))
    (alice,) = of_type(d.feed(Command(name, "c1", ALICE, arg=raw)), ManageSchedules)
    assert (alice.command, alice.arg, alice.manage_all) == (name.value, raw, False)
    (bob,) = of_type(d.feed(Command(name, "c2", BOB, arg=raw)), ManageSchedules)
    assert bob.manage_all


# -- the clock arithmetic --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1.5h", 5400), ("250ms", 0.25)],
)
def test_intervals_read(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "h", "-1h", "0m", "5y", "400d", "1h30m"])
def test_unreadable_intervals_are_refused(text: str) -> None:
    assert parse_interval(text) is None


def test_intervals_are_shown_in_their_shortest_spelling() -> None:
    assert [format_interval(s) for s in (86400, 7200, 1800, 90, 0.25)] == [
        "1d",
        "2h",
        "30m",
        "90s",
        "250ms",
    ]


def test_a_clock_time_is_its_next_occurrence_in_the_zone() -> None:
    shanghai = timezone(timedelta(hours=8))
    now = datetime(2030, 6, 1, 10, 0, tzinfo=shanghai).timestamp()
    later_today = parse_at("10:30", now, shanghai)
    assert later_today == datetime(2030, 6, 1, 10, 30, tzinfo=shanghai).timestamp()
    tomorrow = parse_at("09:30", now, shanghai)
    assert tomorrow == datetime(2030, 6, 2, 9, 30, tzinfo=shanghai).timestamp()
    assert parse_at("10:00", now, shanghai) == now + 86400  # "now" is already past


def test_an_iso_time_reads_in_the_zone_unless_it_names_its_offset() -> None:
    shanghai = timezone(timedelta(hours=8))
    now = datetime(2030, 6, 1, tzinfo=UTC).timestamp()
    local = parse_at("2030-06-02T09:30", now, shanghai)
    assert local == datetime(2030, 6, 2, 1, 30, tzinfo=UTC).timestamp()
    assert parse_at("2030-06-02T09:30+00:00", now, shanghai) == local + 8 * 3600
    assert parse_at("2020-01-01T00:00", now, shanghai) is None  # past
    assert parse_at("tomorrow", now, shanghai) is None
    assert split_request("2030-06-02 09:30 ship it") == ("2030-06-02T09:30", "ship it")
    assert split_request("09:30 ship it") == ("09:30", "ship it")


def test_missed_occurrences_make_one_run_never_a_stack() -> None:
    assert next_after(100.0, 60.0, 50.0) == 100.0  # not due yet
    assert next_after(100.0, 60.0, 100.0) == 160.0
    assert next_after(100.0, 60.0, 400.0) == 460.0  # five missed: one run, then the grid


def test_a_late_run_takes_the_place_of_a_next_occurrence_within_half_a_period() -> None:
    # Issue: /every 3s, its slot at 3 skipped by a 5 s turn, caught up at 5: the slot at 6
    # would run 1 s after it; it is skipped, the grid goes on at 9.
    assert following(3.0, 3.0, 5.0) == 9.0
    assert following(3.0, 3.0, 4.4) == 6.0  # 1.6 s before the next: it stays
    assert following(3.0, 3.0, 4.5) == 6.0  # exactly half a period before: it stays
    assert following(3.0, 3.0, 4.5 + 1e-6) == 9.0
    # Several missed (3, 6 and 9 while busy): one run, and 12 only if far enough from it.
    assert following(3.0, 3.0, 10.0) == 12.0
    assert following(3.0, 3.0, 11.0) == 15.0
    assert following(3600.0, 3600.0, 5 * 3600.0 + 1900.0) == 7 * 3600.0
    # On time, or a few ms late: the next occurrence is a whole period away and stays.
    assert following(3.0, 3.0, 3.0) == 6.0
    assert following(3.0, 3.0, 3.004) == 6.0


def test_an_excerpt_is_one_short_line() -> None:
    assert excerpt("check\nthe   build") == "check the build"
    assert len(excerpt("x" * 100)) == 40
