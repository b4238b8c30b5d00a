"""The conversations' actors: one per conversation key, the live ones of this process held
by `Conversations`. An actor feeds inputs to the pure core and performs what it returns.

`feed` is synchronous — it runs `step` and queues the effects — so every input, a runtime
update or a card click, is decided the moment it arrives, in arrival order, and a card
callback gets its answer without waiting for slower Feishu calls. One performer task per
actor then carries the effects out strictly in order (the ack reaction before any text).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from bridge.clock import Clock, Timers
from bridge.core import Conversation, Options, Timings, snapshot, step
from bridge.core.delivery import Lane, Supersede, Terms, plain_terms
from bridge.core.effects import (
    ClearTimer,
    Dropped,
    Effect,
    React,
    SetTimer,
)
from bridge.core.inputs import CoreEvent, TimerFired
from bridge.tasks import TaskTracker

log = logging.getLogger(__name__)

# Told each conversation's new snapshot after every step, in order (the operator's projection,
# the scheduler: a conversation that just went idle may owe a scheduled prompt).
Watcher = Callable[[str, dict[str, object]], object]

# Superseded groups an actor that is never idle keeps before it forgets those older than
# anything still queued (then twice as many as it kept): each turn adds two or three.
GROUPS_KEPT = 64


@dataclass(frozen=True)
class Trace:
    """One entry of a turn's timeline in the store (never message text)."""

    turn_id: str
    kind: str
    detail: str = ""


@dataclass(frozen=True)
class Owed:
    """An effect owed before a restart, performed by its own handler ahead of anything newer
    of its conversation. `since`: when it was first owed (its outage window runs from then)."""

    effect: Effect
    since: float


@dataclass(frozen=True)
class Owe:
    """Record an effect whose terms say durable as owed the moment the core decides it (on
    the work lane, which no outage holds), so a crash while it waits for Feishu cannot lose
    it."""

    effect: Effect


Work = Effect | Trace | Owed | Owe


@dataclass
class _Lane:
    name: str
    queue: deque[Work] = field(default_factory=deque)
    acks: deque[Work] = field(default_factory=deque)  # taken first, in their own order
    task: asyncio.Task[None] | None = None

    def __bool__(self) -> bool:
        return bool(self.acks or self.queue)

    def take(self) -> Work:
        return self.acks.popleft() if self.acks else self.queue.popleft()


class Route(Enum):
    """Where the actor puts an effect (the executor's handler table says which)."""

    # Back to whoever fed the input (the card callback, the turn runner), never queued.
    CALLER = "caller"
    # What a user sees, through Feishu, and the turn's timeline and end record, which follow
    # what was shown in order (the end record carries the end signal's outbox mark).
    SHOWN = "shown"
    # The agent's work and the store's records: never behind an outage.
    WORK = "work"


def terms_of(actor: ConversationActor, work: Work) -> Terms:
    """The terms the core gave `work`; for one made outside a step (a test, a replay), those
    of a post that must reach the conversation's chat."""
    terms: Terms | None = getattr(work, "terms", None)
    return terms if terms is not None else plain_terms(Lane.ANSWER, actor.key)


class ConversationActor:
    def __init__(
        self,
        key: str,
        *,
        conv: Conversation,
        timings: Timings,
        clock: Clock,
        perform: Callable[[ConversationActor, Work], Any],
        route: Callable[[Work], Route],
        watchers: Sequence[Watcher],
        tasks: TaskTracker,
    ) -> None:
        self.key = key
        self.conv = conv
        self._timings = timings
        self._clock = clock
        self._perform = perform
        self._route = route
        self._snapshot_watchers = watchers
        # Two lanes, each performed in order by its own task. What the user is shown goes
        # through Feishu and may wait out an outage (delivery.py); the agent's work (a prompt,
        # a cancel, an answer to the agent, the store's records) never waits behind it.
        # Acks jump their lane: a reaction only has to precede its own message's texts,
        # which are always queued after it, so a busy chat's acks never wait behind replies.
        self._shown = _Lane("shown")
        self._work = _Lane("work")
        # Durable effects fed and not yet performed, by idempotency key: when their record was
        # written (by the work lane, or before a restart), so that their handler need not
        # write it again (outbox.py); None while it is not. Held only until the handler is
        # done: a record that lands after its post was made is not kept.
        self.owed_at: dict[str, float | None] = {}
        # Its end signal just posted, the outbox mark (idempotency key, message ids) not yet
        # written: the effect after it is its turn's RecordTerminal (core/lifecycle.py
        # `finish`), which writes it with the turn's end in one transaction. Written on its
        # own first if anything else comes.
        self.end_mark: tuple[str, tuple[str, list[str]]] | None = None
        self._watchers: list[asyncio.Future[None]] = []  # `next_shown`'s waiters
        # Supersession (core/delivery.py): each queued work's place in the order it was fed,
        # and the latest place at which each group was superseded, always (`_moot`) or
        # while the budget is short (`_news`). Forgotten when nothing is left to perform, or
        # once older than every queued work (a conversation that is never idle).
        self._fed = 0
        self._place: dict[str, int] = {}  # a droppable work's idempotency key -> its place
        self._moot: dict[str, int] = {}
        self._news: dict[str, int] = {}
        self._groups_kept = GROUPS_KEPT
        self._performing = 0
        self._timers = Timers(clock, self._timer_fired)
        self._tasks = tasks
        self._idle = asyncio.Event()
        self._idle.set()

    # -- inputs ------------------------------------------------------------------------------

    def feed(self, event: CoreEvent) -> list[Effect]:
        """Step the core with one input; queue its effects; return them (for callbacks)."""
        now = self._clock.now()
        self.conv, effects = step(self.conv, event, now, self._timings)
        for effect in effects:
            if isinstance(effect, SetTimer):
                self._timers.set(effect.name, effect.at)
            elif isinstance(effect, ClearTimer):
                self._timers.clear(effect.name)
            elif isinstance(effect, Supersede):
                self._fed += 1
                for group in effect.groups:
                    self._moot[group] = self._fed
            elif isinstance(effect, Dropped):
                log.info(
                    "dropped %s in %s: %s (turn %s)",
                    effect.event,
                    self.key,
                    effect.reason,
                    effect.turn_id,
                )
            elif self._route(effect) is not Route.CALLER:
                terms: Terms | None = getattr(effect, "terms", None)
                if terms is not None and terms.durable:
                    self.owed_at.setdefault(getattr(effect, "idempotency_key", ""), None)
                    self.enqueue(Owe(effect))
                self.enqueue(effect)
        shown = snapshot(self.conv)
        for watch in self._snapshot_watchers:
            watch(self.key, shown)
        return effects

    def _timer_fired(self, name: str) -> None:
        self.feed(TimerFired(name))

    def enqueue(self, work: Work) -> None:
        terms: Terms | None = getattr(work, "terms", None)
        if terms is not None:
            self._place_of(work, terms)
        lane = self._shown if self._route(work) is Route.SHOWN else self._work
        (lane.acks if isinstance(work, React) else lane.queue).append(work)
        if lane is self._shown and self._watchers:
            for watcher in self._watchers:
                if not watcher.done():
                    watcher.set_result(None)
            self._watchers.clear()
        self._idle.clear()
        if lane.task is None or lane.task.done():
            lane.task = self._tasks.spawn(
                self._run(lane), name=f"perform:{lane.name}:{self.key}", while_draining=True
            )

    def _place_of(self, work: Work, terms: Terms) -> None:
        self._fed += 1
        if terms.group is not None:
            self._place[getattr(work, "idempotency_key", "")] = self._fed
            if terms.presence:  # a newer one of its group: the older are untrue now
                self._moot[terms.group] = self._fed
        for group in terms.news_for:
            self._news[group] = self._fed

    def recorded(self, key: str, since: float) -> None:
        """The durable effect under `key` is recorded as owed since `since`: its handler, if it
        has not taken it yet, need not record it again."""
        if key in self.owed_at:
            self.owed_at[key] = since

    def superseded(self, work: Work, *, short: bool) -> bool:
        """Whether something fed after `work` made it moot (its terms say what may): always,
        or (`short`) while the call budget is short."""
        terms: Terms | None = getattr(work, "terms", None)
        if terms is None or terms.group is None:
            return False
        place = self._place.get(getattr(work, "idempotency_key", ""))
        if place is None:
            return False
        group = terms.group
        if self._moot.get(group, 0) > place:
            return True
        return short and self._news.get(group, 0) > place

    # -- performing --------------------------------------------------------------------------

    async def _run(self, lane: _Lane) -> None:
        while lane:
            work = lane.take()
            self._performing += 1
            try:
                await self._perform(self, work)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A failed effect is logged and skipped: one bad call must not stall the
                # conversation (the Feishu client already retried what can be retried).
                log.exception("effect %s failed in %s", type(work).__name__, self.key)
            finally:
                self._performing -= 1
                if self._place or self.owed_at:
                    key = getattr(work, "idempotency_key", "")
                    self._place.pop(key, None)
                    self.owed_at.pop(key, None)
                if len(self._moot) + len(self._news) > self._groups_kept:
                    self._forget_groups()
        if not (self._shown or self._work):
            if not self._performing:
                self._moot.clear()
                self._news.clear()
            self._idle.set()

    def _forget_groups(self) -> None:
        """A group superseded at a place no queued work is older than can make nothing moot
        any more (what is fed later comes after it)."""
        oldest = min(self._place.values(), default=self._fed)
        self._moot = {group: at for group, at in self._moot.items() if at > oldest}
        self._news = {group: at for group, at in self._news.items() if at > oldest}
        self._groups_kept = max(GROUPS_KEPT, 2 * (len(self._moot) + len(self._news)))

    def next_shown(self) -> asyncio.Future[None]:
        """Done when the next work is queued on the shown lane (a line waiting for its turn
        in the call budget looks then whether something newer has made it moot)."""
        watcher = asyncio.get_running_loop().create_future()
        self._watchers.append(watcher)
        return watcher

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        self._timers.clear_all()


class Conversations:
    def __init__(
        self,
        *,
        options: Options,
        timings: Timings,
        clock: Clock,
        perform: Callable[[ConversationActor, Work], Any],
        route: Callable[[Work], Route],
        watchers: Sequence[Watcher],
        tasks: TaskTracker,
    ) -> None:
        self.options = options  # of each conversation made from now on
        self._timings = timings
        self._clock = clock
        self._perform = perform
        self._route = route
        self._watchers = watchers
        self._tasks = tasks
        self._actors: dict[str, ConversationActor] = {}

    def get(self, key: str) -> ConversationActor:
        found = self._actors.get(key)
        if found is None:
            found = ConversationActor(
                key,
                conv=Conversation(options=self.options, key=key),
                timings=self._timings,
                clock=self._clock,
                perform=self._perform,
                route=self._route,
                watchers=self._watchers,
                tasks=self._tasks,
            )
            self._actors[key] = found
        return found

    def drop(self, key: str) -> ConversationActor | None:
        """Forget the conversation (another instance runs it now)."""
        return self._actors.pop(key, None)

    def asking(self, request_id: str) -> ConversationActor | None:
        """The conversation whose open card carries this request (for a card click)."""
        for actor in self._actors.values():
            conv = actor.conv
            if any(a.request_id == request_id for a in conv.approvals):
                return actor
            if conv.question is not None and conv.question.request_id == request_id:
                return actor
        return None

    def by_key(self) -> dict[str, ConversationActor]:
        return dict(self._actors)

    def __iter__(self) -> Any:
        return iter(list(self._actors.values()))

    def __len__(self) -> int:
        return len(self._actors)

    async def wait_idle(self) -> None:
        """Until every actor has performed what it was given."""
        await asyncio.gather(*(actor.wait_idle() for actor in self._actors.values()))
