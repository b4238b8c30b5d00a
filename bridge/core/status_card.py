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
from bridge.core.pages import open_fence, page_end, reopened, weight
from bridge.core.snapshot import footer
from bridge.core.state import CardStage, ExecState, LiveCard, PresenceStyle, ToolLine, Turn
from bridge.core.text import NOTHING_WRITTEN, Params
from bridge.runtime.events import PlanEntry

# A card's JSON may hold 30 KB (Feishu's limit for a card). The answer is paged: each card
# carries at most PAGE_WEIGHT of it, counted as `weight` counts (the bytes it takes once
# escaped for card Markdown and JSON, over-counted), which leaves the status card's own lines
# room, and at most PAGE_CHARS characters (a CJK page fills by weight first, an English one
# by characters about as soon). A page that fills is closed and never changes again; the
# answer continues on a continuation card posted right below, streamed the same way.
PAGE_WEIGHT = 12_000
PAGE_CHARS = 10_000
MAX_PAGES = 8  # cards one answer may fill; what outgrows them follows as messages as it fills
MAX_TOOLS = 5  # tool calls listed, newest last
_PHASES: Mapping[ExecState, CardPhase] = {
    ExecState.WAITING_APPROVAL: CardPhase.WAITING_APPROVAL,
    ExecState.WAITING_REPLY: CardPhase.WAITING_REPLY,
    ExecState.RECOVERING: CardPhase.RECOVERING,
}


def card_key(turn_id: str, page: int = 0) -> str:
    """The status card's key; a continuation card's for page 1 on."""
    return f"{turn_id}:status" if page == 0 else f"{turn_id}:status:{page + 1}"


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


def page_text(card: LiveCard, answer: str, page: int) -> str:
    """The part of `answer` that card `page` shows."""
    bounds = (0, *card.pages)
    if page >= len(bounds):
        return ""
    end = bounds[page + 1] if page + 1 < len(bounds) else None
    if end is None and card.spill is not None and card.spill >= bounds[page]:
        end = card.spill
    return answer[bounds[page] : end]


def view(
    ctx: StepContext,
    *,
    phase: CardPhase | None = None,
    end_key: str | None = None,
    end_params: Params | None = None,
    page: int = 0,
    answer: str | None = None,
) -> CardView:
    turn = ctx.turn
    card = turn.card
    text = page_text(card, answer_of(turn) if answer is None else answer, page)
    last = page == len(card.pages)
    cut = last and card.spill is not None
    if page > 0:
        # A continuation shows its page of the answer only: nothing else of the turn's
        # moves it, so a view whose text did not change is the view it already shows.
        code = card.fences[page - 1] if page <= len(card.fences) else ""
        return CardView(CardPhase.WORKING, 0.0, text=text, cut=cut, page=page, code=code)
    return CardView(
        phase=phase or _PHASES.get(ctx.conv.state, CardPhase.WORKING),
        elapsed=ctx.now - turn.started_at,
        tools=card.tools,
        plan=card.plan,
        text=text,
        cut=cut,
        end_key=end_key,
        end_params=dict(end_params or {}),
        closed=not last,
    )


def show(ctx: StepContext) -> None:
    """Post the card, or bring it up to date (the engine coalesces and throttles)."""
    _render(ctx, status=True)
    card = evolve(ctx.turn.card, {"stage": CardStage.SHOWN})
    ctx.update_turn(card=card, announced=True, last_posted_at=ctx.now)


def refresh(ctx: StepContext) -> None:
    """Bring a card that is already up to date with the turn's state; no card, nothing."""
    if in_card_style(ctx) and ctx.turn.card.stage is CardStage.SHOWN:
        show(ctx)


def typed(ctx: StepContext) -> None:
    """The agent wrote more (the typewriter), in card style: the page being written grows,
    and only its card changes. Past MAX_PAGES the rest follows as messages, a page's worth
    as each fills, and the cards change no more."""
    card = ctx.turn.card
    if card.stage is CardStage.SHOWN:
        _render(ctx, status=False)
    elif card.text_since is None:
        ctx.update_card(text_since=ctx.now)  # the card comes soon (presence.deadlines)


def _render(ctx: StepContext, *, status: bool) -> None:
    """The views the answer's growth calls for: pages that filled close (each card's last
    view), the page being written, and the status card when asked or when it is that page."""
    answer = answer_of(ctx.turn)
    closed = _paginate(ctx, answer)
    card = ctx.turn.card
    live = len(card.pages) if card.spill is None else None
    if status or live == 0 or 0 in closed:
        _page(ctx, 0, answer)
    for page in closed:
        if page > 0:
            _page(ctx, page, answer, final=True)
    if live:
        _page(ctx, live, answer)


def _paginate(ctx: StepContext, answer: str) -> list[int]:
    """Close every page `answer` has filled (a long chunk may fill several); the pages closed.
    Past the last card, each page's worth that fills is posted as a message at once. A page
    is weighed only once it may have filled: after a weighing it may grow by a quarter of its
    room (no character weighs more than 4) before the next."""
    closed: list[int] = []
    while True:
        card = ctx.turn.card
        spilling = card.spill is not None
        start = card.spilled if spilling else card.start
        size = len(answer) - start
        if size < card.weigh_at:
            return closed
        room = min(PAGE_WEIGHT - weight(answer[start:]), 4 * (PAGE_CHARS - size))
        if room >= 0:
            ctx.update_card(weigh_at=size + max(1, room // 4))
            return closed
        end = start + page_end(answer[start:], PAGE_CHARS, PAGE_WEIGHT)
        if spilling:
            turn = ctx.turn
            idem = f"{turn.turn_id}:more:{start}"
            text = reopened(card.spill_fence, answer[start:end])
            ctx.emit(RelayAgentText(text, turn.message_id, idem, turn_id=turn.turn_id))
            fence = open_fence(answer[start:end], card.spill_fence)
            ctx.update_card(spilled=end, spill_fence=fence, weigh_at=0)
            continue
        closed.append(len(card.pages))
        opened = card.fences[-1] if card.fences else ""
        fence = open_fence(answer[start:end], opened)
        if len(card.pages) + 1 < MAX_PAGES:
            ctx.update_card(pages=(*card.pages, end), fences=(*card.fences, fence), weigh_at=0)
        else:
            ctx.update_card(spill=end, spilled=end, spill_fence=fence, weigh_at=0)


def _page(ctx: StepContext, page: int, answer: str, *, final: bool = False) -> None:
    turn = ctx.turn
    shown = view(ctx, page=page, answer=answer)
    key = card_key(turn.turn_id, page)
    ctx.emit(ShowStatusCard(turn.turn_id, turn.message_id, key, shown, final=final))


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
    answer = answer_of(ctx.turn)
    for page in _paginate(ctx, answer):
        if page > 0:
            _page(ctx, page, answer, final=True)
    turn = ctx.turn
    ended_key = key if key is not None or answer else "presence.ended_empty"
    last = view(ctx, phase=CardPhase.ENDED, end_key=ended_key, end_params=params, answer=answer)
    last = replace(last, footer=footer(ctx))
    tid, reply_to = turn.turn_id, turn.message_id
    ctx.emit(ShowStatusCard(tid, reply_to, card_key(tid), last, final=True))
    spill = turn.card.spill
    if turn.card.pages and spill is None:  # the page being written ends too
        _page(ctx, len(turn.card.pages), answer, final=True)  # as shown: no change to make
    card = evolve(turn.card, {"text": ""})
    ctx.update_turn(text=NOTHING_WRITTEN, card=card)
    ctx.update_progress(pending=None)
    rest = answer[turn.card.spilled :] if spill is not None else ""
    # Its first line's indent stays: it may be a line of code.
    rest = reopened(turn.card.spill_fence, rest.lstrip("\n").rstrip()) if rest.strip() else ""
    if rest:  # what the cards could not carry, and only that
        idem = end_id if key is None else ctx.post_key("reply")
        ctx.emit(RelayAgentText(rest, reply_to, idem, final=key is None, turn_id=tid))
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
    page = event.view.page
    if event.final or not current:
        if event.view.text:
            idem = f"{event.turn_id}:card-text" + (f":{page + 1}" if page else "")
            ctx.emit(RelayAgentText(event.view.text, event.reply_to, idem, turn_id=event.turn_id))
        return
    assert turn is not None
    if page > 0:
        # A continuation refused: the cards before it stand, and from its first word on the
        # answer follows as messages at the end.
        start = turn.card.pages[page - 1] if page - 1 < len(turn.card.pages) else None
        if start is not None and turn.card.spill is None:
            kept = page - 1
            fences = turn.card.fences
            ctx.update_card(
                pages=turn.card.pages[:kept],
                fences=fences[:kept],
                spill=start,
                spilled=start,
                spill_fence=fences[kept] if kept < len(fences) else "",
            )
        return
    ctx.update_card(stage=CardStage.FAILED)
    moved = turn.card.text.strip()
    if moved:
        idem = ctx.post_key("reply")
        ctx.emit(RelayAgentText(moved, turn.message_id, idem, turn_id=turn.turn_id))
        ctx.update_card(text="")
    if ctx.conv.state in (ExecState.WAITING_RESPONSE, ExecState.STREAMING):
        ctx.say("presence.running_hint", kind="hint", line=Line.HINT)
