"""What a conversation changes of its agent session from the chat: the ACP session mode
(`/mode`) and config options such as the model (`/model`). The agent's answers are kept by
`Sessions`, which also sets them again when a restarted agent comes back with defaults."""

from __future__ import annotations

from bridge.runtime.acp.sessions import Sessions
from bridge.runtime.events import ConfigOption, SessionModes


class SessionSettings:
    """Mixed into `AcpRuntime` (the `AgentRuntime` port's mode and config calls)."""

    _sessions: Sessions

    async def modes(self, session_id: str) -> SessionModes | None:
        return self._sessions.modes(session_id)

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        await self._sessions.set_mode(session_id, mode_id)

    async def config(self, session_id: str) -> tuple[ConfigOption, ...]:
        return self._sessions.config(session_id)

    async def set_config(self, session_id: str, config_id: str, value: str) -> None:
        await self._sessions.set_config(session_id, config_id, value)

    async def commands(self, session_id: str) -> tuple[str, ...]:
        info = self._sessions.info(session_id)
        return info.available_commands if info else ()
