"""Voice messages. With `BRIDGE_VOICE=transcribe` an audio message arrives as a `voice`
attachment: its words are the turn's text, so it is never held; the turn runner hears it
before the prompt, and the user sees what was understood (one quoted line) before anything
else of the round, or one line saying why nothing was. With `off` it arrives as
`voice_off` and is refused politely. With `file` it stays an `audio` file, as any file."""

from __future__ import annotations

from typing import Final

from bridge.core.context import StepContext
from bridge.core.effects import MarkMessageDone, PostText
from bridge.core.inputs import UserMessage, VoiceHeard
from bridge.core.lifecycle import finish, settle
from bridge.core.state import Ending, Outcome, Prompt

VOICE: Final = "voice"
VOICE_OFF: Final = "voice_off"
FAILURE_KEYS: Final = {
    "too_long": "voice.too_long",
    "refused": "voice.refused",
    "failed": "voice.failed",
    "silent": "voice.silent",
    "undecodable": "voice.undecodable",
    "unfetched": "voice.unfetched",
}


def speaks(msg: UserMessage) -> bool:
    """The message carries a voice to hear: it makes a turn of its own, text or not."""
    return any(a.kind == VOICE for a in msg.attachments)


def refuse_off(ctx: StepContext, msg: UserMessage) -> bool:
    """Voice is off: the voice message is answered with one line and goes no further."""
    if not any(a.kind == VOICE_OFF for a in msg.attachments):
        return False
    mid = msg.message_id
    ctx.emit(PostText("voice.off", {}, mid, f"{mid}:voice-off"), MarkMessageDone(mid))
    return True


def one_line(text: str) -> str:
    return " ".join(text.split())


def on_voice_heard(ctx: StepContext, event: VoiceHeard) -> None:
    turn = ctx.conv.turn
    if turn is None or turn.turn_id != event.turn_id or turn.session_id is not None:
        ctx.drop(event, "not the current turn")
        return
    if turn.terminal:  # stopped or recalled while it was heard: the round is already over
        if event.failure:
            ctx.update_turn(prompt=Prompt.DONE)  # no prompt will go out
            settle(ctx)
        return
    if not event.failure:
        ctx.say("voice.heard", {"text": one_line(event.text)}, kind="voice")
        return
    # Nothing reaches the agent: this line is the round's one end signal.
    key = FAILURE_KEYS.get(event.failure, "voice.failed")
    ctx.update_turn(prompt=Prompt.DONE)
    params = {"limit": event.limit_seconds}
    finish(ctx, Outcome.FAILED, key, params, detail=f"voice {event.failure}", ending=Ending.VOICE)
