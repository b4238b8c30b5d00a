"""Card style (`BRIDGE_PRESENCE_STYLE=card`): one live status card per turn.

The card replaces the lines that only say "still working" — the running hint, heartbeats,
progress lines and commentary — and carries the answer as it is written. Everything that
asks something of a person or reports a fault stays a message as well (the waiting lines,
recovering, stopped, failures), so a phone still gets the notification that matters.

When it appears: at the first-hint moment or the first real progress, whichever is first; a
turn that answers before either gets no card, only its answer. Every end path finalizes it
(`finish`), a restart finalizes the cards of turns that died with the process, and a card
Feishu refuses in every form hands the turn back to lines (`StatusCardFailed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from bridge.core.context import StepContext, evolve
from bridge.core.delivery import Line
from bridge.core.effects import CardPhase, CardView, PostText, RelayAgentText, ShowStatusCard
from bridge.core.inputs import StatusCardFailed
from bridge.core.snapshot import footer
from bridge.core.state import CardStage, ExecState, PresenceStyle, ToolLine, Turn
from bridge.core.text import NOTHING_WRITTEN, Params
from bridge.runtime.events import PlanEntry

# Answer characters a card shows; a longer answer shows its head and follows as messages.
# 3,000 CJK characters are 9 KB, far inside a card's 30 KB with the rest of the card.
CARD_TEXT_LIMIT = 3000
MAX_TOOLS = 5  # tool calls listed, newest last

_PHASES: Mapping[ExecState, CardPhase] = {
    ExecState.WAITING_APPROVAL: CardPhase.WAITING_APPROVAL,
    ExecState.WAITING_REPLY: CardPhase.WAITING_REPLY,
    ExecState.RECOVERING: CardPhase.RECOVERING,
}


def card_key(turn_id: str) -> str:
    return f"{turn_id}:status"


def in_card_style(ctx: StepContext) -> bool:
    turn = ctx.conv.turn
    return (
        ctx.conv.options.presence_style is PresenceStyle.CARD
        and turn is not None
        and turn.card.stage is not CardStage.FAILED
    )


def answer_of(turn: Turn) -> str:
    """The agent's words of this turn so far: what the card took, then what is held."""
    held = str(turn.text).strip()
    moved = turn.card.text.strip()
    return f"{moved}\n\n{held}" if moved and held else moved or held


def view(
    ctx: StepContext,
    *,
    phase: CardPhase | None = None,
    end_key: str | None = None,
    end_params: Params | None = None,
) -> CardView:
    turn = ctx.turn
    answer = answer_of(turn)
    return CardView(
        phase=phase or _PHASES.get(ctx.conv.state, CardPhase.WORKING),
        elapsed=ctx.now - turn.started_at,
        tools=turn.card.tools,
        plan=turn.card.plan,
        text=answer[:CARD_TEXT_LIMIT],
        cut=len(answer) > CARD_TEXT_LIMIT,
        end_key=end_key,
        end_params=dict(end_params or {}),
    )


def show(ctx: StepContext) -> None:
    """Post the card, or bring it up to date (the engine coalesces and throttles)."""
    turn = ctx.turn
    shown = view(ctx)
    ctx.emit(ShowStatusCard(turn.turn_id, turn.message_id, card_key(turn.turn_id), shown))
    card = evolve(turn.card, {"stage": CardStage.SHOWN, "cut": shown.cut})
    ctx.update_turn(card=card, announced=True, last_posted_at=ctx.now)


def refresh(ctx: StepContext) -> None:
    """Bring a card that is already up to date with the turn's state; no card, nothing."""
    if in_card_style(ctx) and ctx.turn.card.stage is CardStage.SHOWN:
        show(ctx)


def typed(ctx: StepContext) -> None:
    """The agent wrote more (the typewriter). Once the card shows the head of an answer too
    long for it, more text changes nothing there: no view, and no copy of a growing text
    per chunk (the whole answer is read once, at the end)."""
    turn = ctx.turn
    if turn.card.cut and len(turn.card.text) + turn.text.size > CARD_TEXT_LIMIT:
        return
    refresh(ctx)


def take_commentary(ctx: StepContext) -> None:
    """Agent text before a tool call or a request moves into the card (posting it)."""
    held = str(ctx.turn.text).strip()
    if held:
        card = ctx.turn.card
        moved = card.text.strip()
        text = f"{moved}\n\n{held}" if moved else held
        card = evolve(card, {"text": text})
        ctx.update_turn(card=card, text=NOTHING_WRITTEN)
        ctx.update_progress(commentary_held=False)
        show(ctx)
    else:
        ctx.update_progress(commentary_held=False)


def note_tool(ctx: StepContext, tool_call_id: str, title: str | None, status: str | None) -> None:
    tools = list(ctx.turn.card.tools)
    at = next((i for i, t in enumerate(tools) if t.tool_call_id == tool_call_id), None)
    if at is None:
        if not title:
            return  # an update of a call the card never listed
        tools.append(ToolLine(tool_call_id, title, status or "pending"))
    else:
        old = tools[at]
        tools[at] = ToolLine(tool_call_id, title or old.title, status or old.status)
    ctx.update_card(tools=tuple(tools[-MAX_TOOLS:]))


def note_plan(ctx: StepContext, entries: tuple[PlanEntry, ...]) -> None:
    ctx.update_card(plan=entries)


def finalize(ctx: StepContext, key: str | None, params: Params | None, end_id: str) -> bool:
    """The turn's end in card style (called by `finish` before anything else is posted).
    False when the turn has no card: `finish` posts its end in lines as usual."""
    if not (in_card_style(ctx) and ctx.turn.card.stage is CardStage.SHOWN):
        return False
    turn = ctx.turn
    answer = answer_of(turn)
    ended_key = key if key is not None or answer else "presence.ended_empty"
    last = view(ctx, phase=CardPhase.ENDED, end_key=ended_key, end_params=params)
    last = replace(last, footer=footer(ctx))
    tid, reply_to = turn.turn_id, turn.message_id
    ctx.emit(ShowStatusCard(tid, reply_to, card_key(tid), last, final=True))
    card = evolve(turn.card, {"text": ""})
    ctx.update_turn(text=NOTHING_WRITTEN, card=card)
    ctx.update_progress(pending=None)
    if last.cut:  # the card shows the head and says the rest follows
        idem = end_id if key is None else ctx.post_key("reply")
        ctx.emit(RelayAgentText(answer, reply_to, idem, final=key is None, turn_id=tid))
    if ended_key is not None:
        # A system line stays a message too: stopped, failed, or nothing to say.
        ctx.emit(PostText(ended_key, dict(params or {}), reply_to, end_id, True, tid))
    return True


def interrupted_by_restart(ctx: StepContext, turn_id: str, reply_to: str) -> None:
    """A turn that died with the process: its card, if it had one, must not say working."""
    if ctx.conv.options.presence_style is not PresenceStyle.CARD:
        return
    last = CardView(CardPhase.ENDED, elapsed=0.0, end_key="presence.unrecoverable")
    ctx.emit(ShowStatusCard(turn_id, reply_to, card_key(turn_id), last, True, True))


def on_card_failed(ctx: StepContext, event: StatusCardFailed) -> None:
    """Feishu refused the card in every form: nothing it was to show may be lost."""
    turn = ctx.conv.turn
    current = turn is not None and turn.turn_id == event.turn_id and not turn.terminal
    if event.final or not current:
        if event.view.text and not event.view.cut:  # a cut answer already followed in full
            idem = f"{event.turn_id}:card-text"
            ctx.emit(RelayAgentText(event.view.text, event.reply_to, idem, turn_id=event.turn_id))
        return
    assert turn is not None
    ctx.update_card(stage=CardStage.FAILED)
    moved = turn.card.text.strip()
    if moved:
        idem = ctx.post_key("reply")
        ctx.emit(RelayAgentText(moved, turn.message_id, idem, turn_id=turn.turn_id))
        ctx.update_card(text="")
    if ctx.conv.state in (ExecState.WAITING_RESPONSE, ExecState.STREAMING):
        ctx.say("presence.running_hint", kind="hint", line=Line.HINT)
