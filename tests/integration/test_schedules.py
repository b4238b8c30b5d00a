"""Scheduled prompts over the real stack (emulator + bridge + scripted ACP agent): a schedule
that comes due while a round runs is skipped with its reason and runs once, under its
header, when the chat is idle again; missed occurrences are skipped, not stacked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bridge.devtools.emulator.records import ChatMessage
from bridge.i18n import Translator
from tests.integration.stack import running_stack

T = Translator("zh_CN")
SETTINGS: dict[str, object] = {"bridge_schedule_min_interval_seconds": 0.1}


async def test_a_schedule_due_during_a_round_runs_once_when_the_chat_is_idle(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, settings=SETTINGS) as stack:
        await stack.say("/every 500ms say tick")
        added = await stack.wait_text(lambda t: t.startswith("已添加定时任务 #1"))
        assert re.search(r"每 500ms", added)
        await stack.say("sleep 1600")  # a round that runs through three occurrences
        header = T("schedule.header", number=1, prompt="say tick")
        await stack.wait_text(lambda t: t == "tick", within=10.0)  # the run: a round
        texts = stack.texts()
        assert texts.count(header) == 1  # three occurrences passed meanwhile: one run
        assert texts.index(T("presence.ended_empty")) < texts.index(header)
        assert texts.index(header) < texts.index("tick")
        (record,) = await stack.demo.service.store.schedules()
        assert record.last_skip_reason == "running"
        assert record.last_run_at is not None
        assert record.next_due_at > record.last_run_at  # the next occurrence, not a backlog
        rendered = stack.demo.service.metrics.render().decode()
        assert 'bridge_schedule_runs_total{app="default",fate="skipped_running"}' in rendered

        await stack.say("/unschedule 1")
        await stack.wait_text(lambda t: t == T("schedule.removed", number=1))
        await stack.settled()
        assert await stack.demo.service.store.schedules() == []


async def test_issue_34_each_slot_runs_once_after_a_round_that_outlasted_one(
    tmp_path: Path,
) -> None:
    """The issue's /every 3s during a 5 s round, at a tenth of the scale: after the round
    the skipped slot runs once, then every slot once (but one the late run took the place
    of); never a second header for a slot, nor one posted before its slot (the double
    run's second header named the next)."""
    async with running_stack(tmp_path, settings=SETTINGS) as stack:
        await stack.say("/every 300ms say tick")
        await stack.wait_text(lambda t: t.startswith("已添加定时任务 #1"))
        await stack.say("sleep 500")
        header = T("schedule.header", number=1, prompt="say tick")

        def headers() -> list[ChatMessage]:
            return [m for m in stack.bot() if m.text == header]

        await stack.emu.wait_for(lambda: len(headers()) >= 4, timeout=15.0)
        await stack.say("/unschedule 1")
        await stack.wait_text(lambda t: t == T("schedule.removed", number=1))
        await stack.settled()
        posted = headers()
        slots = [float(str(m.uuid).rpartition(":")[2]) for m in posted]  # schedule:1:<slot>
        assert len(set(slots)) == len(slots), slots
        for message, slot in zip(posted, slots, strict=True):
            # 50 ms of slack for the two clocks (the bridge's monotonic, epoch-anchored; the
            # emulator's wall clock): a double run's header came a whole interval early.
            assert message.create_time_ms >= slot * 1000 - 50, (message.create_time_ms, slot)
        assert stack.texts().count("tick") == len(posted)  # one run per header


async def test_a_late_run_takes_the_place_of_the_next_occurrence_within_half_a_period(
    tmp_path: Path,
) -> None:
    """The issue's /every 3s during a 5 s round, at a third of the scale: the round covers
    the slot at +1 s and ends after +1.6 s; the late run of that slot then takes the place
    of the slot at +2 s (it would come less than half a period after it), and the next
    header is the slot at +3 s. Each header's uuid names its slot (schedule:1:<slot>)."""
    async with running_stack(tmp_path, settings=SETTINGS) as stack:
        await stack.say("say ready")  # the agent started first: the round below starts at once
        await stack.wait_text(lambda t: t == "ready", within=10.0)
        await stack.say("/every 1s say tick")
        await stack.wait_text(lambda t: t.startswith("已添加定时任务 #1"))
        await stack.say("sleep 1600")
        header = T("schedule.header", number=1, prompt="say tick")
        await stack.wait_text(lambda t: stack.texts().count("tick") == 2, within=10.0)
        await stack.say("/unschedule 1")
        await stack.wait_text(lambda t: t == T("schedule.removed", number=1))
        await stack.settled()

        texts = stack.texts()
        assert texts[0] == "ready"
        assert texts[1].startswith("已添加定时任务 #1")
        assert texts[2:] == [
            T("presence.ended_empty"),  # the round of "sleep 1600"
            header,  # the late run of the slot at +1 s
            "tick",
            header,  # the slot at +3 s: the one at +2 s was skipped, not stacked
            "tick",
            T("schedule.removed", number=1),
        ]
        slots = [float(str(m.uuid).rpartition(":")[2]) for m in stack.bot() if m.text == header]
        assert len(slots) == 2
        assert slots[1] - slots[0] == pytest.approx(2.0, abs=1e-3)
