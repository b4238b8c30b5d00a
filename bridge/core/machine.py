"""The conversation state machine: `step(conv, event, now, timings) -> (conv, effects)`.

Pure: no I/O, no clock of its own. The diagram beside it (state_machine.mmd) draws every
transition made here; tests/unit/core/test_core_diagram.py keeps the two in step.

The handlers live beside it: turn_events (runtime events), clicks (card buttons),
deadlines (the clock), lifecycle (start, end, next); context holds the step under
construction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeGuard

from bridge.core import reactions, status_card
from bridge.core.attachments import hold, is_attachment_only, on_attachment_failed, take_held
from bridge.core.clicks import (
    answer_question,
    may_answer,
    on_approval_clicked,
    on_question_answered,
)
from bridge.core.config_lines import config_lines, mode_lines
from bridge.core.context import StepContext
from bridge.core.deadlines import on_clock
from bridge.core.delivery import Line
from bridge.core.effects import (
    AskConfig,
    AskModes,
    AskStatus,
    CancelTurn,
    CardStatus,
    Effect,
    MarkMessageDone,
    NewSession,
    PostText,
    React,
    RecordTerminal,
)
from bridge.core.files import on_diff_command, on_file_sent, on_send_command
from bridge.core.inputs import (
    AccessRefused,
    AgentCommands,
    ApprovalClicked,
    AttachmentFailed,
    CardNotShown,
    Command,
    CommandName,
    ConfigAnswered,
    ConversationClosed,
    CoreEvent,
    FileSent,
    MessageRecalled,
    MessageRecovered,
    ModesAnswered,
    Posted,
    PostGivenUp,
    QuestionAnswered,
    RuntimeRestarted,
    RuntimeRestartFailed,
    RuntimeUnavailableAtStart,
    ScheduleInput,
    SessionCloseRequested,
    SessionNotReloaded,
    SessionOpened,
    StartFailed,
    StatusAnswered,
    StatusCardFailed,
    SwitchAnswered,
    Tick,
    TimerFired,
    TurnBegun,
    TurnInterruptedByRestart,
    TurnNotStarted,
    UnsupportedMessage,
    UrgentUnavailable,
    UrgeRefused,
    UserMessage,
    VoiceHeard,
)
from bridge.core.lifecycle import (
    cancel,
    close_pending,
    conclude_grace,
    finish,
    on_session_not_reloaded,
    on_session_opened,
    on_turn_not_started,
    settle,
    start_turn,
    stop_running,
)
from bridge.core.presence import Timings
from bridge.core.recall import on_recalled
from bridge.core.schedule_steps import on_schedule_command, on_schedule_input
from bridge.core.snapshot import status_lines
from bridge.core.state import (
    RECENT_IDS,
    CardStage,
    Conversation,
    Ending,
    ExecState,
    Outcome,
    Prompt,
    QueuedMessage,
)
from bridge.core.switch_lines import on_session_close, on_switch_command, switch_lines
from bridge.core.turn_events import on_turn_event, refuse_request
from bridge.core.urging import on_urge_refused, on_urgent_unavailable
from bridge.core.voice import on_voice_heard
from bridge.runtime.events import RuntimeFailed, TurnEvent, UsageReported


def step(
    conv: Conversation, event: CoreEvent, now: float, timings: Timings
) -> tuple[Conversation, list[Effect]]:
    """Apply one input. Returns the new state and the effects to perform, in order."""
    ctx = StepContext(conv, now, timings)
    if _is_click(event):
        _remember_click(ctx, event.message_id)  # answered by new messages, not replies
    elif isinstance(event, UserMessage | Command | UnsupportedMessage) and _acked(conv, event):
        ctx.emit(React(event.message_id))  # every message gets its one ack, whatever follows
    joins_group = isinstance(event, UserMessage | Command | UnsupportedMessage) and event.in_group
    if joins_group and not conv.group:
        ctx.update(group=True)  # a chat never changes its type
    if conv.state is ExecState.CLOSED:
        refuse_request(ctx, event)
        if isinstance(event, UserMessage | Command | UnsupportedMessage) and not _is_click(event):
            ctx.emit(MarkMessageDone(event.message_id))  # nothing will ever run it
        ctx.drop(event, "conversation closed")
    else:
        _dispatch(ctx, event)
        reactions.follow(ctx)
    ctx.sync_timers()
    return ctx.conv, ctx.out


def _is_click(event: CoreEvent) -> TypeGuard[Command | AccessRefused]:
    """A bot-menu click: no message (no ack, nothing journaled), answered in new messages."""
    return isinstance(event, Command | AccessRefused) and event.menu


def _remember_click(ctx: StepContext, click_id: str) -> None:
    clicks = (*ctx.conv.menu_clicks, click_id)[-RECENT_IDS:]
    ctx.update(menu_clicks=clicks)


def _acked(conv: Conversation, event: UserMessage | Command | UnsupportedMessage) -> bool:
    # A redelivered text that slipped past the receiver's dedup already has its ack.
    return not isinstance(event, UserMessage) or event.message_id not in conv.recent_message_ids


def _dispatch(ctx: StepContext, event: CoreEvent) -> None:
    match event:
        case UserMessage() | Command() | UnsupportedMessage():
            _on_message(ctx, event)
        case MessageRecovered():
            _on_recovered(ctx, event)
        case MessageRecalled():
            on_recalled(ctx, event)
        case AttachmentFailed():
            on_attachment_failed(ctx, event)
        case VoiceHeard():
            on_voice_heard(ctx, event)
        case FileSent():
            on_file_sent(ctx, event)
        case AccessRefused():
            mid = event.message_id
            ctx.emit(PostText("access.refused", {}, mid, f"{mid}:refused"))
        case PostGivenUp(reply_to, key):
            ctx.emit(PostText("delivery.given_up", {}, reply_to, f"{key}:given-up"))
        case Posted():
            _on_posted(ctx, event)
        case SessionOpened():
            on_session_opened(ctx, event.turn_id, event.session_id, fresh=event.fresh)
        case SessionNotReloaded():
            _on_session_not_reloaded(ctx, event)
        case ApprovalClicked():
            on_approval_clicked(ctx, event)
        case QuestionAnswered():
            on_question_answered(ctx, event)
        case TimerFired() | Tick():
            on_clock(ctx)
        case _ if isinstance(event, ScheduleInput):
            on_schedule_input(ctx, event)
        case RuntimeUnavailableAtStart() | StartFailed():
            _on_unavailable_at_start(ctx, event)
        case TurnBegun():
            _on_turn_begun(ctx, event)
        case TurnNotStarted():
            on_turn_not_started(ctx, event.turn_id)
        case CardNotShown():
            _on_card_not_shown(ctx, event)
        case UrgeRefused():
            on_urge_refused(ctx, event)
        case UrgentUnavailable():
            on_urgent_unavailable(ctx)
        case StatusCardFailed():
            status_card.on_card_failed(ctx, event)
        case ModesAnswered():
            mode_lines(ctx, event)
        case ConfigAnswered():
            config_lines(ctx, event)
        case SwitchAnswered():
            switch_lines(ctx, event)
        case StatusAnswered():
            status_lines(ctx, event)
        case UsageReported():
            ctx.update(usage=event.usage)  # for /status and the footer; not a sign of work
        case AgentCommands():
            ctx.update(agent_commands=event.names, agent_name=event.agent)
        case RuntimeRestarted():
            _on_runtime_restarted(ctx, event)
        case RuntimeRestartFailed():
            _on_restart_failed(ctx, event)
        case TurnInterruptedByRestart():
            _on_interrupted_by_restart(ctx, event)
        case ConversationClosed():
            _on_closed(ctx)
        case SessionCloseRequested():
            on_session_close(ctx, event)
        case TurnEvent():
            on_turn_event(ctx, event)


def _on_message(ctx: StepContext, msg: UserMessage | Command | UnsupportedMessage) -> None:
    match msg:
        case UserMessage():
            _on_user_message(ctx, msg)
        case Command() if _agents_own(ctx, msg):
            # Not one of ours but the agent's (e.g. /compact): the agent gets it as typed.
            text = f"{msg.raw} {msg.arg}".strip()
            _on_user_message(ctx, UserMessage(msg.message_id, msg.sender, text))
        case Command(menu=True):
            _on_command(ctx, msg)  # nothing journaled: nothing to mark done
        case Command():
            _on_command(ctx, msg)
            ctx.emit(MarkMessageDone(msg.message_id))
        case UnsupportedMessage():
            mid = msg.message_id
            ctx.emit(
                PostText("message.unsupported", {}, mid, f"{mid}:unsupported"),
                MarkMessageDone(mid),
            )


def _on_recovered(ctx: StepContext, event: MessageRecovered) -> None:
    """A message the last process took and never finished: said to be picked up again (and
    whether it waits behind another), then handled as if it had just arrived."""
    mid = event.message.message_id
    if not is_attachment_only(event.message):  # a held image is held again, silently
        key = "recovery.resumed" if ctx.conv.turn is None else "recovery.resumed_queued"
        ctx.emit(PostText(key, {}, mid, f"{mid}:resumed"))
    _on_message(ctx, event.message)


def _remember(ctx: StepContext, message_id: str) -> None:
    recent = (*ctx.conv.recent_message_ids, message_id)[-RECENT_IDS:]
    ctx.update(recent_message_ids=recent)


def _on_user_message(ctx: StepContext, msg: UserMessage) -> None:
    conv = ctx.conv
    if msg.message_id in conv.recent_message_ids:
        ctx.drop(msg, "duplicate message")  # hard rule 4, behind the receiver's dedup
        return
    _remember(ctx, msg.message_id)
    if (
        conv.state is ExecState.WAITING_REPLY
        and conv.question is not None
        and msg.sender == ctx.turn.requester
    ):
        # While waiting for a reply, the requester's next message *is* the reply, and part
        # of the round.
        ctx.update_turn(joined=(*ctx.turn.joined, msg.message_id))
        answer_question(ctx, {conv.question.answer_key: msg.text}, by=msg.sender)
        ctx.emit(MarkMessageDone(msg.message_id))
        return
    if msg.attachments and hold(ctx, msg):
        return
    end = ctx.turn.end if conv.state is ExecState.FINISHING else None
    if end is not None and not end.posted:
        # A follow-up during the grace window closes the round at once instead of waiting.
        conclude_grace(ctx)
    # Nothing attached and nothing held: the turn takes no attachments.
    attachments = take_held(ctx, msg) if msg.attachments or ctx.conv.held else ()
    if ctx.conv.turn is None:
        start_turn(
            ctx, msg.message_id, msg.sender, msg.text, announce=True, attachments=attachments
        )
        return
    queued = QueuedMessage(msg.message_id, msg.sender, msg.text, ctx.now, attachments)
    ctx.update(queue=(*ctx.conv.queue, queued))
    key = (
        "presence.queued_approval"
        if conv.state is ExecState.WAITING_APPROVAL
        else "presence.queued"
    )
    position = len(ctx.conv.queue)
    ctx.emit(PostText(key, {"position": position}, msg.message_id, f"{msg.message_id}:queued"))


def _on_command(ctx: StepContext, cmd: Command) -> None:
    mid = cmd.message_id
    match cmd.name:
        case CommandName.STATUS:
            ctx.emit(AskStatus(mid, ctx.conv.session_id))
        case CommandName.HELP if ctx.conv.agent_commands:
            listed = "  ".join(f"/{name}" for name in ctx.conv.agent_commands)
            params = {"commands": listed, "agent": ctx.conv.agent_name or "—"}
            ctx.emit(PostText("command.help_agent", params, mid, f"{mid}:help"))
        case CommandName.HELP:
            ctx.emit(PostText("command.help", {}, mid, f"{mid}:help"))
        case CommandName.UNKNOWN if cmd.menu:
            ctx.emit(PostText("menu.unknown", {"item": cmd.raw}, mid, f"{mid}:help"))
        case CommandName.UNKNOWN:
            ctx.emit(PostText("command.unknown", {"command": cmd.raw or "/"}, mid, f"{mid}:help"))
        case CommandName.MODE if cmd.arg and _someone_elses_round(ctx, cmd.sender):
            ctx.emit(PostText("command.mode_not_yours", {}, mid, f"{mid}:mode"))
        case CommandName.MODE:
            ctx.emit(AskModes(mid, ctx.conv.session_id, cmd.arg))
        case CommandName.MODEL if cmd.arg and _someone_elses_round(ctx, cmd.sender):
            ctx.emit(PostText("command.model_not_yours", {}, mid, f"{mid}:model"))
        case CommandName.MODEL | CommandName.CONFIG:
            ctx.emit(AskConfig(mid, ctx.conv.session_id, cmd.name.value, cmd.arg))
        case CommandName.EVERY | CommandName.AT | CommandName.SCHEDULES | CommandName.UNSCHEDULE:
            on_schedule_command(ctx, cmd)
        case CommandName.SEND:
            on_send_command(ctx, cmd)
        case CommandName.DIFF:
            on_diff_command(ctx, cmd)
        case (
            CommandName.PROJECT
            | CommandName.AGENT
            | CommandName.CD
            | CommandName.SESSIONS
            | CommandName.RESUME
        ):
            on_switch_command(ctx, cmd)
        case CommandName.STOP | CommandName.NEW if _someone_elses_round(ctx, cmd.sender):
            # In a group, a bystander must not cut another person's round.
            ctx.emit(PostText("command.not_yours", {}, mid, f"{mid}:{cmd.name.value}"))
        case CommandName.STOP if ctx.conv.state is ExecState.CANCELLING:
            ctx.emit(PostText("presence.stopping", {}, mid, f"{mid}:stop", line=Line.HINT))
        case CommandName.STOP:
            if not stop_running(ctx, confirm=True):
                ctx.emit(PostText("command.stop_idle", {}, mid, f"{mid}:stop"))
        case CommandName.NEW:
            stop_running(ctx)
            ctx.update(session_id=None)
            ctx.emit(NewSession(), PostText("command.new_session", {}, mid, f"{mid}:new"))


def _agents_own(ctx: StepContext, cmd: Command) -> bool:
    if cmd.menu:
        return False  # a menu item names one of the bridge's commands, or none
    return cmd.name is CommandName.UNKNOWN and cmd.raw[1:] in ctx.conv.agent_commands


def _someone_elses_round(ctx: StepContext, sender: str) -> bool:
    turn = ctx.conv.turn
    return turn is not None and not turn.terminal and not may_answer(ctx.conv, sender)


def _on_runtime_restarted(ctx: StepContext, event: RuntimeRestarted) -> None:
    ctx.update(session_id=event.session_id)
    turn = ctx.conv.turn
    if turn is None or ctx.conv.state is not ExecState.RECOVERING:
        ctx.drop(event, "no turn to recover")
        return
    if event.turn_resumed:
        ctx.update_turn(
            session_id=event.session_id,
            prompt=Prompt.RUNNING,
            recovering_since=None,
            last_activity_at=ctx.now,
        )
        ctx.update(state=ExecState.STREAMING)
        ctx.say("presence.recovered", kind="recovered")
        status_card.refresh(ctx)
        return
    # A reloaded session keeps the history, but an ACP prompt cut mid-way does not go on.
    key = "presence.unrecoverable" if event.reloaded else "presence.unrecoverable_context_lost"
    finish(ctx, Outcome.INTERRUPTED, key, detail="runtime restarted", ending=Ending.AGENT_EXIT)


def _on_restart_failed(ctx: StepContext, event: RuntimeRestartFailed) -> None:
    if ctx.conv.turn is None or ctx.conv.state is not ExecState.RECOVERING:
        ctx.drop(event, "no turn to recover")
        return
    finish(
        ctx, Outcome.FAILED, "presence.unrecoverable", detail=event.reason, ending=Ending.AGENT_EXIT
    )


def _on_unavailable_at_start(
    ctx: StepContext, event: RuntimeUnavailableAtStart | StartFailed
) -> None:
    turn = ctx.conv.turn
    if turn is None or turn.turn_id != event.turn_id:
        ctx.drop(event, "not the current turn")
        return
    if turn.session_id is not None:
        ctx.drop(event, "prompt already sent")
        return
    if turn.terminal:
        ctx.update_turn(prompt=Prompt.DONE)  # e.g. /stop came before the runtime answered
        settle(ctx)
        return
    # Never pretend to be thinking: the fault line is the end signal, no hint follows.
    if isinstance(event, StartFailed):
        key = "presence.unrecoverable"  # the agent is fine; this round is not
    elif event.limit_reached:
        key = "presence.runtime_busy"
    else:
        key = "presence.runtime_unavailable"
    ctx.update_turn(prompt=Prompt.DONE)
    finish(ctx, Outcome.FAILED, key, detail=event.reason, ending=Ending.AGENT_ERROR)


def _on_posted(ctx: StepContext, event: Posted) -> None:
    """A card Feishu took: its message is kept on the request, to close the card later, and
    the user is waited on from now (its reminder and timeout count from here)."""
    key, ids = event.idempotency_key, event.message_ids
    conv = ctx.conv
    if not ids:
        ctx.drop(event, "no message")
    elif any(a.card_key == key for a in conv.approvals):
        approvals = tuple(
            replace(a, message_id=ids[0], shown_at=ctx.now) if a.card_key == key else a
            for a in conv.approvals
        )
        ctx.update(approvals=approvals)
    elif conv.question is not None and conv.question.card_key == key:
        ctx.update(question=replace(conv.question, message_id=ids[0], shown_at=ctx.now))
    else:
        ctx.drop(event, "card no longer open")


def _on_turn_begun(ctx: StepContext, event: TurnBegun) -> None:
    turn = ctx.conv.turn
    if turn is None or turn.turn_id != event.turn_id:
        ctx.drop(event, "not the current turn")
        return
    ctx.update_turn(begun_here=True)


def _on_session_not_reloaded(ctx: StepContext, event: SessionNotReloaded) -> None:
    turn = ctx.conv.turn
    if turn is None or turn.turn_id != event.turn_id:
        ctx.drop(event, "not the current turn")
        return
    if not on_session_not_reloaded(ctx):
        # Asked once already (or the round is over): the prompt failed, as any other would.
        on_turn_event(ctx, RuntimeFailed(event.session_id, reason=event.reason))


def _on_card_not_shown(ctx: StepContext, event: CardNotShown) -> None:
    turn = ctx.conv.turn
    asking = ctx.conv.approvals + ((ctx.conv.question,) if ctx.conv.question else ())
    if turn is None or turn.turn_id != event.turn_id or turn.terminal:
        ctx.drop(event, "not the current turn")
        return
    if not any(r.request_id == event.request_id for r in asking):
        ctx.drop(event, "request no longer pending")
        return
    # Nobody can answer a card nobody sees: the request is refused and the round ends. A
    # card never shown has no timeout running, so this is also how a card given up ends.
    question = ctx.conv.question
    asked = question is not None and question.request_id == event.request_id
    cancel(
        ctx,
        Outcome.FAILED,
        "presence.question_card_failed" if asked else "presence.card_failed",
        detail="Feishu never took the card" if event.given_up else "Feishu refused the card",
        ending=Ending.FEISHU_REFUSED,
    )


def _on_interrupted_by_restart(ctx: StepContext, event: TurnInterruptedByRestart) -> None:
    # Same key as any end signal of that turn: if it did go out before the crash, Feishu's
    # uuid dedup swallows this one.
    status_card.interrupted_by_restart(ctx, event.turn_id, event.message_id)
    ctx.emit(
        PostText(
            "presence.unrecoverable", {}, event.message_id, f"{event.turn_id}:end", final=True
        ),
        RecordTerminal(
            event.turn_id, Outcome.INTERRUPTED, Ending.BRIDGE_SHUTDOWN, "bridge restarted"
        ),
    )
    reactions.ended(ctx, (event.message_id,), Outcome.INTERRUPTED, Ending.BRIDGE_SHUTDOWN)


def _on_closed(ctx: StepContext) -> None:
    turn = ctx.conv.turn
    if turn is not None:
        alive = turn.prompt is not Prompt.DONE
        close_pending(ctx, CardStatus.CANCELLED, answer=alive)
        if not turn.terminal:
            if turn.card.stage is CardStage.SHOWN:
                # No restart will find this turn: its card ends now.
                status_card.interrupted_by_restart(ctx, turn.turn_id, turn.message_id)
            if alive:
                ctx.emit(CancelTurn(turn.turn_id, turn.session_id))
            ctx.emit(
                RecordTerminal(
                    turn.turn_id, Outcome.INTERRUPTED, Ending.CLOSED, "conversation closed"
                )
            )
            reactions.ended(ctx, reactions.messages_of(turn), Outcome.INTERRUPTED, Ending.CLOSED)
    ctx.update(state=ExecState.CLOSED, turn=None, queue=(), approvals=(), question=None)
