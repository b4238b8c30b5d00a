"""A harness that wires a real `Engine` (real core, actors, executor, turn runner,
MemoryStore) to in-process fakes: Feishu at the HTTP transport under the real `FeishuClient`
(tests/fakes/feishu.py: every call recorded in order, an op held until released or failed),
and `FakeRuntime`, which runs each prompt as a turn the test drives event by event and can be
told to fail at one point: opening a session, reloading one, sending a prompt.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.core import Options, Timings
from bridge.engine.engine import Engine, EngineConfig
from bridge.feishu.delivery import DeliveryPolicy
from bridge.feishu.events import AttachmentRef, CardAction, InboundMessage
from bridge.i18n import Translator
from bridge.runtime.events import (
    PromptSent,
    RuntimeFailed,
    SessionFacts,
    StopReason,
    TurnEnded,
    TurnEvent,
)
from bridge.runtime.port import EventSink, PromptFile, RuntimeUnavailable, SessionHandle
from bridge.schedules.scheduler import ScheduleSettings
from bridge.store import MemoryStore
from bridge.store.steady import StoreRetry
from tests.fakes.feishu import FakeFeishu

T = Translator("zh_CN")
NOW = 1_700_000_000.0
ALICE = "ou_alice"
CHAT = "oc_1"
ACK = "Typing"
# Long enough that no presence timer fires while a test runs.
QUIET = Timings(first_hint=600, heartbeat=600, stale=3600, approval_timeout=3600)


@dataclass
class FakeTurn:
    """One prompt in flight; the test pushes what the agent says."""

    session_id: str
    text: str
    events: asyncio.Queue[TurnEvent] = field(default_factory=asyncio.Queue)

    def emit(self, event: TurnEvent) -> None:
        self.events.put_nowait(event)

    def end(self, reason: StopReason = StopReason.END_TURN) -> None:
        self.emit(TurnEnded(self.session_id, stop_reason=reason))


class FakeRuntime:
    """The AgentRuntime port. Each prompt becomes a `FakeTurn` (see `turn()`); a cancel ends
    the running turn `cancelled`, as a well-behaved agent does."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.turns: list[FakeTurn] = []
        self.unavailable: str | None = None  # open_session raises RuntimeUnavailable
        self.opening: asyncio.Event | None = None  # when set: open_session waits for it
        # Sessions an agent restart lost: a prompt on one raises RuntimeUnavailable before it
        # is sent (its session/load refused, as Gemini CLI's -32603); resuming one opens anew.
        self.lost: set[str] = set()
        self.refuse_prompt: Exception | None = None  # the next prompt raises it, unsent
        self.fail_unsent: str | None = None  # the next prompt ends RuntimeFailed, unsent
        self.sending: asyncio.Event | None = None  # when set: a prompt goes out once it is
        self._started = asyncio.Condition()
        self._sessions = itertools.count(1)

    async def start(self) -> None:
        return None

    async def open_session(
        self,
        conversation_key: str,
        *,
        resume_session_id: str | None = None,
        chosen: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        self.calls.append(("open_session", conversation_key, resume_session_id))
        if self.opening is not None:
            await self.opening.wait()
        if self.unavailable is not None:
            raise RuntimeUnavailable(self.unavailable)
        if resume_session_id is not None and resume_session_id not in self.lost:
            return SessionHandle(resume_session_id, loaded=True)
        return SessionHandle(f"sess_{next(self._sessions)}", loaded=False)

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        self.calls.append(("prompt", session_id, text))
        if session_id in self.lost:
            raise RuntimeUnavailable("the agent could not reload the session: -32603")
        if self.refuse_prompt is not None:
            error, self.refuse_prompt = self.refuse_prompt, None
            raise error
        if self.fail_unsent is not None:
            reason, self.fail_unsent = self.fail_unsent, None
            sink(RuntimeFailed(session_id, reason=reason))
            return
        turn = FakeTurn(session_id, text)
        if self.sending is not None:
            await self.sending.wait()
        sink(PromptSent(session_id))
        async with self._started:
            self.turns.append(turn)
            self._started.notify_all()
        while True:
            event = await turn.events.get()
            sink(event)
            if isinstance(event, TurnEnded):
                return

    async def turn(self, number: int) -> FakeTurn:
        """The `number`-th prompt (1-based), once it has been sent."""
        async with self._started:
            await self._started.wait_for(lambda: len(self.turns) >= number)
        return self.turns[number - 1]

    async def cancel(self, session_id: str) -> None:
        self.calls.append(("cancel", session_id))
        for turn in self.turns:
            if turn.session_id == session_id:
                turn.end(StopReason.CANCELLED)

    async def abandon(self, session_id: str) -> None:
        self.calls.append(("abandon", session_id))

    async def answer_permission(self, request_id: str, option_id: str | None) -> None:
        self.calls.append(("answer_permission", request_id, option_id))

    async def answer_question(self, request_id: str, answers: Mapping[str, str] | None) -> None:
        self.calls.append(("answer_question", request_id, dict(answers or {})))

    async def commands(self, session_id: str) -> tuple[str, ...]:
        return ()

    async def facts(self, session_id: str) -> SessionFacts | None:
        return SessionFacts(folder="/work")

    async def session_titles(self, chosen: Mapping[str, str]) -> dict[str, str]:
        return {}

    async def close(self) -> None:
        return None

    def snapshot(self) -> dict[str, Any]:
        return {}


async def until(condition: Callable[[], bool]) -> None:
    """Gives the loop turns until `condition` holds (the caller bounds it with a timeout):
    for a state no event announces, such as the delivery gate going down once the client's
    retries of a call are spent. No time passes."""
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0)


class _HarnessClock:
    """The `Clock` port over the harness's settable `clock` (both lines read it)."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness

    def now(self) -> float:
        return self._harness.clock

    def wall(self) -> float:
        return self._harness.clock

    def call_at(self, when: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        delay = max(0.0, when - self._harness.clock)
        return asyncio.get_running_loop().call_later(delay, callback)


class Harness:
    """A real Engine over the fakes; `say` delivers a user message as the receiver would."""

    def __init__(
        self,
        store: MemoryStore,
        *,
        max_running_turns: int = 4,
        schedules: ScheduleSettings | None = None,
        attachments_dir: Path | None = None,
        store_retry: StoreRetry | None = None,
        feishu: FakeFeishu | None = None,
        timings: Timings = QUIET,
        delivery: DeliveryPolicy | None = None,
        options: Options | None = None,
    ) -> None:
        self.options = options or Options()
        self.store_retry = store_retry or StoreRetry()
        self.feishu = feishu or FakeFeishu()  # what Feishu saw
        self.client = self.feishu.client(clock=lambda: self.clock)  # the engine's
        self._timings = timings
        self._delivery = delivery or DeliveryPolicy()
        self.runtime = FakeRuntime()
        self.store = store
        self.attachments_dir = attachments_dir
        self.clock = NOW
        self._ids = itertools.count(1)
        self._schedules = schedules or ScheduleSettings()
        self.engine = self.build(max_running_turns)

    def build(self, max_running_turns: int = 4) -> Engine:
        return Engine(
            feishu=self.client,
            runtime=self.runtime,
            store=self.store,
            translator=T,
            config=EngineConfig(
                timings=self._timings,
                options=self.options,
                ack_emoji=ACK,
                max_running_turns=max_running_turns,
                schedules=self._schedules,
                attachments_dir=self.attachments_dir,
                store_retry=self.store_retry,
                delivery=self._delivery,
            ),
            clock=_HarnessClock(self),
            publish=lambda key, snapshot: None,
        )

    async def say(
        self,
        text: str,
        *,
        chat: str = CHAT,
        message_id: str | None = None,
        sender: str = ALICE,
        chat_type: str = "p2p",
        attachments: tuple[AttachmentRef, ...] = (),
    ) -> str:
        message_id = message_id or f"om_user_{next(self._ids)}"
        message = InboundMessage(
            event_id=f"ev_{message_id}",
            message_id=message_id,
            chat_id=chat,
            chat_type=chat_type,
            sender_open_id=sender,
            message_type="post" if attachments else "text",
            text=text,
            attachments=attachments,
        )
        # The receiver journals before it hands over; recovery reads the journal.
        assert await self.store.journal_message(
            message.conversation_key, message_id, sender, chat, text, self.clock
        )
        self.engine.accept(message)
        return message_id

    def click(self, card: dict[str, Any], choice: str, *, operator: str = ALICE) -> CardAction:
        """The click on the button for `choice` of a card the bridge posted."""
        for element in card.get("elements", []):
            for action in element.get("actions", []):
                if action.get("value", {}).get("choice") == choice:
                    return CardAction(
                        event_id=f"ev_click_{next(self._ids)}",
                        operator_open_id=operator,
                        open_message_id="om_card",
                        value=action["value"],
                    )
        raise AssertionError(f"no button for {choice!r} on the card")

    async def idle(self) -> None:
        """Every actor has performed what it was given (the performer tasks drained)."""
        for _ in range(3):  # a performed effect may feed the core and queue more
            await self.engine.wait_idle()
            await asyncio.sleep(0)
