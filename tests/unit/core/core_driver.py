"""Drives `step` the way the executor would: explicit clock, timers fired in order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from bridge.core.effects import Effect, PostApprovalCard, PostQuestion, PostText, RelayAgentText
from bridge.core.inputs import CoreEvent, Posted, TimerFired, UserMessage
from bridge.core.machine import step
from bridge.core.presence import Timings
from bridge.core.state import Conversation
from bridge.runtime.events import PromptSent

T = Timings(
    first_hint=5.0,
    heartbeat=60.0,
    stale=600.0,
    approval_timeout=1800.0,
    finish_grace=3.0,
    progress_interval=3.0,
)
E = TypeVar("E")
SID = "s1"
ALICE = "ou_alice"


class Driver:
    def __init__(self, conv: Conversation | None = None, timings: Timings = T) -> None:
        self.conv = conv or Conversation()
        self.timings = timings
        self.now = 0.0
        self.effects: list[Effect] = []

    def feed(self, event: CoreEvent, at: float | None = None) -> list[Effect]:
        if at is not None:
            assert at >= self.now, "time only moves forward"
            self.now = at
        self.conv, effects = step(self.conv, event, self.now, self.timings)
        self.effects.extend(effects)
        return effects

    def advance(self, to: float) -> list[Effect]:
        """Fire every timer due up to `to`, each at its own time, then stop the clock at `to`."""
        out: list[Effect] = []
        for _ in range(1000):
            due = sorted((at, name) for name, at in self.conv.timers if at <= to)
            if not due:
                break
            at, name = due[0]
            out += self.feed(TimerFired(name), at=max(at, self.now))
        self.now = max(self.now, to)
        return out

    def shown(self, effects: Iterable[Effect], at: float | None = None) -> list[Effect]:
        """Feishu takes the approval and question cards among `effects`, as the executor
        reports it (`Posted`): the user's wait for each starts then."""
        out: list[Effect] = []
        for card in effects:
            if isinstance(card, PostApprovalCard | PostQuestion):
                ids = (f"om_{card.card_key}",)
                out += self.feed(Posted(card.idempotency_key, card.turn_id, ids), at)
        return out

    def ask(self, event: CoreEvent, at: float | None = None) -> list[Effect]:
        """The agent asks (an approval, a question) and its card is shown at once."""
        out = self.feed(event, at)
        return out + self.shown(out)

    def message(
        self, mid: str, text: str = "hello", sender: str = ALICE, at: float | None = None
    ) -> list[Effect]:
        return self.feed(UserMessage(mid, sender, text), at)

    def start(self, mid: str = "m1", at: float = 0.0, sid: str = SID) -> list[Effect]:
        """A message that starts a turn, and the runtime's PromptSent."""
        out = self.message(mid, at=at)
        out += self.feed(PromptSent(sid))
        return out


def posts(effects: Iterable[Effect]) -> list[PostText | RelayAgentText]:
    return [e for e in effects if isinstance(e, PostText | RelayAgentText)]


def keys(effects: Iterable[Effect]) -> list[str]:
    """Translation keys of the system lines, and "<reply>" for relayed agent text."""
    return [e.key if isinstance(e, PostText) else "<reply>" for e in posts(effects)]


def finals(effects: Iterable[Effect]) -> list[PostText | RelayAgentText]:
    return [e for e in posts(effects) if e.final]


def of_type(effects: Iterable[Effect], kind: type[E]) -> list[E]:
    return [e for e in effects if isinstance(e, kind)]
