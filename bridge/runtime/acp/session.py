"""One ACP session as the runtime keeps it (`AcpSession`: its process, slot, folder and the
turn running on it) and what the agent reports about it outside turns (`SessionInfo`).
Plain records shared by `Sessions` and the `SessionTable` that counts them, so a leaf."""

from __future__ import annotations

import asyncio
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
