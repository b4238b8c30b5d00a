"""The reaction on a user's message tells the state of its round.

The ack (`React`) says received. While the round waits on the user (an approval card, a
question) its messages say waiting, and received again once the user answered. When the
round ends they say how: done (the agent ended it: its answer, or the end after a step
the user refused), stopped (the user's /stop or recall, an approval or question left
unanswered past its timeout, the conversation closed, the agent giving the prompt up as
cancelled: the round ended by a person, or for want of one, and said to be stopped), or
fault (the agent died, erred or was unavailable, the bridge's own
limits, a restart, a card Feishu refused, a voice not heard: a system problem).

Every message of the round follows it: the one that started it and those that joined it
(images and files held for its text, the typed reply to its question). A message waiting
in the queue keeps its ack until its own round; a command's message keeps its ack.

Each change is a `SetReaction`, emitted after what the user is shown of it (a round's end
reaction after its end signal); the engine keeps one reaction on a message at a time.
With `Options.state_reactions` off there is the ack alone, as before.
"""

from __future__ import annotations

from collections.abc import Iterable

from bridge.core.context import StepContext
from bridge.core.effects import SetReaction
from bridge.core.state import WAITING_USER_STATES, Ending, Outcome, Reaction, Turn

_STOPPED = frozenset(
    {
        Ending.USER_STOP,
        Ending.RECALL,
        Ending.APPROVAL_TIMEOUT,
        Ending.REPLY_TIMEOUT,
        Ending.CLOSED,
    }
)
_DONE = frozenset({Ending.COMPLETED, Ending.REFUSED})


def end_state(outcome: Outcome, ending: Ending) -> Reaction:
    """What a round's reaction says once it ended so."""
    if ending in _DONE:
        return Reaction.DONE
    if ending in _STOPPED or outcome is Outcome.CANCELLED:
        return Reaction.STOPPED  # (a cancelled round's line says it stopped)
    return Reaction.FAULT


def messages_of(turn: Turn) -> tuple[str, ...]:
    return (turn.message_id, *turn.joined)


def follow(ctx: StepContext) -> None:
    """After a step: the running round's messages say whether it waits on the user."""
    turn = ctx.conv.turn
    if not ctx.conv.options.state_reactions or turn is None or turn.terminal:
        return
    want = Reaction.WAITING if ctx.conv.state in WAITING_USER_STATES else Reaction.RECEIVED
    if turn.reaction is not want:
        ctx.update_turn(reaction=want)
        _set(ctx, messages_of(turn), want)


def ended(ctx: StepContext, message_ids: Iterable[str], outcome: Outcome, ending: Ending) -> None:
    """The round of these messages ended so (after its end signal). A recalled message is
    gone: only the messages that joined its round are changed."""
    if not ctx.conv.options.state_reactions:
        return
    ids = tuple(message_ids)
    if ending is Ending.RECALL:
        ids = ids[1:]
    _set(ctx, ids, end_state(outcome, ending))


def _set(ctx: StepContext, message_ids: Iterable[str], state: Reaction) -> None:
    ctx.emit(*(SetReaction(mid, state) for mid in message_ids))
