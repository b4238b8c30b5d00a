"""Reaching whoever must answer a card: Feishu's urgent notification (加急) once per card
left unanswered, or, when the app lacks the scope im:message.urgent, an @-mention of them on
the reminder line instead; and, in a group, the pause line naming whose turn it is.

Who: those who may click it (`clicks.may_answer`): the round's requester (for an approval,
only when requesters may approve their own) and the configured approvers. When: `Timings.
urge_after` after the card was shown (by default with the reminder). Once: `urged` on the
request, set when it is due whatever happens to the call.
"""

from __future__ import annotations

from dataclasses import replace

from bridge.core import presence
from bridge.core.context import StepContext
from bridge.core.delivery import Line
from bridge.core.effects import Urge
from bridge.core.inputs import UrgeRefused
from bridge.core.state import Conversation, ExecState, PendingApproval, Urgency
from bridge.core.text import format_elapsed


def answerers(conv: Conversation, *, approval: bool) -> tuple[str, ...]:
    """Everyone who may answer the round's approval (or question) card: the requester first
    (unless four eyes keep them off approvals), then the approvers, each once."""
    turn = conv.turn
    if turn is None:
        return ()
    requester = (turn.requester,) if conv.options.requester_may_approve or not approval else ()
    rest = sorted(conv.options.approvers - set(requester))
    return (*requester, *rest)


def in_group(conv: Conversation) -> bool:
    return conv.group or ":" in conv.key  # a topic thread is in a group


def pause_mentions(ctx: StepContext, *, approval: bool) -> tuple[str, ...]:
    """Whom the pause line names: in a group, those who may answer; in a private chat, no
    one (it is plainly the one person there)."""
    return answerers(ctx.conv, approval=approval) if in_group(ctx.conv) else ()


def _due(ctx: StepContext) -> tuple[PendingApproval, ...]:
    by = ctx.now - ctx.timings.urge_after
    return tuple(a for a in ctx.conv.approvals if not a.urged and _shown_by(a, by))


def _shown_by(approval: PendingApproval, at: float) -> bool:
    since = presence.waiting_since(approval)
    return since is not None and since <= at


def _mark_urged(ctx: StepContext, due: tuple[PendingApproval, ...]) -> None:
    ids = {a.request_id for a in due}
    approvals = tuple(
        replace(a, urged=True) if a.request_id in ids else a for a in ctx.conv.approvals
    )
    ctx.update(approvals=approvals)


def reminder_mentions(ctx: StepContext, *, approval: bool) -> tuple[str, ...]:
    """Without the urgent scope, the urge due with the reminder rides on its line: whom it
    @-mentions (the requests are marked urged), or no one."""
    if ctx.conv.options.urgency is not Urgency.MENTION:
        return ()
    if approval:
        due = _due(ctx)
        if not due:
            return ()
        _mark_urged(ctx, due)
    else:
        question = ctx.conv.question
        since = presence.waiting_since(question) if question is not None else None
        if question is None or question.urged or since is None:
            return ()
        if since + ctx.timings.urge_after > ctx.now:
            return ()
        ctx.update(question=replace(question, urged=True))
    return answerers(ctx.conv, approval=approval)


def approval_urge(ctx: StepContext) -> None:
    due = _due(ctx)
    assert due, "due only once a card was shown"
    _mark_urged(ctx, due)
    who = answerers(ctx.conv, approval=True)
    if not who:
        return
    if ctx.conv.options.urgency is Urgency.MENTION:
        approval_mention(ctx, who)
        return
    shown = [a for a in due if a.message_id is not None]
    ids = tuple(a.request_id for a in shown)
    messages = tuple(a.message_id for a in shown if a.message_id is not None)
    if messages:
        ctx.emit(Urge(ctx.turn.turn_id, ids, messages, who))


def reply_urge(ctx: StepContext) -> None:
    question = ctx.conv.question
    assert question is not None
    ctx.update(question=replace(question, urged=True))
    who = answerers(ctx.conv, approval=False)
    if not who:
        return
    if ctx.conv.options.urgency is Urgency.MENTION:
        reply_mention(ctx, who)
    elif question.message_id is not None:
        ctx.emit(Urge(ctx.turn.turn_id, (question.request_id,), (question.message_id,), who))


def approval_mention(ctx: StepContext, who: tuple[str, ...]) -> None:
    """The reminder line again, @-mentioning `who`."""
    shown = presence.first_shown(ctx.conv.approvals)
    assert shown is not None, "only once a card was shown"
    _mention(ctx, "presence.approval_reminder", shown, who)


def reply_mention(ctx: StepContext, who: tuple[str, ...]) -> None:
    question = ctx.conv.question
    assert question is not None
    shown = presence.waiting_since(question)
    assert shown is not None, "only once the card was shown"
    _mention(ctx, "presence.reply_reminder", shown, who)


def _mention(ctx: StepContext, key: str, shown: float, who: tuple[str, ...]) -> None:
    left = shown + ctx.timings.approval_timeout - ctx.now
    remaining = format_elapsed(left, round_up=True)
    ctx.say(key, {"remaining": remaining}, kind="urge", line=Line.PAUSE, mentions=who)


def on_urge_refused(ctx: StepContext, event: UrgeRefused) -> None:
    """Feishu refused the urgent notification (for the scope, or otherwise): from now on this
    conversation mentions, and the requests still waiting get their @-mention line now (one
    line)."""
    if ctx.conv.options.urgency is Urgency.APP:
        ctx.update(options=replace(ctx.conv.options, urgency=Urgency.MENTION))
    conv, turn = ctx.conv, ctx.conv.turn
    if turn is None or turn.turn_id != event.turn_id or turn.terminal:
        ctx.drop(event, "not the current turn")
        return
    asked = set(event.request_ids)
    question = conv.question
    if conv.state is ExecState.WAITING_APPROVAL and any(
        a.request_id in asked for a in conv.approvals
    ):
        approval_mention(ctx, answerers(conv, approval=True))
    elif question is not None and question.request_id in asked:
        reply_mention(ctx, answerers(conv, approval=False))
    else:
        ctx.drop(event, "request no longer pending")


def on_urgent_unavailable(ctx: StepContext) -> None:
    if ctx.conv.options.urgency is Urgency.APP:
        ctx.update(options=replace(ctx.conv.options, urgency=Urgency.MENTION))
