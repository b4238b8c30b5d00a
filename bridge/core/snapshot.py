"""What a conversation's status says: the operator snapshot, the /status line, /status in
full (what the session runs on and how full its context is) and the usage footer.

`revision` / `projection_epoch` numbering is added outside, by the engine.
"""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.effects import PostText
from bridge.core.inputs import StatusAnswered
from bridge.core.presence import STATUS_KEYS, activity_text
from bridge.core.state import Conversation, ExecState
from bridge.core.text import Params, Text, format_elapsed
from bridge.runtime.events import Usage

# The run lifecycle's phase (seeds 002/004), shown statically: never guessed. `unsynced`: the
# bridge cannot vouch for the runtime (the agent is restarting, its session reloading).
PHASES: dict[ExecState, str] = {
    ExecState.IDLE: "idle",
    ExecState.WAITING_RESPONSE: "executing",
    ExecState.STREAMING: "executing",
    ExecState.WAITING_APPROVAL: "executing",
    ExecState.WAITING_REPLY: "executing",
    ExecState.STALE: "executing",
    ExecState.FINISHING: "finishing",
    ExecState.CANCELLING: "cancelling",
    ExecState.RECOVERING: "unsynced",
    ExecState.CLOSED: "closed",
}
# Whose move it is: the agent's (working, or owing a confirmation), the user's (an approval,
# a reply, or simply their next message), the bridge's (restarting the agent), or nobody's.
NEXT_MOVES: dict[ExecState, str] = {
    ExecState.IDLE: "user",
    ExecState.WAITING_RESPONSE: "agent",
    ExecState.STREAMING: "agent",
    ExecState.WAITING_APPROVAL: "user",
    ExecState.WAITING_REPLY: "user",
    ExecState.STALE: "agent",
    ExecState.FINISHING: "agent",
    ExecState.CANCELLING: "agent",
    ExecState.RECOVERING: "bridge",
    ExecState.CLOSED: "nobody",
}


def snapshot(conv: Conversation) -> dict[str, object]:
    """A JSON-ready view of the execution state; holds no message text. Ages (elapsed,
    silent for) are not in it: they change every second, so readers derive them from the
    timestamps at read time (`Projection.snapshot`)."""
    turn = conv.turn
    approval = conv.approvals[0] if conv.approvals else None
    last = conv.last_terminal
    return {
        "state": conv.state.value,
        "phase": phase(conv),
        "next_move": NEXT_MOVES[conv.state],
        "session_id": conv.session_id,
        "turn_id": turn.turn_id if turn else None,
        "requester": turn.requester if turn else None,
        "started_at": turn.started_at if turn else None,
        "last_activity": (
            {"kind": turn.activity.kind.value, "title": turn.activity.title}
            if turn and turn.activity
            else None
        ),
        "last_activity_at": turn.last_activity_at if turn else None,
        "outcome": turn.end.outcome.value if turn and turn.end else None,
        "queue_length": len(conv.queue),
        "pending_approval": (
            {
                "request_id": approval.request_id,
                "title": approval.title,
                "asked_at": approval.asked_at,
                "shown_at": approval.shown_at,  # None while its card waits for Feishu
                "reminder_sent": approval.reminder_sent,
                "urged": approval.urged,  # 加急 (or @-mention) sent to who may answer
                "count": len(conv.approvals),
            }
            if approval
            else None
        ),
        "pending_question": (
            {
                "request_id": conv.question.request_id,
                "asked_at": conv.question.asked_at,
                "shown_at": conv.question.shown_at,
                "urged": conv.question.urged,
            }
            if conv.question
            else None
        ),
        "last_terminal": (
            {
                "turn_id": last.turn_id,
                "outcome": last.outcome.value,
                "ending": last.ending.value if last.ending else None,
                "ended_at": last.ended_at,
            }
            if last
            else None
        ),
    }


def phase(conv: Conversation) -> str:
    """The run lifecycle's phase (`PHASES`, with a stop still landing read as cancelling)."""
    turn = conv.turn
    if turn is not None and turn.stop is not None and not turn.terminal:
        return "cancelling"  # a stop was asked for and has not landed yet
    return PHASES[conv.state]


def status_line(conv: Conversation, now: float) -> tuple[str, Params]:
    """The /status reply: one key per state, with what that state can honestly say."""
    key = STATUS_KEYS[conv.state]
    turn = conv.turn
    if turn is None or conv.state in (ExecState.IDLE, ExecState.CLOSED):
        return key, {}
    queue = len(conv.queue)
    elapsed = format_elapsed(now - turn.started_at)
    match conv.state:
        case ExecState.WAITING_APPROVAL if conv.approvals:
            first = conv.approvals[0]
            waited = format_elapsed(now - first.asked_at)
            return key, {"title": first.title, "waited": waited, "queue": queue}
        case ExecState.WAITING_REPLY if conv.question is not None:
            return key, {"waited": format_elapsed(now - conv.question.asked_at), "queue": queue}
        case ExecState.STREAMING:
            activity = activity_text(turn.activity)
            return key, {"elapsed": elapsed, "activity": activity, "queue": queue}
        case ExecState.STALE:
            silent = format_elapsed(now - turn.last_activity_at)
            activity = activity_text(turn.activity)
            return key, {"silent": silent, "activity": activity, "queue": queue}
        case ExecState.FINISHING:
            return key, {"queue": queue}
        case _:  # WAITING_RESPONSE, RECOVERING
            return key, {"elapsed": elapsed, "queue": queue}


UNKNOWN = Text("status.unknown")
NO_SESSION = Text("status.no_session")  # the next message opens one


def status_lines(ctx: StepContext, event: StatusAnswered) -> None:
    mid, facts = event.message_id, event.facts
    key, params = status_line(ctx.conv, ctx.now)
    full = {
        "state": Text(key, params),
        "agent": facts.agent or UNKNOWN,
        "folder": facts.folder or UNKNOWN,
        "mode": facts.mode or UNKNOWN,
        "model": facts.model or UNKNOWN,
        "title": facts.title or (UNKNOWN if ctx.conv.session_id else NO_SESSION),
        "usage": usage_text(facts.usage) if facts.usage else UNKNOWN,
    }
    ctx.emit(PostText("command.status", full, mid, f"{mid}:status"))


def usage_text(usage: Usage, prefix: str = "usage.context") -> Text:
    """ "12.3k / 200k (6%)", with the session's cost when the agent reports one."""
    percent = round(100 * usage.used / usage.size) if usage.size else 0
    params: dict[str, str | int | Text] = {
        "used": tokens(usage.used),
        "size": tokens(usage.size),
        "percent": percent,
    }
    if usage.cost is None:
        return Text(prefix, params)
    params["cost"] = f"{usage.cost:.2f} {usage.currency or ''}".strip()
    return Text(f"{prefix}_cost", params)


def footer(ctx: StepContext) -> Text | None:
    """The usage footer under a turn's last message (BRIDGE_USAGE_FOOTER), when the agent
    reported its context use in this conversation."""
    usage = ctx.conv.usage
    if not ctx.conv.options.usage_footer or usage is None:
        return None
    return usage_text(usage, "usage.footer")


def tokens(count: int) -> str:
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k".replace(".0k", "k")
    return f"{count / 1_000_000:.1f}M".replace(".0M", "M")
