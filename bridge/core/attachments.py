"""Images and files from the chat: one sent without text is held (said in one line) and
joins that sender's next text in the conversation; one that cannot reach the agent is said
in one line, and its turn goes on without it."""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.effects import MarkMessageDone, PostText
from bridge.core.inputs import AttachmentFailed, UserMessage
from bridge.core.state import Attachment
from bridge.core.text import Params
from bridge.core.voice import refuse_off, speaks


def hold(ctx: StepContext, msg: UserMessage) -> bool:
    """An attachment-only message is kept for its sender's next text; True when held (or,
    voice being off, refused). A voice message is words: it takes what is held."""
    if refuse_off(ctx, msg):
        return True
    if msg.text.strip() or not msg.attachments or speaks(msg):
        return False
    held = (*ctx.conv.held, *((msg.sender, a) for a in msg.attachments))
    ctx.update(held=held)
    mine = sum(1 for sender, _ in held if sender == msg.sender)
    mid = msg.message_id
    # Not marked done: a restart finds it in the journal and holds it again (the line,
    # already posted, is not posted twice); it is done when a text takes it.
    ctx.emit(PostText("attachment.held", {"count": mine}, mid, f"{mid}:held"))
    return True


def take_held(ctx: StepContext, msg: UserMessage) -> tuple[Attachment, ...]:
    """The sender's held attachments, then the message's own; the held ones are let go."""
    mine = tuple(a for sender, a in ctx.conv.held if sender == msg.sender)
    if mine:
        ctx.update(held=tuple(h for h in ctx.conv.held if h[0] != msg.sender))
        for held_id in dict.fromkeys(a.message_id for a in mine):
            ctx.emit(MarkMessageDone(held_id))
    # A quote-reply to a held image carries it a second time: once is enough.
    return tuple({(a.message_id, a.key): a for a in (*mine, *msg.attachments)}.values())


def is_attachment_only(msg: object) -> bool:
    if not isinstance(msg, UserMessage) or msg.text.strip() or not msg.attachments:
        return False
    return not speaks(msg)


def on_attachment_failed(ctx: StepContext, event: AttachmentFailed) -> None:
    turn = ctx.conv.turn
    if turn is None or turn.turn_id != event.turn_id:
        ctx.drop(event, "not the current turn")
        return
    key = "attachment.too_large" if event.too_large else "attachment.failed"
    params: Params = {"name": event.name, "limit": event.limit_mb}
    idem = ctx.post_key("attachment")
    ctx.emit(PostText(key, params, turn.message_id, idem, turn_id=turn.turn_id))
