"""The machine's part in scheduled prompts: the gate applied to a due schedule, its run
started as a turn, and the answers to /every, /at, /schedules and /unschedule."""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.deadlines import on_clock
from bridge.core.effects import AnnounceSchedule, ManageSchedules, PostText, ScheduleSkipped
from bridge.core.inputs import (
    Command,
    ScheduleAnswered,
    ScheduledRun,
    ScheduleDue,
    ScheduleInput,
)
from bridge.core.lifecycle import start_turn
from bridge.core.schedules import Gate, excerpt, gate
from bridge.core.state import RECENT_IDS, QueuedMessage


def on_schedule_input(ctx: StepContext, event: ScheduleInput) -> None:
    match event:
        case ScheduleDue():
            on_schedule_due(ctx, event)
        case ScheduledRun() if event.message_id in ctx.conv.recent_message_ids:
            ctx.drop(event, "duplicate message")
        case ScheduledRun():
            recent = (*ctx.conv.recent_message_ids, event.message_id)[-RECENT_IDS:]
            ctx.update(recent_message_ids=recent)
            on_scheduled_run(ctx, event)
        case ScheduleAnswered():
            on_schedule_answered(ctx, event)


def on_schedule_command(ctx: StepContext, cmd: Command) -> None:
    """/every, /at, /schedules, /unschedule: the engine does them against the store. Anyone
    the allow-lists let in may add one (its runs are theirs); removing is for the creator,
    or for a configured approver (`manage_all`)."""
    manage_all = cmd.sender in ctx.conv.options.approvers
    ctx.emit(ManageSchedules(cmd.message_id, cmd.sender, cmd.name.value, cmd.arg, manage_all))


def on_schedule_due(ctx: StepContext, event: ScheduleDue) -> None:
    verdict = gate(ctx.conv, ctx.now, ctx.timings)
    if not verdict.allows:
        ctx.emit(ScheduleSkipped(event.schedule_id, verdict.value))
        return
    if verdict is Gate.STALE_WAIT:
        # The wait is past its timeout: it ends now as its timer would have ended it (the
        # person is told), and the run follows once the agent has let the round go.
        on_clock(ctx)
    params: dict[str, str | int] = {"number": event.schedule_id, "prompt": excerpt(event.prompt)}
    ctx.emit(AnnounceSchedule(event.schedule_id, event.requester, event.prompt, params=params))


def on_scheduled_run(ctx: StepContext, event: ScheduledRun) -> None:
    """The header is out: the run is a turn like any other, answering the header. A round
    that began between the gate and the header (a message, a stale wait still letting go)
    goes first; the run waits behind it, silently (the header already said it is coming)."""
    if ctx.conv.turn is None:
        start_turn(ctx, event.message_id, event.requester, event.text, announce=False)
        return
    queued = QueuedMessage(event.message_id, event.requester, event.text, ctx.now)
    ctx.update(queue=(*ctx.conv.queue, queued))


def on_schedule_answered(ctx: StepContext, event: ScheduleAnswered) -> None:
    mid = event.message_id
    key = f"schedule.{event.result.value}"
    ctx.emit(PostText(key, dict(event.params), mid, f"{mid}:schedule"))
