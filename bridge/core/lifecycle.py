"""A turn's life: start, stop, the one end signal, and taking the next queued message.

Ordering contract for a turn's end: the one end signal is posted first, `RecordTerminal`
follows it. A crash between the two leaves a turn the journal reports as interrupted; the
replacement line reuses the end signal's idempotency key, so the user still sees one end.
"""

from __future__ import annotations

from bridge.core import reactions, status_card
from bridge.core.context import StepContext
from bridge.core.delivery import Line, Supersede, presence_group
from bridge.core.effects import (
    AbandonTurn,
    AnswerPermission,
    AnswerQuestion,
    CancelTurn,
    CardStatus,
    OpenSession,
    PostText,
    RecordTerminal,
    RelayAgentText,
    SendPrompt,
    StartTurn,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.core.files import send_offered
from bridge.core.presence import STOP_REASON_KEYS
from bridge.core.snapshot import footer
from bridge.core.state import (
    Attachment,
    Ending,
    ExecState,
    LastTerminal,
    Outcome,
    Prompt,
    StopRequest,
    Turn,
    TurnEnd,
)
from bridge.core.text import NOTHING_WRITTEN, Params


def start_turn(
    ctx: StepContext,
    message_id: str,
    sender: str,
    text: str,
    *,
    announce: bool,
    attachments: tuple[Attachment, ...] = (),
) -> None:
    now = ctx.now
    # Images and files held for this text came with messages of their own: they join it.
    joined = tuple(dict.fromkeys(a.message_id for a in attachments if a.message_id != message_id))
    turn = Turn(
        message_id,
        message_id,
        sender,
        now,
        last_activity_at=now,
        last_posted_at=now,
        joined=joined,
    )
    ctx.update(turn=turn, state=ExecState.WAITING_RESPONSE, diffs=())
    if announce and ctx.conv.options.received_text:
        key = f"{message_id}:received"
        received = Line.RECEIVED
        ctx.emit(
            PostText("presence.received", {}, message_id, key, turn_id=turn.turn_id, line=received)
        )
    ctx.emit(StartTurn(turn.turn_id, text, ctx.conv.session_id, attachments))


def stop_running(ctx: StepContext, *, confirm: bool = False) -> bool:
    """Stop the running round; False when there is nothing left to stop.

    With `confirm`, a prompt already on the wire is stopped the truthful way: the agent is
    asked to cancel and the round ends when it confirms (whatever stop reason it gives), or
    when the bridge gives up waiting (`CANCEL_LIMIT`)."""
    turn = ctx.conv.turn
    if turn is None:
        return False
    if turn.end is None:
        on_the_wire = turn.prompt is Prompt.RUNNING
        if confirm and on_the_wire and ctx.conv.state is not ExecState.RECOVERING:
            request_stop(ctx)
        else:
            cancel(
                ctx,
                Outcome.CANCELLED,
                "presence.stopped",
                detail="stopped by user",
                ending=Ending.USER_STOP,
            )
        return True
    if not turn.end.posted:
        conclude_grace(ctx)  # the runtime already returned; just close the round now
        return True
    return False


def request_stop(ctx: StepContext) -> None:
    """Ask the agent to cancel and wait for it in CANCELLING (no end signal yet)."""
    turn = ctx.turn
    close_pending(ctx, CardStatus.CANCELLED, answer=True)
    ctx.emit(CancelTurn(turn.turn_id, turn.session_id))
    ctx.update_turn(stop=StopRequest(ctx.now))
    ctx.update_progress(pending=None)
    ctx.update(state=ExecState.CANCELLING)


def confirm_stop(ctx: StepContext, detail: str) -> None:
    """The agent answered the cancelled prompt: the round is stopped, whatever it said."""
    ctx.update_turn(prompt=Prompt.DONE)
    finish(ctx, Outcome.CANCELLED, "presence.stopped", detail=detail, ending=Ending.USER_STOP)


def abandon(ctx: StepContext, key: str, *, detail: str, ending: Ending) -> None:
    """The agent never confirmed a cancel: end the round on our side and have its process
    restarted if it is still running the prompt, so nothing waits on it any longer."""
    turn = ctx.turn
    if turn.session_id is not None:
        ctx.emit(AbandonTurn(turn.turn_id, turn.session_id))
    ctx.update_turn(prompt=Prompt.DONE)
    if turn.end is not None and turn.end.posted:
        settle(ctx)
    else:
        finish(ctx, Outcome.CANCELLED, key, detail=detail, ending=ending)


def resume(ctx: StepContext) -> None:
    """The user answered: the assistant moves again, and silence is counted from now."""
    conv = ctx.conv
    if conv.approvals:
        ctx.update(state=ExecState.WAITING_APPROVAL)
    elif conv.question is not None:
        ctx.update(state=ExecState.WAITING_REPLY)
    else:
        ctx.update(state=ExecState.STREAMING)
    ctx.update_turn(last_activity_at=ctx.now, last_posted_at=ctx.now, announced=True)
    status_card.refresh(ctx)


def close_pending(ctx: StepContext, status: CardStatus, *, answer: bool) -> None:
    """Flip every open card to `status`; `answer` cancels the requests on a live runtime."""
    turn_id = ctx.turn.turn_id
    for approval in ctx.conv.approvals:
        ctx.emit(
            UpdateApprovalCard(
                turn_id,
                approval.card_key,
                approval.request_id,
                status,
                approval.title,
                approval.detail,
                message_id=approval.message_id,
            )
        )
        if answer:
            ctx.emit(AnswerPermission(approval.request_id, None))
    question = ctx.conv.question
    if question is not None:
        ctx.emit(
            UpdateQuestionCard(
                turn_id,
                question.card_key,
                question.request_id,
                status,
                question.text,
                message_id=question.message_id,
            )
        )
        if answer:
            ctx.emit(AnswerQuestion(question.request_id, None))
    ctx.update(approvals=(), question=None)


def cancel(
    ctx: StepContext,
    outcome: Outcome,
    key: str,
    params: Params | None = None,
    *,
    detail: str,
    ending: Ending,
    cards: CardStatus = CardStatus.CANCELLED,
) -> None:
    """End the turn from our side; the runtime is told, and its late events are dropped."""
    turn = ctx.turn
    alive = turn.prompt is not Prompt.DONE
    close_pending(ctx, cards, answer=alive)
    if alive:
        ctx.emit(CancelTurn(turn.turn_id, turn.session_id))
    finish(ctx, outcome, key, params, detail=detail, ending=ending)


def finish(
    ctx: StepContext,
    outcome: Outcome,
    key: str | None,
    params: Params | None = None,
    *,
    detail: str,
    ending: Ending,
) -> None:
    """Post the turn's one end signal, record its terminal, and move on.

    `key` None is a normal end: the agent's reply is the end signal, or the ended-empty line
    when there is none. Otherwise agent text still held is relayed first and `key` ends.
    """
    close_pending(ctx, CardStatus.CANCELLED, answer=ctx.turn.prompt is not Prompt.DONE)
    turn = ctx.turn
    tid, reply_to, end_id = turn.turn_id, turn.message_id, f"{turn.turn_id}:end"
    tail = str(turn.text).strip()
    send_offered(ctx)  # the files the answer links go before it
    first = turn.end  # set when the end was held for the grace window: it stands
    final_outcome = first.outcome if first else outcome
    ctx.ending = final_outcome  # the end signal carries it (a restart ends the turn with it)
    if status_card.finalize(ctx, key, params, end_id):
        pass  # the card ends it, and says what a message must say too
    elif key is None:
        if tail:
            ctx.emit(RelayAgentText(tail, reply_to, end_id, True, tid, footer(ctx)))
        else:
            ctx.emit(PostText("presence.ended_empty", {}, reply_to, end_id, True, tid, footer(ctx)))
    else:
        if tail:
            ctx.emit(RelayAgentText(tail, reply_to, ctx.post_key("reply"), turn_id=tid))
        ctx.emit(PostText(key, dict(params or {}), reply_to, end_id, True, tid, footer(ctx)))
    ctx.ending = None
    ctx.update_turn(text=NOTHING_WRITTEN)
    ctx.update_progress(pending=None)
    final_ending = first.ending if first else ending
    ctx.emit(RecordTerminal(turn.turn_id, final_outcome, final_ending, detail))
    # "Still working" and "your turn" of this turn are untrue from now on, wherever they wait.
    ctx.emit(Supersede((presence_group(tid),)))
    # After the end signal: the reactions say how the round ended.
    reactions.ended(ctx, reactions.messages_of(turn), final_outcome, final_ending)
    ended_at = first.ended_at if first else ctx.now
    ctx.update_turn(end=TurnEnd(final_outcome, final_ending, detail, ended_at))
    settle(ctx)


def conclude_grace(ctx: StepContext) -> None:
    end = ctx.turn.end
    assert end is not None, "only in a grace window"
    assert end.held is not None, "only in a grace window"
    finish(ctx, end.outcome, STOP_REASON_KEYS[end.held], detail=end.detail, ending=end.ending)


def settle(ctx: StepContext) -> None:
    """After a terminal: wait in FINISHING until the end is posted and the runtime returned,
    then take the next queued message."""
    turn = ctx.conv.turn
    if turn is None or turn.end is None:
        return
    end = turn.end
    if not (end.posted and turn.prompt is Prompt.DONE):
        ctx.update(state=ExecState.FINISHING)
        return
    ctx.update(
        turn=None,
        state=ExecState.IDLE,
        last_terminal=LastTerminal(turn.turn_id, end.outcome, end.ended_at, end.ending),
    )
    if ctx.conv.queue:
        head, *rest = ctx.conv.queue
        ctx.update(queue=tuple(rest))
        start_turn(
            ctx,
            head.message_id,
            head.sender,
            head.text,
            announce=False,
            attachments=head.attachments,
        )


def on_session_opened(
    ctx: StepContext, turn_id: str, session_id: str, *, fresh: bool = False
) -> None:
    """The runner holds a session: prompt now, unless the turn ended meanwhile (then the
    runtime is done with it, and the next queued message may start)."""
    turn = ctx.conv.turn
    if turn is None or turn.turn_id != turn_id:
        ctx.drop_input("SessionOpened", "not the current turn")
        return
    if turn.terminal:
        ctx.update_turn(prompt=Prompt.DONE)  # /stop (or /new) while the agent was starting
        settle(ctx)
        return
    if fresh:  # said before the round's first line: what the agent remembers changed
        ctx.emit(
            PostText("session.fresh", {}, turn.message_id, f"{turn_id}:fresh", turn_id=turn_id)
        )
    ctx.emit(SendPrompt(turn_id, session_id))


def on_turn_not_started(ctx: StepContext, turn_id: str) -> None:
    """The engine did not hand the turn to the agent (shutting down, or the conversation is
    another instance's): its message and those queued behind it stay journaled, and whoever
    runs the conversation next runs them. Nothing is said and no terminal is recorded; the
    conversation lets go of them, so no hint or heartbeat speaks for a round that never ran
    and no queued message starts here behind it."""
    turn = ctx.conv.turn
    if turn is None or turn.turn_id != turn_id:
        ctx.drop_input("TurnNotStarted", "not the current turn")
        return
    if turn.session_id is not None:
        ctx.drop_input("TurnNotStarted", "prompt already sent")
        return
    if turn.terminal:
        ctx.update_turn(prompt=Prompt.DONE)  # ended meanwhile (/stop): its end stands
        settle(ctx)
        return
    ctx.update(turn=None, state=ExecState.IDLE, queue=())


def on_session_not_reloaded(ctx: StepContext) -> bool:
    """The agent could not reload the turn's session before its prompt went out: ask once
    for a session opened anew (the conversation's, resumed if it can be now, else a new
    one, which `SessionOpened(fresh)` then says). False when that was asked already, or the
    turn is no longer one whose prompt may go out: the failure ends it then."""
    turn = ctx.turn
    if turn.terminal or turn.reopened or turn.session_id is not None:
        return False
    ctx.update_turn(reopened=True)
    ctx.emit(OpenSession(turn.turn_id))
    return True
