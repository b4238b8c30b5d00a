"""One ACP session as the runtime keeps it (`AcpSession`: its process, slot, folder and the
turn running on it), what the agent reports about it outside turns (`SessionInfo`), and the
table of them (`SessionTable`): the sessions an `AcpRuntime` knows, by id, with each slot's
session and running-turn counts kept as they change: the operator's process view reads them
at every turn's start and end, and counting them afresh walked every session ever opened on
the runtime (thousands, on a busy bridge) twice per turn."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from acp.schema import (
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    SessionInfoUpdate,
    SessionModeState,
    UsageUpdate,
)

from bridge.runtime.acp.process import AgentProcess
from bridge.runtime.acp.turns import AcpTurn
from bridge.runtime.events import ConfigOption, ModeOption, Usage, config_from_wire


@dataclass
class SessionInfo:
    """Session state the agent reports outside turns (kept, never emitted as turn events)."""

    available_commands: tuple[str, ...] = ()
    mode_id: str | None = None
    modes: tuple[ModeOption, ...] = ()  # offered in the session/new or session/load answer
    config: tuple[ConfigOption, ...] = ()  # the agent's session config options, as last told
    title: str | None = None
    usage: Usage | None = None
    idle_updates: int = 0  # updates that arrived while no turn ran (incl. load replay)

    def offered(self, state: SessionModeState | None, config: Any = None) -> None:
        if config is not None:
            self.config = config_from_wire(config)
        if state is not None:
            self.modes = tuple(ModeOption(m.id, m.name) for m in state.available_modes)
            self.mode_id = state.current_mode_id

    def absorb(self, update: Any) -> None:
        if isinstance(update, AvailableCommandsUpdate):
            self.available_commands = tuple(c.name for c in update.available_commands)
        elif isinstance(update, CurrentModeUpdate):
            self.mode_id = update.current_mode_id
        elif isinstance(update, SessionInfoUpdate) and update.title is not None:
            self.title = update.title
        elif isinstance(update, UsageUpdate):
            cost = update.cost
            self.usage = Usage(
                update.used,
                update.size,
                cost.amount if cost else None,
                cost.currency if cost else None,
            )
        elif isinstance(update, ConfigOptionUpdate):
            self.config = config_from_wire(update.model_dump(by_alias=True)["configOptions"])


@dataclass
class AcpSession:
    session_id: str
    conversation_key: str
    slot: int
    process: AgentProcess
    cwd: str  # the session's working folder (session/new, and every reload of it)
    turn: AcpTurn | None = None
    prompts: int = 0  # prompts sent on this session by this bridge
    # The last turn was cancelled: some agents answer the next prompt with that turn's
    # leftover result, so the session is settled before the next prompt goes out.
    after_cancel: bool = False
    info: SessionInfo = field(default_factory=SessionInfo)
    reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionTable:
    def __init__(self) -> None:
        self._by_id: dict[str, AcpSession] = {}
        self._sessions: Counter[int] = Counter()  # slot -> sessions
        self._running: Counter[int] = Counter()  # slot -> sessions with a turn running

    def get(self, session_id: str) -> AcpSession | None:
        return self._by_id.get(session_id)

    def __getitem__(self, session_id: str) -> AcpSession:
        return self._by_id[session_id]

    def values(self) -> Iterator[AcpSession]:
        return iter(list(self._by_id.values()))

    def add(self, session: AcpSession) -> None:
        known = self._by_id.get(session.session_id)
        if known is session:
            return
        if known is not None:
            self.drop(known.session_id)
        self._by_id[session.session_id] = session
        self._sessions[session.slot] += 1
        if session.turn is not None:
            self._running[session.slot] += 1

    def drop(self, session_id: str) -> AcpSession | None:
        session = self._by_id.pop(session_id, None)
        if session is not None:
            self._sessions[session.slot] -= 1
            if session.turn is not None:
                self._running[session.slot] -= 1
        return session

    def turn_began(self, session: AcpSession, turn: AcpTurn) -> None:
        if session.turn is None and self._by_id.get(session.session_id) is session:
            self._running[session.slot] += 1
        session.turn = turn

    def turn_ended(self, session: AcpSession, turn: AcpTurn) -> None:
        """`turn` is over; the session is free unless another turn has taken it since."""
        if session.turn is not turn:
            return
        session.turn = None
        if self._by_id.get(session.session_id) is session:
            self._running[session.slot] -= 1

    def counts(self, slot: int) -> tuple[int, int]:
        """The slot's (sessions, running turns)."""
        return self._sessions[slot], self._running[slot]
