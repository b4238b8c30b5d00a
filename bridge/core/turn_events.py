"""Runtime turn events: signs of life, progress, requests, endings and crashes."""

from __future__ import annotations

from bridge.core import long_answer, presence, status_card
from bridge.core.context import StepContext
from bridge.core.delivery import Line, Supersede, presence_group
from bridge.core.effects import (
    AnswerPermission,
    AnswerQuestion,
    CancelTurn,
    CardStatus,
    PostApprovalCard,
    PostQuestion,
    PostText,
    RelayAgentText,
)
from bridge.core.files import note_diff, note_offered
from bridge.core.lifecycle import close_pending, confirm_stop, finish, resume, settle
from bridge.core.state import (
    RUNNING_STATES,
    Activity,
    ActivityKind,
    Ending,
    ExecState,
    Outcome,
    PendingApproval,
    PendingQuestion,
    ProgressLine,
    Prompt,
    Turn,
    TurnEnd,
)
from bridge.core.text import NOTHING_WRITTEN, Params
from bridge.core.urging import pause_mentions
from bridge.runtime.events import (
    AnswerRewound,
    DiffReported,
    FileOffered,
    MessageChunk,
    PermissionRequested,
    PlanUpdated,
    PromptSent,
    QuestionAsked,
    RuntimeExited,
    RuntimeFailed,
    StopReason,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
    TurnEvent,
)


def refuse_request(ctx: StepContext, event: object) -> None:
    # A request nobody will show must still be answered, or the agent hangs on it.
    if isinstance(event, PermissionRequested):
        ctx.emit(AnswerPermission(event.request_id, None))
    elif isinstance(event, QuestionAsked):
        ctx.emit(AnswerQuestion(event.request_id, None))


def _belongs(turn: Turn, event: TurnEvent) -> bool:
    if turn.session_id is None:
        # Not confirmed on the wire yet, so no session to match: only the turn's own runner
        # feeds events now (its sink lets through the current turn's, by turn id), and an
        # ending here is its prompt failing before it reached the agent (a reload refused).
        return isinstance(event, TurnEnded | RuntimeFailed | RuntimeExited)
    if isinstance(event, RuntimeExited) and event.session_id == "":
        return True
    return event.session_id == turn.session_id


def on_turn_event(ctx: StepContext, event: TurnEvent) -> None:
    turn = ctx.conv.turn
    if turn is None:
        refuse_request(ctx, event)
        ctx.drop(event, "no turn running")
        return
    if isinstance(event, PromptSent):
        if turn.session_id is None:
            sent = Prompt.RUNNING if turn.prompt is Prompt.NOT_SENT else turn.prompt
            ctx.update_turn(session_id=event.session_id, prompt_sent_at=ctx.now, prompt=sent)
            if not turn.terminal:  # after /new the binding stays cleared
                ctx.update(session_id=event.session_id)
            elif turn.prompt is not Prompt.DONE:
                # The stop raced the prompt onto the wire: cancel it now that it is there.
                ctx.emit(CancelTurn(turn.turn_id, event.session_id))
        else:
            ctx.drop(event, "prompt already sent")
        return
    if not _belongs(turn, event):
        refuse_request(ctx, event)
        ctx.drop(event, "other session")
        return
    if turn.terminal:
        _after_terminal(ctx, event)
        return
    if ctx.conv.state is ExecState.RECOVERING:
        refuse_request(ctx, event)
        ctx.drop(event, "runtime recovering")
        return
    if ctx.conv.state is ExecState.CANCELLING:
        _while_cancelling(ctx, event)
        return
    match event:
        case MessageChunk():
            _alive(ctx, Activity(ActivityKind.WRITING))
            ctx.update_turn(text=ctx.turn.text.add(event.text))
            if status_card.in_card_style(ctx):
                status_card.typed(ctx)
            else:
                long_answer.release_filled(ctx, len(event.text))
        case AnswerRewound():
            _rewind(ctx, event)
        case ThoughtChunk():
            _alive(ctx, Activity(ActivityKind.THINKING))
        case ToolCallStarted():
            _alive(ctx, Activity(ActivityKind.TOOL, event.title or None))
            if status_card.in_card_style(ctx):
                status_card.note_tool(ctx, event.tool_call_id, event.title, event.status)
            if ctx.conv.state in RUNNING_STATES:
                flush_commentary(ctx, throttled=True)
                if event.title:
                    _progress(ctx, presence.tool_progress(event.title))
        case ToolCallUpdated():
            title = event.title
            _alive(ctx, Activity(ActivityKind.TOOL, title) if title else ctx.turn.activity)
            if status_card.in_card_style(ctx):
                status_card.note_tool(ctx, event.tool_call_id, title, event.status)
                status_card.refresh(ctx)
        case PlanUpdated():
            _alive(ctx, Activity(ActivityKind.PLANNING))
            if status_card.in_card_style(ctx):
                status_card.note_plan(ctx, event.entries)
                status_card.refresh(ctx)
            line = presence.plan_progress(event.entries)
            if line is not None and ctx.conv.state in RUNNING_STATES:
                _progress(ctx, line)
        case FileOffered():
            note_offered(ctx, event)
        case DiffReported():
            note_diff(ctx, event)
        case PermissionRequested():
            _on_permission(ctx, event)
        case QuestionAsked():
            _on_question(ctx, event)
        case TurnEnded():
            _on_turn_ended(ctx, event)
        case RuntimeFailed():
            ctx.update_turn(prompt=Prompt.DONE)  # the prompt returned, with an error
            finish(
                ctx,
                Outcome.FAILED,
                "presence.unrecoverable",
                detail=event.reason,
                ending=Ending.AGENT_ERROR,
            )
        case RuntimeExited():
            _on_runtime_exited(ctx, event)
        case _:
            ctx.drop(event, "unknown turn event")


def _after_terminal(ctx: StepContext, event: TurnEvent) -> None:
    """First terminal wins: later events change nothing the user sees."""
    turn = ctx.turn
    if isinstance(event, TurnEnded | RuntimeFailed | RuntimeExited):
        if turn.prompt is not Prompt.DONE:
            ctx.update_turn(prompt=Prompt.DONE)
            ctx.drop(event, "runtime returned after the terminal")
            settle(ctx)
        else:
            ctx.drop(event, "second terminal")
        return
    if isinstance(event, MessageChunk) and turn.end is not None and not turn.end.posted:
        # The grace window absorbs text that raced the prompt's response.
        ctx.update_turn(text=turn.text.add(event.text), last_activity_at=ctx.now)
        return
    refuse_request(ctx, event)
    ctx.drop(event, "after the terminal")


def _rewind(ctx: StepContext, event: AnswerRewound) -> None:
    """The prompt runs again from its start: the answer held so far goes, as the new run
    writes it again. What already left (a message's worth posted, a card page closed) stays:
    a rewind comes right after the first run's first updates, long before either.

    What the first run asked went with its agent: its cards say the round began again (the
    run sent again asks anew if it must), and the turn runs on. Left open, a card would
    take a click that reaches no agent while the next one timed out (seed 143241)."""
    if ctx.conv.approvals or ctx.conv.question is not None:
        close_pending(ctx, CardStatus.WITHDRAWN, answer=False)
        resume(ctx)
    turn = ctx.turn
    if turn.released or turn.card.pages or turn.card.spill is not None:
        ctx.drop(event, "part of the answer already left")
        return
    ctx.update_turn(text=NOTHING_WRITTEN)
    ctx.update_card(text="")
    if status_card.in_card_style(ctx):
        status_card.typed(ctx)


def _while_cancelling(ctx: StepContext, event: TurnEvent) -> None:
    """Between /stop and the agent's answer to the cancelled prompt: what the agent writes
    now is not shown (text written before the stop is, at the end), requests are refused,
    and any ending confirms the stop."""
    match event:
        case TurnEnded():
            # Some agents answer a cancelled prompt `end_turn`: it was still stopped.
            confirm_stop(ctx, f"stopped by user (agent said {event.stop_reason.value})")
        case RuntimeFailed() | RuntimeExited():
            confirm_stop(ctx, "stopped by user (the agent failed or exited)")
        case _:
            refuse_request(ctx, event)
            ctx.update_turn(last_activity_at=ctx.now)
            ctx.drop(event, "turn is being cancelled")


def _alive(ctx: StepContext, activity: Activity | None) -> None:
    """A sign of life: an open stream is the strongest busy signal."""
    ctx.update_turn(last_activity_at=ctx.now, activity=activity)
    if ctx.conv.state in (ExecState.WAITING_RESPONSE, ExecState.STALE):
        ctx.update(state=ExecState.STREAMING)


def flush_commentary(ctx: StepContext, *, throttled: bool = False) -> None:
    """Agent text before a tool call / request is commentary: relay it as it stands.

    `throttled`: within the progress interval the text is held for the next slot (with the
    progress lines), so an agent alternating words and tool calls cannot flood the chat.
    In card style the text moves into the card instead (its updates are throttled there)."""
    if status_card.in_card_style(ctx):
        status_card.take_commentary(ctx)
        return
    turn = ctx.turn
    last = turn.progress.last_at
    if throttled and last is not None and ctx.now - last < ctx.timings.progress_interval:
        if str(turn.text).strip():
            ctx.update_turn(text=turn.text.add("\n\n"))
            ctx.update_progress(commentary_held=True)
        return
    text = str(turn.text).strip()
    ctx.update_turn(text=NOTHING_WRITTEN)
    ctx.update_progress(commentary_held=False)
    if text:
        idem = ctx.post_key("reply")
        ctx.emit(RelayAgentText(text, ctx.turn.message_id, idem, turn_id=ctx.turn.turn_id))
        now = ctx.now
        ctx.update_turn(announced=True, last_posted_at=now)
        ctx.update_progress(last_at=now)


def _progress(ctx: StepContext, line: ProgressLine) -> None:
    turn = ctx.turn
    if line in (turn.progress.last, turn.progress.pending):
        return
    last = turn.progress.last_at
    if last is None or ctx.now - last >= ctx.timings.progress_interval:
        show_progress(ctx, line)
    else:
        ctx.update_progress(pending=line)  # the latest line wins the next slot


def show_progress(ctx: StepContext, line: ProgressLine) -> None:
    if status_card.in_card_style(ctx):
        status_card.show(ctx)  # the card lists the tools and the plan itself
    else:
        idem = ctx.post_key("progress")
        turn = ctx.turn
        key, params = line.key, dict(line.params)
        tid = turn.turn_id
        ctx.emit(PostText(key, params, turn.message_id, idem, turn_id=tid, line=Line.PROGRESS))
    now = ctx.now
    ctx.update_turn(announced=True, last_posted_at=now)
    ctx.update_progress(last_at=now, last=line, pending=None)


def _on_permission(ctx: StepContext, event: PermissionRequested) -> None:
    conv = ctx.conv
    if any(a.request_id == event.request_id for a in conv.approvals):
        ctx.drop(event, "approval already shown")
        return
    _alive(ctx, Activity(ActivityKind.TOOL, event.title))
    if ctx.conv.state in RUNNING_STATES:
        flush_commentary(ctx)
    conv = ctx.conv
    turn = ctx.turn
    card_key = f"{turn.turn_id}:card:{event.request_id}"
    approval = PendingApproval(
        event.request_id, card_key, event.title, event.options, ctx.now, event.detail
    )
    ctx.emit(
        PostApprovalCard(
            turn.turn_id,
            card_key,
            event.request_id,
            event.title,
            event.detail,
            event.options,
            turn.requester,
            turn.message_id,
            card_key,
        )
    )
    entering = conv.state is not ExecState.WAITING_APPROVAL
    ctx.update(approvals=(*conv.approvals, approval), state=ExecState.WAITING_APPROVAL)
    ctx.update_turn(
        last_activity_at=ctx.now,
        activity=Activity(ActivityKind.TOOL, event.title),
        announced=True,
    )
    ctx.update_progress(pending=None)
    command = event.detail or event.title
    if len(command) > presence.CARD_DETAIL_LIMIT:
        # The card shows the head; the whole command follows, never a hidden tail.
        full: Params = {"length": len(command), "command": command}
        ctx.say("card.approval.full_command", full, kind="command")
    if entering:
        who = pause_mentions(ctx, approval=True)
        ctx.say("presence.waiting_approval", kind="wait", line=Line.PAUSE, mentions=who)
    status_card.refresh(ctx)


def _on_question(ctx: StepContext, event: QuestionAsked) -> None:
    conv = ctx.conv
    if conv.question is not None:
        ctx.emit(AnswerQuestion(event.request_id, None))
        ctx.drop(event, "a question is already pending")
        return
    _alive(ctx, ctx.turn.activity)
    if ctx.conv.state in RUNNING_STATES:
        flush_commentary(ctx)
    conv = ctx.conv
    turn = ctx.turn
    card_key = f"{turn.turn_id}:question:{event.request_id}"
    question = PendingQuestion(
        event.request_id,
        card_key,
        event.kind,
        event.text,
        event.options,
        event.answer_key,
        ctx.now,
    )
    ctx.emit(
        PostQuestion(
            turn.turn_id,
            card_key,
            event.request_id,
            event.text,
            event.options,
            turn.requester,
            turn.message_id,
            card_key,
        )
    )
    state = ExecState.WAITING_APPROVAL if conv.approvals else ExecState.WAITING_REPLY
    ctx.update(question=question, state=state)
    ctx.update_turn(last_activity_at=ctx.now, announced=True)
    ctx.update_progress(pending=None)
    who = pause_mentions(ctx, approval=False)
    ctx.say("presence.waiting_reply", kind="wait", line=Line.PAUSE, mentions=who)
    status_card.refresh(ctx)


REJECTED = "presence.ended_rejected"


def _on_turn_ended(ctx: StepContext, event: TurnEnded) -> None:
    close_pending(ctx, CardStatus.CANCELLED, answer=False)  # a returned prompt asks nothing
    ctx.update_turn(last_activity_at=ctx.now, prompt=Prompt.DONE)
    reason = event.stop_reason
    turn = ctx.turn
    # A refused step may end the round with nothing more said (Qwen Code: an empty end_turn;
    # Codex: `cancelled`, its only way to refuse a file change): the user is told it ended
    # because of their refusal, not that they stopped it or that it simply ended.
    refused = turn.rejected and turn.stop is None
    if reason is StopReason.END_TURN:
        quiet = refused and not str(turn.text).strip()
        ending = Ending.REFUSED if quiet else Ending.COMPLETED
        finish(
            ctx, Outcome.COMPLETED, REJECTED if quiet else None, detail=reason.value, ending=ending
        )
    elif reason is StopReason.CANCELLED:
        key = REJECTED if refused else "presence.stopped"
        if turn.stop is not None:
            ending = Ending.USER_STOP
        else:  # no /stop: a refusal ended it, or the agent gave the prompt up on its own
            ending = Ending.REFUSED if refused else Ending.AGENT_ERROR
        finish(ctx, Outcome.CANCELLED, key, detail=reason.value, ending=ending)
    else:
        # Non-final ending: hold the end line for the grace window (first terminal is now).
        end = TurnEnd(Outcome.COMPLETED, Ending.COMPLETED, reason.value, ctx.now, held=reason)
        ctx.update_turn(end=end)
        ctx.update_progress(pending=None)
        ctx.update(state=ExecState.FINISHING)


def _on_runtime_exited(ctx: StepContext, event: RuntimeExited) -> None:
    close_pending(ctx, CardStatus.CANCELLED, answer=False)  # the process that asked is gone
    detail = f"runtime exited (returncode={event.returncode}, signal={event.signal})"
    if not event.restarting:
        finish(
            ctx, Outcome.FAILED, "presence.unrecoverable", detail=detail, ending=Ending.AGENT_EXIT
        )
        return
    flush_commentary(ctx)
    # The agent that was working is gone: a "still working" line still waiting (behind a
    # slow call in its chat, in the call budget, an outage) is untrue now, wherever it waits.
    ctx.emit(Supersede((presence_group(ctx.turn.turn_id),)))
    ctx.update_turn(prompt=Prompt.DONE, recovering_since=ctx.now)
    ctx.update_progress(pending=None)
    ctx.update(state=ExecState.RECOVERING)
    ctx.say("presence.recovering", kind="recovering")
    status_card.refresh(ctx)
