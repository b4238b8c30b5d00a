"""The agent runtime, built when it is first needed, so the bridge answers `/healthz` before
the ACP SDK is loaded.

Importing the SDK (its pydantic schema models) takes about 0.9 s, and no agent starts before
the first message anyway. `BridgeService.start` warms the import in a worker thread once the
bridge is ready; the first call that needs the runtime builds it (importing right then if the
warm-up has not finished). Until then `snapshot()` says no agent runs, which is true.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from bridge.runtime.events import ConfigOption, SessionFacts, SessionModes
from bridge.runtime.port import AgentRuntime, EventSink, PromptFile, SessionHandle

ACP_MODULE: Final = "bridge.runtime.acp.runtime"


class DeferredRuntime:
    """Implements `AgentRuntime` by building the real one on first use. Anything else asked
    of it (diagnostics a test reads) goes to the real runtime, built then."""

    def __init__(self, build: Callable[[], AgentRuntime], *, program: str) -> None:
        self._build = build
        self._program = program
        self._runtime: AgentRuntime | None = None

    async def warm(self) -> None:
        """Import the ACP SDK in a worker thread: the event loop keeps serving meanwhile."""
        await asyncio.to_thread(importlib.import_module, ACP_MODULE)

    @property
    def built(self) -> AgentRuntime:
        if self._runtime is None:
            self._runtime = self._build()
        return self._runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self.built, name)

    async def start(self) -> None:
        await self.built.start()

    async def open_session(
        self,
        conversation_key: str,
        *,
        resume_session_id: str | None = None,
        chosen: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        return await self.built.open_session(
            conversation_key, resume_session_id=resume_session_id, chosen=chosen
        )

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        await self.built.prompt(session_id, text, sink, files)

    async def cancel(self, session_id: str) -> None:
        await self.built.cancel(session_id)

    async def abandon(self, session_id: str) -> None:
        await self.built.abandon(session_id)

    async def answer_permission(self, request_id: str, option_id: str | None) -> None:
        await self.built.answer_permission(request_id, option_id)

    async def answer_question(self, request_id: str, answers: Mapping[str, str] | None) -> None:
        await self.built.answer_question(request_id, answers)

    async def modes(self, session_id: str) -> SessionModes | None:
        return await self.built.modes(session_id)

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        await self.built.set_mode(session_id, mode_id)

    async def config(self, session_id: str) -> tuple[ConfigOption, ...]:
        return await self.built.config(session_id)

    async def set_config(self, session_id: str, config_id: str, value: str) -> None:
        await self.built.set_config(session_id, config_id, value)

    async def commands(self, session_id: str) -> tuple[str, ...]:
        return await self.built.commands(session_id)

    async def facts(self, session_id: str) -> SessionFacts | None:
        return await self.built.facts(session_id)

    async def session_titles(self, chosen: Mapping[str, str]) -> dict[str, str]:
        return await self.built.session_titles(chosen)

    async def close(self) -> None:
        if self._runtime is not None:  # nothing was ever started otherwise
            await self._runtime.close()

    def snapshot(self) -> dict[str, Any]:
        if self._runtime is not None:
            return self._runtime.snapshot()
        idle = {"unknown_updates": 0, "late_updates": 0, "oversize_updates": 0, "cancel_tails": 0}
        return {"command": self._program, **idle, "pending_requests": 0, "agents": []}
