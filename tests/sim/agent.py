"""The agent of the simulated world: the `AgentRuntime` port, each prompt played from a
plan the seed drew (silences, text chunks, tool calls, a cancel honoured late or never)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.runtime.events import (
    MessageChunk,
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    PromptSent,
    RuntimeExited,
    StopReason,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
)
from bridge.runtime.port import EventSink, PromptFile, SessionHandle

OPTIONS = (
    PermissionOption("allow", "Allow", PermissionKind.ALLOW_ONCE),
    PermissionOption("reject", "Reject", PermissionKind.REJECT_ONCE),
)


@dataclass(frozen=True)
class Step:
    after: float  # seconds of silence before it
    kind: str  # chunk | tool | permission | crash | end
    text: str = ""


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    cancel_delay: float | None  # None: the agent never honours a cancel

    @property
    def first_silence(self) -> float:
        return self.steps[0].after


def answer_for(prompt: str) -> str:
    return f"answer to {prompt}"


def draw_plan(rng: random.Random, prompt: str) -> Plan:
    steps: list[Step] = []
    for _ in range(rng.randint(0, 4)):
        kind = rng.choice(("chunk", "tool", "chunk", "tool", "permission"))
        steps.append(Step(rng.choice((0.05, 0.3, 1.0, 2.5, 5.0)), kind, f"{kind} of {prompt}"))
    if rng.random() < 0.05:  # the agent process dies mid-turn
        steps.append(Step(rng.choice((0.1, 1.0, 3.0)), "crash"))
    steps.append(Step(rng.choice((0.1, 0.5, 1.0, 3.0)), "chunk", answer_for(prompt)))
    steps.append(Step(rng.choice((0.0, 0.05)), "end"))
    cancel = None if rng.random() < 0.15 else rng.choice((0.0, 0.2, 2.0, 6.0))
    return Plan(tuple(steps), cancel)


@dataclass
class PromptRecord:
    session_id: str
    text: str
    started: float
    ended: float | None = None
    cancelled_at: float | None = None


@dataclass
class Ask:
    """A permission the agent asked for, and the bridge's answer (None: refused unasked,
    cancelled or timed out)."""

    request_id: str
    prompt: str
    asked: float
    answered: float | None = None
    option: str | None = None


@dataclass
class SimRuntime:
    rng: random.Random
    now: Callable[[], float]
    plans: dict[str, Plan]
    prompts: list[PromptRecord] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)  # prompts sent into a busy session
    asks: dict[str, Ask] = field(default_factory=dict)  # by request id, in order
    _sessions: Any = field(default_factory=lambda: itertools.count(1))
    _cancels: dict[str, asyncio.Event] = field(default_factory=dict)
    _abandoned: dict[str, asyncio.Event] = field(default_factory=dict)
    _asks: dict[str, asyncio.Future[str | None]] = field(default_factory=dict)

    async def start(self) -> None:
        return None

    async def open_session(
        self,
        conversation_key: str,
        *,
        resume_session_id: str | None = None,
        chosen: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        await asyncio.sleep(self.rng.uniform(0.0, 0.05))
        if resume_session_id is not None:
            return SessionHandle(resume_session_id, loaded=True)
        return SessionHandle(f"sess_{next(self._sessions)}", loaded=False)

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        if any(p.session_id == session_id and p.ended is None for p in self.prompts):
            self.overlaps.append(f"{text!r} sent while {session_id} was running")
        record = PromptRecord(session_id, text, self.now())
        self.prompts.append(record)
        cancel = self._cancels[session_id] = asyncio.Event()
        abandoned = self._abandoned[session_id] = asyncio.Event()
        plan = self.plans.get(text) or draw_plan(self.rng, text)
        try:
            sink(PromptSent(session_id))
            for n, step in enumerate(plan.steps):
                if await _cancelled_within(cancel, step.after):
                    if plan.cancel_delay is None:
                        await abandoned.wait()  # never: the bridge must give up on it
                        return
                    await asyncio.sleep(plan.cancel_delay)
                    if not abandoned.is_set():  # a restarted agent says nothing more
                        sink(TurnEnded(session_id, stop_reason=StopReason.CANCELLED))
                    return
                if step.kind == "chunk":
                    sink(MessageChunk(session_id, text=step.text))
                elif step.kind == "tool":
                    tool = f"tool_{n}"
                    sink(ToolCallStarted(session_id, tool_call_id=tool, title=step.text))
                    sink(ToolCallUpdated(session_id, tool_call_id=tool, status="completed"))
                elif step.kind == "crash":
                    sink(RuntimeExited(session_id, returncode=1, restarting=True))
                    return
                elif step.kind == "permission":
                    request_id = f"perm_{len(self._asks) + 1}"
                    answer = self._asks[request_id] = asyncio.get_running_loop().create_future()
                    self.asks[request_id] = Ask(request_id, text, self.now())
                    sink(
                        PermissionRequested(
                            session_id, request_id=request_id, title=step.text, options=OPTIONS
                        )
                    )
                    waits = {asyncio.ensure_future(e.wait()) for e in (cancel, abandoned)}
                    await asyncio.wait({answer, *waits}, return_when=asyncio.FIRST_COMPLETED)
                    for wait in waits:
                        wait.cancel()
                    if abandoned.is_set():
                        return
                    if cancel.is_set() and not answer.done():
                        await asyncio.sleep(plan.cancel_delay or 0.0)
                        sink(TurnEnded(session_id, stop_reason=StopReason.CANCELLED))
                        return
                else:
                    sink(TurnEnded(session_id, stop_reason=StopReason.END_TURN))
                    return
        finally:
            record.ended = record.ended or self.now()

    async def cancel(self, session_id: str) -> None:
        for record in self.prompts:
            if record.session_id == session_id and record.ended is None:
                record.cancelled_at = record.cancelled_at or self.now()  # the first one
        found = self._cancels.get(session_id)
        if found is not None:
            found.set()

    def died(self) -> None:
        """The bridge was killed: its agent processes died with it, mid-prompt or not."""
        for record in self.prompts:
            if record.ended is None:
                record.ended = self.now()
        for event in self._abandoned.values():
            event.set()

    async def abandon(self, session_id: str) -> None:
        """The bridge gave up on the session's prompt (a real runtime restarts the agent)."""
        found = self._abandoned.get(session_id)
        if found is not None:
            found.set()
        for record in self.prompts:  # the agent is restarted: its prompt is gone with it
            if record.session_id == session_id and record.ended is None:
                record.ended = self.now()

    async def answer_permission(self, request_id: str, option_id: str | None) -> None:
        found = self._asks.get(request_id)
        if found is not None and not found.done():
            found.set_result(option_id)
            ask = self.asks[request_id]
            ask.answered, ask.option = self.now(), option_id

    async def answer_question(self, request_id: str, answers: Mapping[str, str] | None) -> None:
        return None

    async def modes(self, session_id: str) -> None:
        return None

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        return None

    async def config(self, session_id: str) -> tuple[()]:
        return ()

    async def set_config(self, session_id: str, config_id: str, value: str) -> None:
        return None

    async def commands(self, session_id: str) -> tuple[str, ...]:
        return ()

    async def facts(self, session_id: str) -> None:
        return None

    async def session_titles(self, chosen: Mapping[str, str]) -> dict[str, str]:
        return {}

    async def close(self) -> None:
        return None

    def snapshot(self) -> dict[str, Any]:
        return {}


async def _cancelled_within(cancel: asyncio.Event, seconds: float) -> bool:
    if cancel.is_set():
        return True
    try:
        await asyncio.wait_for(cancel.wait(), seconds)
    except TimeoutError:
        return False
    return True
