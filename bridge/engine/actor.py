"""One conversation's actor: feeds inputs to the pure core and performs what it returns.

`feed` is synchronous — it runs `step` and queues the effects — so every input, a runtime
update or a card click, is decided the moment it arrives, in arrival order, and a card
callback gets its answer without waiting for slower Feishu calls. One performer task per
actor then carries the effects out strictly in order (the ack reaction before any text).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.clock import Clock
from bridge.core import Conversation, Timings, snapshot, step
from bridge.core.effects import (
    AnswerCallback,
    ClearTimer,
    Dropped,
    Effect,
    React,
    SendPrompt,
    SetTimer,
)
from bridge.core.inputs import CoreEvent, TimerFired
from bridge.engine.tasks import TaskTracker
from bridge.engine.timers import Timers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trace:
    """One entry of a turn's timeline in the store (never message text)."""

    turn_id: str
    kind: str
    detail: str = ""


Work = Effect | Trace

# Effects answered by whoever fed the input (the card callback, the turn runner), never
# queued for the performer.
_TO_CALLER = (AnswerCallback, SendPrompt)


class ConversationActor:
    def __init__(
        self,
        key: str,
        *,
        conv: Conversation,
        timings: Timings,
        clock: Clock,
        perform: Callable[[ConversationActor, Work], Any],
        publish: Callable[[str, dict[str, object]], object],
        tasks: TaskTracker,
    ) -> None:
        self.key = key
        self.conv = conv
        self.in_thread = False
        self._timings = timings
        self._clock = clock
        self._perform = perform
        self._publish = publish
        # Acks jump the queue: a reaction only has to precede its own message's texts, which
        # are always queued after it, so a busy chat's acks never wait behind older replies.
        self._acks: deque[React] = deque()
        self._queue: deque[Work] = deque()
        self._timers = Timers(clock, self._timer_fired)
        self._tasks = tasks
        self._performer: asyncio.Task[None] | None = None
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
            elif isinstance(effect, Dropped):
                log.info(
                    "dropped %s in %s: %s (turn %s)",
                    effect.event,
                    self.key,
                    effect.reason,
                    effect.turn_id,
                )
            elif not isinstance(effect, _TO_CALLER):
                self.enqueue(effect)
        self._publish(self.key, snapshot(self.conv))
        return effects

    def _timer_fired(self, name: str) -> None:
        self.feed(TimerFired(name))

    def enqueue(self, work: Work) -> None:
        if isinstance(work, React):
            self._acks.append(work)
        else:
            self._queue.append(work)
        self._idle.clear()
        if self._performer is None or self._performer.done():
            self._performer = self._tasks.spawn(
                self._run(), name=f"perform:{self.key}", while_draining=True
            )

    # -- performing --------------------------------------------------------------------------

    async def _run(self) -> None:
        while self._acks or self._queue:
            work = self._acks.popleft() if self._acks else self._queue.popleft()
            try:
                await self._perform(self, work)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A failed effect is logged and skipped: one bad call must not stall the
                # conversation (the Feishu client already retried what can be retried).
                log.exception("effect %s failed in %s", type(work).__name__, self.key)
        self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        self._timers.clear_all()
