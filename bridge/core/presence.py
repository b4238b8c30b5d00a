"""Presence policy: which deadlines a state implies, and which line each switch shows.

The machine asks this module *when* something is due and *what* to say; it never decides
timing on its own. All times are float seconds on the caller's clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from bridge.core.state import (
    RUNNING_STATES,
    Activity,
    ActivityKind,
    CardStage,
    Conversation,
    ExecState,
    PendingApproval,
    PendingQuestion,
    ProgressLine,
    Prompt,
    Urgency,
)
from bridge.core.text import Text
from bridge.runtime.events import PlanEntry, StopReason


class _TimingSettings(Protocol):
    bridge_first_hint_seconds: float
    bridge_heartbeat_seconds: float
    bridge_stale_seconds: float
    bridge_approval_timeout_seconds: float
    bridge_finish_grace_seconds: float
    bridge_cancel_notice_seconds: float
    bridge_cancel_limit_seconds: float
    bridge_urgent_seconds: float | None


@dataclass(frozen=True)
class Timings:
    first_hint: float = 3.0  # one running hint if nothing real was shown by then
    heartbeat: float = 60.0  # a heartbeat after this much silence towards the user
    stale: float = 600.0  # no sign of life from the runtime for this long → STALE
    approval_timeout: float = 1800.0  # also bounds waiting for a reply to a question
    finish_grace: float = 3.0  # absorbs a follow-up after a non-final stop reason
    progress_interval: float = 3.0  # least time between two relayed progress lines
    cancel_notice: float = 5.0  # a cancel not confirmed by then: "still stopping"
    cancel_limit: float = 30.0  # a cancel not confirmed by then: end it ourselves, restart
    # Card style: the card's elapsed time moves on at least this often while nothing else
    # changes it (a change in place, not a line: an agent that only thinks still shows it
    # is alive, and a card frozen for a minute would read as stuck).
    card_tick: float = 3.0
    # Card style: an answer that has streamed this long gets its card (one that is done
    # sooner needs none), so what the agent writes is seen within about a second.
    card_after_text: float = 1.0
    # A card unanswered this long after it was shown urges those who may answer it, once
    # (`Options.urgency`); None: at the reminder, half the approval timeout.
    urge: float | None = None

    @property
    def urge_after(self) -> float:
        return self.approval_timeout / 2 if self.urge is None else self.urge

    @classmethod
    def from_settings(cls, settings: _TimingSettings) -> Timings:
        return cls(
            first_hint=settings.bridge_first_hint_seconds,
            heartbeat=settings.bridge_heartbeat_seconds,
            stale=settings.bridge_stale_seconds,
            approval_timeout=settings.bridge_approval_timeout_seconds,
            finish_grace=settings.bridge_finish_grace_seconds,
            cancel_notice=settings.bridge_cancel_notice_seconds,
            cancel_limit=settings.bridge_cancel_limit_seconds,
            urge=settings.bridge_urgent_seconds,
        )


# What an approval card shows of a command (the Feishu card view cuts there too).
CARD_DETAIL_LIMIT = 1500

# Timer names, in the order the machine handles them when several are due at once:
# endings before reminders, and a stale verdict before any "still working" line.
STALE = "stale"
STALE_LIMIT = "stale_limit"
CANCEL_LIMIT = "cancel_limit"
RECOVERY = "recovery"
APPROVAL_TIMEOUT = "approval_timeout"
REPLY_TIMEOUT = "reply_timeout"
FINISH_GRACE = "finish_grace"
DRAIN = "drain"
CANCEL_NOTICE = "cancel_notice"
APPROVAL_REMINDER = "approval_reminder"
REPLY_REMINDER = "reply_reminder"
APPROVAL_URGE = "approval_urge"
REPLY_URGE = "reply_urge"
PROGRESS = "progress"
FIRST_HINT = "first_hint"
HEARTBEAT = "heartbeat"
TIMER_ORDER = (
    STALE,
    STALE_LIMIT,
    CANCEL_LIMIT,
    RECOVERY,
    APPROVAL_TIMEOUT,
    REPLY_TIMEOUT,
    FINISH_GRACE,
    DRAIN,
    CANCEL_NOTICE,
    APPROVAL_REMINDER,
    REPLY_REMINDER,
    # After the reminders: due at the same moment, an urge by @-mention rides on the
    # reminder line (one line), and the urgent notification follows it.
    APPROVAL_URGE,
    REPLY_URGE,
    PROGRESS,
    FIRST_HINT,
    HEARTBEAT,
)


def deadlines(conv: Conversation, timings: Timings) -> dict[str, float]:
    """Every deadline the current state implies. Timers mirror this; nothing else sets them."""
    turn = conv.turn
    found: dict[str, float] = {}
    if turn is None:
        return found
    state = conv.state
    if state in RUNNING_STATES:
        # Silence is the agent's only once it was asked: a prompt held back by the bridge
        # (its chat's lane behind a post waiting out Feishu) is not the agent's to answer,
        # and an agent that never starts is the runtime's start timeout's to report.
        if turn.prompt_sent_at is not None:
            found[STALE] = max(turn.last_activity_at, turn.prompt_sent_at) + timings.stale
        # "Working on it" only once the runtime took the prompt: never claim work that a
        # runtime still starting (or failing to) may never do.
        if turn.session_id is not None:
            if not turn.announced:
                # After a slow agent start, leave the runtime a moment to answer by itself
                # before saying "working on it" (a hint a blink before the reply is noise).
                sent = turn.prompt_sent_at if turn.prompt_sent_at is not None else turn.started_at
                found[FIRST_HINT] = max(
                    turn.started_at + timings.first_hint, sent + timings.first_hint / 2
                )
                if turn.card.text_since is not None:
                    streamed = turn.card.text_since + timings.card_after_text
                    found[FIRST_HINT] = min(found[FIRST_HINT], streamed)
            else:  # a heartbeat follows the hint or real progress, never comes first
                beat = timings.heartbeat
                if turn.card.stage is CardStage.SHOWN:
                    beat = min(beat, timings.card_tick)
                found[HEARTBEAT] = turn.last_posted_at + beat
        progress = turn.progress
        waiting = progress.pending is not None or progress.commentary_held
        if waiting and progress.last_at is not None:
            found[PROGRESS] = progress.last_at + timings.progress_interval
    elif state is ExecState.WAITING_APPROVAL and conv.approvals:
        # Only a card on the chat is waited on: one still waiting for its turn to be posted
        # has asked nobody yet, so no reminder or timeout runs for it.
        first = first_shown(conv.approvals)
        if first is not None:
            found[APPROVAL_TIMEOUT] = first + timings.approval_timeout
        unreminded = first_shown(a for a in conv.approvals if not a.reminder_sent)
        if unreminded is not None:
            found[APPROVAL_REMINDER] = unreminded + timings.approval_timeout / 2
        unurged = first_shown(a for a in conv.approvals if not a.urged)
        if unurged is not None and conv.options.urgency is not Urgency.OFF:
            found[APPROVAL_URGE] = unurged + timings.urge_after
    elif state is ExecState.WAITING_REPLY and conv.question is not None:
        since = waiting_since(conv.question)
        if since is not None:
            found[REPLY_TIMEOUT] = since + timings.approval_timeout
            if not conv.question.reminder_sent:
                found[REPLY_REMINDER] = since + timings.approval_timeout / 2
            if not conv.question.urged and conv.options.urgency is not Urgency.OFF:
                found[REPLY_URGE] = since + timings.urge_after
    elif state is ExecState.STALE:
        # Silent for a second window: the bridge ends the round itself (never "running"
        # forever, e.g. a prompt whose result never comes after a complete answer).
        found[STALE_LIMIT] = turn.last_activity_at + 2 * timings.stale
    elif state is ExecState.CANCELLING and turn.stop is not None:
        if not turn.stop.said:
            found[CANCEL_NOTICE] = turn.stop.requested_at + timings.cancel_notice
        found[CANCEL_LIMIT] = turn.stop.requested_at + timings.cancel_limit
    elif state is ExecState.FINISHING and turn.end is not None:
        if not turn.end.posted:
            found[FINISH_GRACE] = turn.end.ended_at + timings.finish_grace
        elif turn.prompt is not Prompt.DONE:
            # A cancel that never lands must not hold the queue forever.
            found[DRAIN] = turn.end.ended_at + timings.cancel_limit
    elif state is ExecState.RECOVERING and turn.recovering_since is not None:
        found[RECOVERY] = turn.recovering_since + timings.stale
    return found


def waiting_since(request: PendingApproval | PendingQuestion) -> float | None:
    """When the user began to be waited on for `request`: the moment its card was on the
    chat, None while it has not been shown."""
    return request.shown_at


def first_shown(requests: Iterable[PendingApproval]) -> float | None:
    """The earliest moment one of `requests` was shown, None when none has been."""
    shown = [at for request in requests if (at := waiting_since(request)) is not None]
    return min(shown, default=None)


def activity_text(activity: Activity | None) -> str | Text:
    if activity is None:
        return Text("activity.none")
    if activity.kind is ActivityKind.TOOL and activity.title:
        return activity.title
    return Text(f"activity.{activity.kind.value}")


def tool_progress(title: str) -> ProgressLine:
    return ProgressLine("progress.tool", {"title": title})


def plan_progress(entries: tuple[PlanEntry, ...]) -> ProgressLine | None:
    """ "Plan 2/5: <current step>", or None when no step is current (nothing worth saying)."""
    current = next((e for e in entries if e.status == "in_progress"), None)
    current = current or next((e for e in entries if e.status == "pending"), None)
    if current is None:
        return None
    done = sum(1 for e in entries if e.status == "completed")
    return ProgressLine(
        "progress.plan", {"done": done, "total": len(entries), "current": current.content}
    )


# The end line for each non-final stop reason (shown after the grace window).
STOP_REASON_KEYS: dict[StopReason, str] = {
    StopReason.MAX_TOKENS: "presence.max_tokens",
    StopReason.MAX_TURN_REQUESTS: "presence.max_turn_requests",
    StopReason.REFUSAL: "presence.refusal",
}

STATUS_KEYS: dict[ExecState, str] = {state: f"status.{state.value}" for state in ExecState}
