"""The step under construction, shared by the handler modules of the machine."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from bridge.core import presence
from bridge.core.delivery import Lane, Line, Terms, line_terms, plain_terms
from bridge.core.effects import (
    ClearTimer,
    Dropped,
    EditText,
    Effect,
    PostApprovalCard,
    PostQuestion,
    PostText,
    React,
    RecordTerminal,
    RelayAgentText,
    SendFile,
    SetReaction,
    SetTimer,
    ShowDiffs,
    ShowStatusCard,
    UpdateApprovalCard,
    UpdateQuestionCard,
    Urge,
)
from bridge.core.presence import Timings
from bridge.core.state import (
    Conversation,
    LiveCard,
    Outcome,
    Progress,
    Turn,
)
from bridge.core.text import Params

_V = TypeVar("_V", Conversation, Turn, LiveCard, Progress)


def evolve(value: _V, changes: dict[str, Any]) -> _V:
    """`dataclasses.replace` for the core's frozen state values, without its per-field
    introspection (the hottest line of `step`): a copy of the instance dict, updated. Only
    for values with no `__post_init__`."""
    if not changes.keys() <= value.__dataclass_fields__.keys():
        raise TypeError(f"{type(value).__name__} has no field {set(changes) - set(value.__dict__)}")
    new = object.__new__(type(value))
    fields = new.__dict__
    fields.update(value.__dict__)
    fields.update(changes)
    return new


class StepContext:
    """The step under construction: a rebinding of immutable values plus an effect list."""

    def __init__(self, conv: Conversation, now: float, timings: Timings) -> None:
        self.conv = conv
        self.now = now
        self.timings = timings
        self.out: list[Effect] = []
        # While a turn's end signal is emitted: the outcome it ends with.
        self.ending: Outcome | None = None

    @property
    def turn(self) -> Turn:
        turn = self.conv.turn
        assert turn is not None, "caller checks that a turn exists"
        return turn

    def update(self, **changes: Any) -> None:
        self.conv = evolve(self.conv, changes)

    def update_turn(self, **changes: Any) -> None:
        self.conv = evolve(self.conv, {"turn": evolve(self.turn, changes)})

    def update_card(self, **changes: Any) -> None:
        self.update_turn(card=evolve(self.turn.card, changes))

    def update_progress(self, **changes: Any) -> None:
        self.update_turn(progress=evolve(self.turn.progress, changes))

    def emit(self, *effects: Effect) -> None:
        key = self.conv.key
        turn = self.conv.turn
        clicks = self.conv.menu_clicks
        for effect in effects:
            terms = terms_for(effect, key, self.ending)
            if terms is not None and clicks and _answers_a_click(effect, clicks):
                terms = replace(terms, reply=False)  # no message to reply to: a new one
            made = effect if terms is None else _with(effect, "terms", terms)
            if turn is not None and turn.begun_here:
                made = _of_this_process(made, turn)
            self.out.append(made)

    def drop(self, event: object, reason: str) -> None:
        self.drop_input(type(event).__name__, reason)

    def drop_input(self, name: str, reason: str) -> None:
        turn_id = self.conv.turn.turn_id if self.conv.turn else None
        self.out.append(Dropped(reason, name, turn_id))

    def post_key(self, kind: str) -> str:
        seq = self.turn.seq + 1
        self.update_turn(seq=seq)
        return f"{self.turn.turn_id}:{kind}:{seq}"

    def say(
        self,
        key: str,
        params: Params | None = None,
        *,
        kind: str,
        line: Line = Line.SYSTEM,
        mentions: tuple[str, ...] = (),
    ) -> None:
        """A status line for the current turn, in reply to the message it answers;
        `mentions`: open ids it @-mentions ahead of its text."""
        idem = self.post_key(kind)
        turn = self.turn
        tid = turn.turn_id
        post = PostText(
            key,
            dict(params or {}),
            turn.message_id,
            idem,
            turn_id=tid,
            mentions=mentions,
            line=line,
        )
        self.emit(post)
        self.update_turn(last_posted_at=self.now)

    def sync_timers(self) -> None:
        want = presence.deadlines(self.conv, self.timings)
        have = dict(self.conv.timers)
        for name in presence.TIMER_ORDER:
            if name in have and name not in want:
                self.out.append(ClearTimer(name))
            elif name in want and have.get(name) != want[name]:
                self.out.append(SetTimer(name, want[name]))
        timers = tuple((n, want[n]) for n in presence.TIMER_ORDER if n in want)
        self.update(timers=timers)


def terms_for(effect: Effect, key: str, ends: Outcome | None = None) -> Terms | None:
    """How an effect that reaches Feishu is delivered (see `delivery.py`); None for the
    rest, and for one whose terms were set where it was made. `ends`: the outcome of the
    turn whose end signal is being emitted."""

    def ending(final: bool) -> Outcome | None:
        return (ends or Outcome.COMPLETED) if final else None

    # A line, the agent's words and `/diff` must survive a crash (a presence line is kept
    # too: its terms tell the next process to drop it).
    match effect:
        case PostText(line=line, final=final, turn_id=turn_id, terms=None):
            return line_terms(line, key, turn_id, ends=ending(final))
        case RelayAgentText(final=final, turn_id=turn_id, terms=None):
            lane = Lane.ENDING if final else Lane.ANSWER
            return plain_terms(lane, key, turn_id, ends=ending(final), durable=True)
        case ShowStatusCard(final=final, terms=None):
            # The first post is the turn's hint; its refreshes take the refresh lane.
            return plain_terms(Lane.ENDING if final else Lane.HINT, key, ends=ending(final))
        case React(terms=None):
            return plain_terms(Lane.HINT, key)
        case SetReaction(terms=None):
            # Lowest: a reaction's change never holds an answer or a card.
            return plain_terms(Lane.REFRESH, key)
        case (
            PostApprovalCard(terms=None)
            | PostQuestion(terms=None)
            | UpdateApprovalCard(terms=None)
            | UpdateQuestionCard(terms=None)
            | Urge(terms=None)
        ):
            return plain_terms(Lane.CARD, key)
        case ShowDiffs(terms=None):
            return plain_terms(Lane.ANSWER, key, durable=True)
        case EditText(terms=None) | SendFile(terms=None):
            return plain_terms(Lane.ANSWER, key)
    return None


def _answers_a_click(effect: Effect, clicks: tuple[str, ...]) -> bool:
    """The effect answers a bot-menu click (its reply target is the click's id). Only lines
    and words answer one: a click names no command that posts a card, a file or a diff."""
    match effect:
        case PostText(reply_to=target) | RelayAgentText(reply_to=target):
            return target in clicks
    return False


def _of_this_process(effect: Effect, turn: Turn) -> Effect:
    """What the executor would otherwise look up in the store about a turn this process
    began: that none of its posts went out before, and when it began."""
    match effect:
        case PostText(turn_id=turn_id) | RelayAgentText(turn_id=turn_id) if turn_id == turn.turn_id:
            return _with(effect, "fresh", True)
        case RecordTerminal(turn_id=turn_id) if turn_id == turn.turn_id:
            return _with(effect, "started_at", turn.started_at)
    return effect


def _with(effect: Effect, name: str, value: object) -> Effect:
    # A copy of a fresh frozen value with one field set: `replace` without its per-field
    # introspection (emit runs for every effect of every step).
    new = object.__new__(type(effect))
    new.__dict__.update(effect.__dict__)
    new.__dict__[name] = value
    return new
