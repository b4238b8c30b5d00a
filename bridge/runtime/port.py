"""The `AgentRuntime` port: the narrow interface the conversation engine drives.

The ACP adapter implements it over stdio; a fake implements it in unit tests; a Codex
app-server adapter could implement it later. Events of a turn are pushed to the sink
given to `prompt`, synchronously and in arrival order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from bridge.runtime.events import ConfigOption, SessionFacts, SessionModes, TurnEvent

EventSink = Callable[[TurnEvent], None]

# The names of a conversation's choices (`open_session(chosen=…)`): the session mode, and
# config options by id (e.g. "config:model").
MODE_CHOICE: Final = "mode"
CONFIG_CHOICE: Final = "config:"
# Which agent profile serves the conversation, and its working folder (a resolved path
# inside one of the workspaces); unset: the first profile and the first workspace.
AGENT_CHOICE: Final = "agent"
WORKSPACE_CHOICE: Final = "workspace"
PROJECT_CHOICE: Final = "project"  # `/project`: what the conversation works on


@dataclass(frozen=True)
class PromptFile:
    """An image or file the user sent, downloaded for the turn; the runtime reads or
    copies it (the file is the engine's, removed after the turn)."""

    path: Path
    kind: str  # image, file, audio, media
    mime: str
    name: str  # already a safe file name
    message_id: str  # the message it came with (its inbox folder)


class RuntimeUnavailable(Exception):
    """The runtime cannot serve now (cannot start, or the process limit is reached)."""

    def __init__(self, reason: str, *, limit_reached: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.limit_reached = limit_reached


class AgentRefused(Exception):
    """The agent answered a request with an error; `reason` is its short message."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SessionHandle:
    session_id: str
    loaded: bool  # True when an earlier session was reloaded (session/load)


class AgentRuntime(Protocol):
    async def start(self) -> None:
        """Make the runtime ready (spawn lazily or eagerly); raises RuntimeUnavailable."""

    async def open_session(
        self,
        conversation_key: str,
        *,
        resume_session_id: str | None = None,
        chosen: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        """A session for a conversation; reloads `resume_session_id` where supported. The
        conversation's `chosen` mode and options are set on it, and again on any session of
        it the runtime opens or reloads later (an agent restart brings its defaults back)."""

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        """Run one turn, with the user's images and files (`files`). Emits PromptSent first
        and exactly one terminal event last (TurnEnded, RuntimeFailed or RuntimeExited);
        returns after the terminal event."""

    async def cancel(self, session_id: str) -> None:
        """Cancel the running turn (session/cancel); pending requests resolve as cancelled."""

    async def abandon(self, session_id: str) -> None:
        """Give up on a turn whose cancel was never confirmed: end it here and restart the
        agent process if it still runs the prompt (other sessions on it are reloaded)."""

    async def answer_permission(self, request_id: str, option_id: str | None) -> None:
        """Answer a PermissionRequested; None answers `cancelled`."""

    async def answer_question(self, request_id: str, answers: Mapping[str, str] | None) -> None:
        """Answer a QuestionAsked; None declines/cancels it."""

    async def modes(self, session_id: str) -> SessionModes | None:
        """The session's modes; None when the agent offers none (or the session is gone)."""

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        """`session/set_mode`; raises `AgentRefused` with the agent's reason."""

    async def config(self, session_id: str) -> tuple[ConfigOption, ...]:
        """The session's config options (empty when the agent offers none)."""

    async def set_config(self, session_id: str, config_id: str, value: str) -> None:
        """`session/set_config_option`; raises `AgentRefused` with the agent's reason."""

    async def commands(self, session_id: str) -> tuple[str, ...]:
        """The agent's own slash commands on this session (names without "/")."""

    async def facts(self, session_id: str) -> SessionFacts | None:
        """What `/status` shows of the session (None: the session is unknown here)."""

    async def session_titles(self, chosen: Mapping[str, str]) -> dict[str, str]:
        """Session titles by id from the agent's `session/list`, for the agent and folder
        of `chosen` (`AGENT_CHOICE`, `WORKSPACE_CHOICE`); empty when it offers none."""

    async def close(self) -> None:
        """Stop every agent process."""

    def snapshot(self) -> dict[str, Any]:
        """Operator view of the agent processes (pids, liveness, load)."""
