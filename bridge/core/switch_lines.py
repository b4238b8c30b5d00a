"""`/project`, `/agent`, `/cd`, `/sessions` and `/resume`: who may move the conversation,
when, and the line each answer gets.

A move needs a new session (another agent, another folder, an earlier session), so it is
refused while a round runs rather than queued: the user sees at once why nothing moved and
can `/stop` first. The session is let go at once; if the move fails, the next message opens
the same session again from the store's binding.
"""

from __future__ import annotations

from bridge.core.clicks import may_answer
from bridge.core.context import StepContext
from bridge.core.effects import AskSwitch, NewSession, PostText
from bridge.core.inputs import (
    Command,
    CommandName,
    SessionCloseRequested,
    SwitchAnswered,
    SwitchResult,
)
from bridge.core.state import ExecState
from bridge.core.text import Params

_KIND = {
    CommandName.PROJECT: "project",
    CommandName.AGENT: "agent",
    CommandName.CD: "cd",
    CommandName.SESSIONS: "resume",
    CommandName.RESUME: "resume",
}


def on_switch_command(ctx: StepContext, cmd: Command) -> None:
    mid, kind = cmd.message_id, _KIND[cmd.name]
    idem = f"{mid}:{kind}"
    choice = "" if cmd.name is CommandName.SESSIONS else cmd.arg
    if choice:
        turn = ctx.conv.turn
        if turn is not None and not turn.terminal and not may_answer(ctx.conv, cmd.sender):
            ctx.emit(PostText("command.switch_not_yours", {}, mid, idem))
            return
        if turn is not None:
            ctx.emit(PostText("command.switch_busy", {}, mid, idem))
            return
        ctx.update(session_id=None)
    ctx.emit(AskSwitch(mid, kind, choice))


def switch_lines(ctx: StepContext, event: SwitchAnswered) -> None:
    mid, kind = event.message_id, event.kind
    idem = f"{mid}:{kind}"
    listed = "\n".join(event.entries)
    params: Params = {
        "current": event.current,
        "choice": event.choice,
        "entries": listed,
        "detail": event.detail,
    }
    result = event.result
    if result is SwitchResult.LISTED and not event.entries:
        key = f"command.{kind}_none"
    else:
        key = f"command.{kind}_{result.value}"
    ctx.emit(PostText(key, params, mid, idem))


def on_session_close(ctx: StepContext, event: SessionCloseRequested) -> None:
    """The operator lets the session go (like /new, no chat line): only between rounds."""
    if ctx.conv.state is not ExecState.IDLE or ctx.conv.queue:
        ctx.drop(event, "a round is running")  # never cut from outside; /stop is the way
        return
    ctx.update(session_id=None)
    ctx.emit(NewSession(reason="operator"))
