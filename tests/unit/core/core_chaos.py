"""A seeded random conversation: plausible runtime behaviour plus chaos, for property tests."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bridge.core.effects import Effect, OpenSession, PostApprovalCard, PostQuestion, StartTurn
from bridge.core.inputs import (
    ApprovalClicked,
    CardNotShown,
    Command,
    CommandName,
    CoreEvent,
    NotStartedReason,
    Posted,
    QuestionAnswered,
    RuntimeRestarted,
    RuntimeRestartFailed,
    RuntimeUnavailableAtStart,
    SessionNotReloaded,
    Tick,
    TurnNotStarted,
    UserMessage,
)
from bridge.core.state import Conversation, ExecState, Options
from bridge.runtime.events import (
    MessageChunk,
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    PlanEntry,
    PlanUpdated,
    PromptSent,
    QuestionAsked,
    QuestionKind,
    RuntimeExited,
    RuntimeFailed,
    StopReason,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
)
from tests.unit.core.core_driver import ALICE, Driver

OPTS = (
    PermissionOption("allow", "Allow", PermissionKind.ALLOW_ONCE),
    PermissionOption("reject", "Reject", PermissionKind.REJECT_ONCE),
)
PEOPLE = (ALICE, ALICE, "ou_bob", "ou_boss")


# Commands that only ask (the agent or the store) change no execution state; the runs keep
# the commands that do, so the random walks still reach every drawn edge.
STATEFUL_COMMANDS = [CommandName.NEW, CommandName.STOP, CommandName.HELP, CommandName.UNKNOWN]


@dataclass
class Step:
    before: Conversation
    event: CoreEvent
    now: float
    after: Conversation
    effects: list[Effect]


@dataclass
class ChaosRun:
    rng: random.Random
    driver: Driver = field(default_factory=lambda: Driver(Conversation(options=Options(
        received_text=True, approvers=frozenset({"ou_boss"})))))  # fmt: skip
    steps: list[Step] = field(default_factory=list)
    sessions: int = 0
    session: str = ""
    messages: list[str] = field(default_factory=list)
    n: int = 0
    # Feishu's answers to cards, drawn from their own stream (the walk keeps its draws):
    # mostly taken at once, sometimes later (behind the budget or an outage), sometimes never.
    feishu: random.Random = field(default_factory=lambda: random.Random("cards"))
    waiting_cards: list[PostApprovalCard | PostQuestion] = field(default_factory=list)

    def feed(self, event: CoreEvent, dt: float = 0.0) -> list[Effect]:
        before, at = self.driver.conv, self.driver.now + dt
        out = self.driver.feed(event, at)
        self.steps.append(Step(before, event, at, self.driver.conv, out))
        for effect in out:
            if isinstance(effect, PostApprovalCard | PostQuestion):
                fate = self.feishu.random()
                if fate < 0.7:
                    self.shown(effect)
                elif fate < 0.93:
                    self.waiting_cards.append(effect)
                else:
                    self.feed(CardNotShown(effect.turn_id, effect.request_id, fate < 0.96))
            if isinstance(effect, OpenSession):
                # Asked after a session was not reloaded: a new one, prompted at once.
                self.sessions += 1
                self.session = f"s{self.sessions}"
                self.feed(PromptSent(self.session))
            if isinstance(effect, StartTurn):
                # The runtime answers a StartTurn with PromptSent (most of the time at once).
                if effect.session_id is None:
                    self.sessions += 1
                    self.session = f"s{self.sessions}"
                else:
                    self.session = effect.session_id
                if self.rng.random() < 0.9:
                    self.feed(PromptSent(self.session))
                elif self.rng.random() < 0.5:
                    self.feed(
                        RuntimeUnavailableAtStart(effect.turn_id, "no", self.rng.random() < 0.5)
                    )
                elif self.rng.random() < 0.3:  # the restarted agent cannot reload it
                    self.feed(SessionNotReloaded(effect.turn_id, self.session, "unloadable"))
                elif self.rng.random() < 0.3:  # shutting down, or another instance's now
                    reason = self.rng.choice(list(NotStartedReason))
                    self.feed(TurnNotStarted(effect.turn_id, reason))
        return out

    def shown(self, card: PostApprovalCard | PostQuestion) -> None:
        self.feed(Posted(card.idempotency_key, card.turn_id, (f"om_{card.card_key}",)))

    def cards_taken(self) -> None:
        """Feishu takes some of the cards still waiting for their turn."""
        for card in list(self.waiting_cards):
            if self.feishu.random() < 0.3:
                self.waiting_cards.remove(card)
                self.shown(card)

    def fire_timers(self, until: float) -> None:
        for _ in range(100):
            due = sorted((at, name) for name, at in self.driver.conv.timers if at <= until)
            if not due:
                break
            at, name = due[0]
            from bridge.core.inputs import TimerFired

            self.feed(TimerFired(name), max(0.0, at - self.driver.now))
        self.driver.now = max(self.driver.now, until)

    def random_event(self) -> CoreEvent:
        rng, conv, sid = self.rng, self.driver.conv, self.session
        if rng.random() < 0.05:
            sid = "s-other"
        turn = conv.turn
        request = conv.approvals[0].request_id if conv.approvals else f"r{self.n}"
        question = conv.question.request_id if conv.question else f"q{self.n}"
        self.n += 1
        choices: list[CoreEvent] = [
            UserMessage(f"m{self.n}", rng.choice(PEOPLE), "text"),
            MessageChunk(sid, rng.choice(["Hello ", "more ", "  ", "done."])),
            ThoughtChunk(sid, "…"),
            ToolCallStarted(sid, f"t{self.n}", rng.choice(["Read", "Edit", "Run", ""])),
            ToolCallUpdated(sid, f"t{self.n}", status="completed"),
            PlanUpdated(sid, (PlanEntry("a", "completed"), PlanEntry("b", "in_progress"))),
            PermissionRequested(sid, f"r{self.n}", "Do it", OPTS),
            QuestionAsked(sid, f"q{self.n}", QuestionKind.QWEN, "Which?"),
            TurnEnded(sid, rng.choice(list(StopReason))),
            TurnEnded(sid, StopReason.END_TURN),
            RuntimeFailed(sid, "boom"),
            RuntimeExited(rng.choice([sid, ""]), restarting=rng.random() < 0.8),
            RuntimeRestarted(
                f"s{self.sessions}", reloaded=rng.random() < 0.5, turn_resumed=rng.random() < 0.3
            ),
            RuntimeRestartFailed("no"),
            ApprovalClicked(request, rng.choice(["allow", "reject", "bogus"]), rng.choice(PEOPLE)),
            QuestionAnswered(question, "x", rng.choice(PEOPLE)),
            Command(rng.choice(STATEFUL_COMMANDS), f"c{self.n}", rng.choice(PEOPLE), "/x"),
            Tick(),
        ]
        if self.messages and rng.random() < 0.05:
            return UserMessage(rng.choice(self.messages), ALICE, "redelivered")
        if turn is not None and rng.random() < 0.03:
            return RuntimeUnavailableAtStart(turn.turn_id, "gone")
        return rng.choice(choices)

    def run(self, events: int) -> ChaosRun:
        for _ in range(events):
            event = self.random_event()
            if isinstance(event, UserMessage) and event.message_id not in self.messages:
                self.messages.append(event.message_id)
            # Time moves like a chat does: mostly seconds, sometimes many minutes.
            dt = self.rng.choice([0.0, 0.5, 1.0, 2.0, 4.0, 10.0, 61.0, 300.0, 700.0, 1000.0])
            self.cards_taken()
            self.fire_timers(self.driver.now + dt)
            self.feed(event)
        self.wind_down()
        return self

    def wind_down(self) -> None:
        """Stop everything the way a user and a well-behaved runtime would, then let time pass."""
        for _ in range(50):
            conv = self.driver.conv
            if conv.turn is None and not conv.queue:
                return
            if conv.turn is not None and conv.turn.session_id is not None:
                if conv.state is ExecState.RECOVERING:
                    self.feed(RuntimeRestarted(self.session, reloaded=True), 1.0)
                self.feed(TurnEnded(conv.turn.session_id, StopReason.END_TURN), 1.0)
            elif conv.turn is not None:
                self.feed(RuntimeUnavailableAtStart(conv.turn.turn_id, "wind down"), 1.0)
            self.fire_timers(self.driver.now + 2000.0)
        raise AssertionError("the conversation never settled")
