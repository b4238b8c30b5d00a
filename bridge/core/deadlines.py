"""Deadlines coming due: stall, reminders, timeouts, grace window, hint and heartbeat.

The clock is an input like any other: each handler here runs when its deadline passed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from bridge.core import presence, status_card, urging
from bridge.core.context import StepContext
from bridge.core.delivery import Line
from bridge.core.effects import (
    CardStatus,
    Dropped,
)
from bridge.core.lifecycle import abandon, cancel, conclude_grace, finish
from bridge.core.state import (
    Ending,
    ExecState,
    Outcome,
    PendingApproval,
    StopRequest,
)
from bridge.core.text import format_elapsed
from bridge.core.turn_events import flush_commentary, show_progress


def on_clock(ctx: StepContext) -> None:
    """Handle every due deadline, most important first (each handler moves its deadline)."""
    for _ in range(2 * len(presence.TIMER_ORDER)):
        due = [n for n, at in presence.deadlines(ctx.conv, ctx.timings).items() if at <= ctx.now]
        if not due:
            return
        _CLOCK_HANDLERS[min(due, key=presence.TIMER_ORDER.index)](ctx)


def _stale(ctx: StepContext) -> None:
    # Graded, never a silent kill: say how long it has been quiet; /stop is the user's call.
    # Text already written is shown now: a silent agent may have finished its answer.
    flush_commentary(ctx)
    turn = ctx.turn
    ctx.update(state=ExecState.STALE)
    silent = format_elapsed(ctx.now - turn.last_activity_at)
    if turn.activity is None:
        ctx.say("presence.stale_no_activity", {"silent": silent}, kind="stale", line=Line.HINT)
    else:
        activity = presence.activity_text(turn.activity)
        ctx.say(
            "presence.stale", {"silent": silent, "activity": activity}, kind="stale", line=Line.HINT
        )


def _stale_limit(ctx: StepContext) -> None:
    # Silent for a second window: end the round ourselves (the cancel is bounded too).
    cancel(
        ctx,
        Outcome.TIMED_OUT,
        "presence.stalled_ended",
        detail="no sign of life",
        ending=Ending.DEADLINE,
    )


def _cancel_notice(ctx: StepContext) -> None:
    stop = ctx.turn.stop
    assert stop is not None, "only while cancelling"
    ctx.update_turn(stop=StopRequest(stop.requested_at, said=True))
    ctx.say("presence.stopping", kind="stopping", line=Line.HINT)


def _cancel_limit(ctx: StepContext) -> None:
    abandon(
        ctx,
        "presence.stop_forced",
        detail="the agent never confirmed the stop",
        ending=Ending.USER_STOP,
    )


def _recovery_timeout(ctx: StepContext) -> None:
    finish(
        ctx,
        Outcome.FAILED,
        "presence.unrecoverable",
        detail="recovery timed out",
        ending=Ending.DEADLINE,
    )


def _approval_timeout(ctx: StepContext) -> None:
    first = presence.first_shown(ctx.conv.approvals)
    assert first is not None, "due only once a card was shown"
    waited = format_elapsed(ctx.now - first)  # how long the user has had the card
    cancel(
        ctx,
        Outcome.TIMED_OUT,
        "presence.approval_timed_out",
        {"waited": waited},
        detail="approval timed out",
        ending=Ending.APPROVAL_TIMEOUT,
        cards=CardStatus.EXPIRED,
    )


def _reply_timeout(ctx: StepContext) -> None:
    question = ctx.conv.question
    assert question is not None
    since = presence.waiting_since(question)
    assert since is not None, "due only once the card was shown"
    waited = format_elapsed(ctx.now - since)
    cancel(
        ctx,
        Outcome.TIMED_OUT,
        "presence.reply_timed_out",
        {"waited": waited},
        detail="reply timed out",
        ending=Ending.REPLY_TIMEOUT,
        cards=CardStatus.EXPIRED,
    )


def _approval_reminder(ctx: StepContext) -> None:
    half = ctx.timings.approval_timeout / 2
    first = presence.first_shown(ctx.conv.approvals)
    assert first is not None, "due only once a card was shown"
    approvals = tuple(
        replace(a, reminder_sent=True) if _shown_by(a, ctx.now - half) else a
        for a in ctx.conv.approvals
    )
    ctx.update(approvals=approvals)
    remaining = format_elapsed(first + ctx.timings.approval_timeout - ctx.now, round_up=True)
    who = urging.reminder_mentions(ctx, approval=True)
    params = {"remaining": remaining}
    ctx.say("presence.approval_reminder", params, kind="remind", line=Line.PAUSE, mentions=who)


def _reply_reminder(ctx: StepContext) -> None:
    question = ctx.conv.question
    assert question is not None
    since = presence.waiting_since(question)
    assert since is not None, "due only once the card was shown"
    ctx.update(question=replace(question, reminder_sent=True))
    left = since + ctx.timings.approval_timeout - ctx.now
    remaining = format_elapsed(left, round_up=True)
    who = urging.reminder_mentions(ctx, approval=False)
    params = {"remaining": remaining}
    ctx.say("presence.reply_reminder", params, kind="remind", line=Line.PAUSE, mentions=who)


def _shown_by(approval: PendingApproval, at: float) -> bool:
    since = presence.waiting_since(approval)
    return since is not None and since <= at


def _drain_timeout(ctx: StepContext) -> None:
    ctx.out.append(Dropped("runtime never confirmed the cancel", "TimerFired", ctx.turn.turn_id))
    abandon(
        ctx,
        "presence.stop_forced",
        detail="the agent never confirmed the cancel",
        ending=Ending.USER_STOP,
    )


def _flush_progress(ctx: StepContext) -> None:
    if ctx.turn.progress.commentary_held:
        flush_commentary(ctx)
    line = ctx.turn.progress.pending
    if line is not None:
        show_progress(ctx, line)


def _first_hint(ctx: StepContext) -> None:
    if status_card.in_card_style(ctx):
        status_card.show(ctx)  # the card appears, saying it works and for how long
    else:
        ctx.say("presence.running_hint", kind="hint", line=Line.HINT)
    ctx.update_turn(announced=True)


def _heartbeat(ctx: StepContext) -> None:
    if status_card.in_card_style(ctx):
        status_card.show(ctx)  # its elapsed time moves on; no line in the chat
    else:
        elapsed = format_elapsed(ctx.now - ctx.turn.started_at)
        ctx.say("presence.heartbeat", {"elapsed": elapsed}, kind="heartbeat", line=Line.HINT)
    ctx.update_turn(announced=True)


_CLOCK_HANDLERS: dict[str, Callable[[StepContext], None]] = {
    presence.STALE: _stale,
    presence.STALE_LIMIT: _stale_limit,
    presence.CANCEL_LIMIT: _cancel_limit,
    presence.CANCEL_NOTICE: _cancel_notice,
    presence.RECOVERY: _recovery_timeout,
    presence.APPROVAL_TIMEOUT: _approval_timeout,
    presence.REPLY_TIMEOUT: _reply_timeout,
    presence.FINISH_GRACE: conclude_grace,
    presence.DRAIN: _drain_timeout,
    presence.APPROVAL_REMINDER: _approval_reminder,
    presence.REPLY_REMINDER: _reply_reminder,
    presence.APPROVAL_URGE: urging.approval_urge,
    presence.REPLY_URGE: urging.reply_urge,
    presence.PROGRESS: _flush_progress,
    presence.FIRST_HINT: _first_hint,
    presence.HEARTBEAT: _heartbeat,
}
