"""In-process fakes of the engine's two outbound ports, and a harness that wires a real
`Engine` (real core, actors, executor, turn runner, MemoryStore) to them.

`RecordingFeishu` records every call in order and can hold one kind of call until released;
`FakeRuntime` runs each prompt as a turn the test drives event by event. Either can be told
to fail at one point: a download, opening a session, reloading one, sending a prompt.
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
from bridge.feishu.api import BotInfo
from bridge.feishu.delivery import DeliveryPolicy
from bridge.feishu.events import AttachmentRef, CardAction, InboundMessage
from bridge.feishu.resources import Downloaded
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

T = Translator("zh_CN")
NOW = 1_700_000_000.0
ALICE = "ou_alice"
CHAT = "oc_1"
ACK = "Typing"
# Long enough that no presence timer fires while a test runs.
QUIET = Timings(first_hint=600, heartbeat=600, stale=3600, approval_timeout=3600)


@dataclass(frozen=True)
class Call:
    op: str
    target: str  # the message or chat the call is about
    text: str = ""  # reply/send text, or emoji
    card: dict[str, Any] | None = None


class RecordingFeishu:
    """The FeishuApi port, recorded. `hold(op)` parks calls of that kind until `release()`."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._ids = itertools.count(1)
        self._held: set[str] = set()
        self._gate = asyncio.Event()
        self.entered = asyncio.Event()  # a held call has started
        self.download_error: Exception | None = None  # download_resource raises it
        self.urgent_error: Exception | None = None  # urgent_app raises it

    def hold(self, op: str) -> None:
        self._held.add(op)
        self._gate.clear()

    def release(self) -> None:
        self._held.clear()
        self._gate.set()

    async def _record(self, call: Call) -> None:
        self.calls.append(call)
        if call.op in self._held:
            self.entered.set()
            await self._gate.wait()

    def _id(self) -> str:
        return f"om_bot_{next(self._ids)}"

    async def reply_text(
        self, message_id: str, text: str, *, uuid: str, in_thread: bool = False
    ) -> list[str]:
        await self._record(Call("reply_text", message_id, text))
        return [self._id()]

    async def send_text(self, chat_id: str, text: str, *, uuid: str) -> list[str]:
        await self._record(Call("send_text", chat_id, text))
        return [self._id()]

    async def send_text_to_user(self, open_id: str, text: str, *, uuid: str) -> tuple[str, str]:
        await self._record(Call("send_text_to_user", open_id, text))
        return self._id(), f"oc_p2p_{open_id}"

    async def reply_card(
        self, message_id: str, card: dict[str, Any], *, uuid: str, in_thread: bool = False
    ) -> str:
        await self._record(Call("reply_card", message_id, card=card))
        return self._id()

    async def send_card(self, chat_id: str, card: dict[str, Any], *, uuid: str) -> str:
        await self._record(Call("send_card", chat_id, card=card))
        return self._id()

    async def update_card(self, message_id: str, card: dict[str, Any]) -> None:
        await self._record(Call("update_card", message_id, card=card))

    async def urgent_app(self, message_id: str, open_ids: Sequence[str]) -> list[str]:
        await self._record(Call("urgent_app", message_id, ",".join(open_ids)))
        if self.urgent_error is not None:
            raise self.urgent_error
        return []

    async def add_reaction(self, message_id: str, emoji_type: str) -> str | None:
        await self._record(Call("add_reaction", message_id, emoji_type))
        return f"r_{message_id}"

    async def remove_reaction(self, message_id: str, reaction_id: str) -> bool:
        await self._record(Call("remove_reaction", message_id, reaction_id))
        return True

    async def download_resource(
        self, message_id: str, key: str, resource_type: str, dest: Path, *, max_bytes: int
    ) -> Downloaded:
        await self._record(Call("download_resource", message_id, key))
        if self.download_error is not None:
            raise self.download_error
        return Downloaded(0, "image/png")  # nothing written: the fake runtime reads no file

    async def bot_info(self) -> BotInfo:
        return BotInfo(open_id="ou_bot", app_name="Bot")

    async def aclose(self) -> None:
        return None

    # -- reading the record --------------------------------------------------------------

    def ops(self) -> list[tuple[str, str]]:
        return [(c.op, c.target) for c in self.calls]

    def cards(self) -> list[Call]:
        return [c for c in self.calls if c.op in ("reply_card", "send_card")]

    def texts(self) -> list[str]:
        return [c.text for c in self.calls if c.op in ("reply_text", "send_text")]


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
        feishu: RecordingFeishu | None = None,
        timings: Timings = QUIET,
        delivery: DeliveryPolicy | None = None,
        options: Options | None = None,
    ) -> None:
        self.options = options or Options()
        self.store_retry = store_retry or StoreRetry()
        self.feishu = feishu or RecordingFeishu()
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
            feishu=self.feishu,
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
