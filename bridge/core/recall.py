"""A message the user recalled in Feishu.

Queued: it never runs; its queue line is edited to say so. The running round's own message:
the round is stopped (the agent asked to cancel) and one line says why, in the chat, since
the recalled message can no longer be replied to. Answered or unknown: nothing changes —
an answer already given cannot be taken back with the question.
"""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.effects import EditText, MarkMessageDone
from bridge.core.inputs import MessageRecalled
from bridge.core.lifecycle import cancel
from bridge.core.state import Ending, Outcome


def on_recalled(ctx: StepContext, event: MessageRecalled) -> None:
    mid = event.message_id
    queue = ctx.conv.queue
    if any(q.message_id == mid for q in queue):
        ctx.update(queue=tuple(q for q in queue if q.message_id != mid))
        ctx.emit(
            EditText(f"{mid}:queued", "presence.recalled_queued", {}),
            MarkMessageDone(mid),
        )
        return
    turn = ctx.conv.turn
    if turn is not None and turn.message_id == mid and not turn.terminal:
        cancel(
            ctx,
            Outcome.CANCELLED,
            "presence.recalled",
            detail="recalled by the user",
            ending=Ending.RECALL,
        )
        return
    ctx.drop(event, "recalled message already answered or not held")
