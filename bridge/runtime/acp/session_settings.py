"""What a conversation changes of its agent session from the chat: the ACP session mode
(`/mode`) and config options such as the model (`/model`). The agent's answers are kept by
`Sessions`, which also sets them again when a restarted agent comes back with defaults."""

from __future__ import annotations

from collections.abc import Mapping

from acp.exceptions import RequestError

from bridge.runtime.acp.pool import AgentPool
from bridge.runtime.acp.sessions import Sessions
from bridge.runtime.events import ConfigOption, SessionFacts, SessionModes, model_option
from bridge.runtime.port import WORKSPACE_CHOICE


class SessionSettings:
    """Mixed into `AcpRuntime` (the `AgentRuntime` port's mode and config calls)."""

    _sessions: Sessions
    _pool: AgentPool

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

    async def facts(self, session_id: str) -> SessionFacts | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        info = session.info
        model = model_option(info.config)
        return SessionFacts(
            folder=session.cwd,
            mode=info.mode_id,
            model=model.current if model else None,
            title=info.title,
            usage=info.usage,
        )

    async def session_titles(self, chosen: Mapping[str, str]) -> dict[str, str]:
        """Titles from the agent's `session/list` for the chosen folder, asked of a running
        agent process that offers it (none is started for this); empty otherwise."""
        folder = chosen.get(WORKSPACE_CHOICE) or str(self._pool.workdir)
        process = next((p for p in self._pool.running() if p.can_list), None)
        if process is None:
            return {}
        try:
            return await process.list_sessions(folder)
        except (RequestError, ConnectionError, ValueError):
            return {}
