"""The session methods of the scripted agent: new, load, resume, list, mode and config
options, and what it tells after each prompt (a title, context use). Mixed into
`ScriptedAgent`."""

from __future__ import annotations

import time
import uuid
from typing import Any

from acp.exceptions import RequestError
from acp.schema import (
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    ResumeSessionResponse,
    SessionInfo,
    SetSessionConfigOptionResponse,
)

from bridge.devtools.scripted_agent.language import MODELS, MODES, SCENARIOS
from bridge.devtools.scripted_agent.sessions import Session, SessionStore
from bridge.devtools.scripted_agent.wire import config_of, modes_of, text_block

CONTEXT_SIZE = 200_000  # the context window it reports (usage_update)


class SessionMethods:
    store: SessionStore
    quirks: frozenset[str]
    load_enabled: bool
    resume_enabled: bool
    list_enabled: bool

    async def _update(self, session_id: str, update: dict[str, Any]) -> None:
        raise NotImplementedError  # pragma: no cover - ScriptedAgent's

    def _later(self, delay: float, work: Any) -> None:
        raise NotImplementedError  # pragma: no cover - ScriptedAgent's

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        session = Session(f"sess-{uuid.uuid4().hex[:12]}", cwd)
        self.store.save(session)
        # Real agents announce their slash commands right after session/new: an idle update.
        self._later(0.005, self._announce_commands(session.session_id))
        return NewSessionResponse(
            session_id=session.session_id,
            modes=modes_of(session),
            config_options=config_of(session),
        )

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        if not self.load_enabled:
            raise RequestError.method_not_found("session/load")
        if "load-fails" in self.quirks:
            raise RequestError(-32603, "No previous sessions found")
        session = self.store.load(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})
        for entry in session.history:  # the spec: replay the conversation, then answer
            kind = "user_message_chunk" if entry["role"] == "user" else "agent_message_chunk"
            await self._update(
                session_id, {"sessionUpdate": kind, "content": text_block(entry["text"])}
            )
        return LoadSessionResponse(modes=modes_of(session), config_options=config_of(session))

    async def set_session_mode(self, session_id: str, mode_id: str, **_: Any) -> None:
        session = self.store.load(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})
        if mode_id not in dict(MODES):
            raise RequestError.invalid_params({"details": f"no mode {mode_id}"})
        session.mode = mode_id
        update = {"sessionUpdate": "current_mode_update", "currentModeId": mode_id}
        self._later(0.005, self._update(session_id, update))

    async def set_config_option(
        self, config_id: str, session_id: str, value: Any, **_: Any
    ) -> SetSessionConfigOptionResponse:
        session = self.store.load(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})
        if config_id != "model" or value not in dict(MODELS):
            raise RequestError.invalid_params({"details": f"no value {value} for {config_id}"})
        session.model = value
        return SetSessionConfigOptionResponse(config_options=config_of(session))

    async def resume_session(self, cwd: str, session_id: str, **_: Any) -> ResumeSessionResponse:
        """Like load, without replaying the history (ACP `session/resume`)."""
        if not self.resume_enabled:
            raise RequestError.method_not_found("session/resume")
        session = self.store.load(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})
        session.resumed += 1
        return ResumeSessionResponse(modes=modes_of(session), config_options=config_of(session))

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **_: Any
    ) -> ListSessionsResponse:
        if not self.list_enabled:
            raise RequestError.method_not_found("session/list")
        found = [s for s in self.store.every() if cwd is None or s.cwd == cwd]
        return ListSessionsResponse(
            sessions=[
                SessionInfo(
                    session_id=s.session_id,
                    cwd=s.cwd,
                    title=s.title or None,
                    updated_at=s.updated_at,
                )
                for s in found
            ]
        )

    async def _after_prompt(self, session: Session, text: str) -> None:
        """What real agents tell as a turn ends: a title from the first prompt, and how
        full the context is (characters standing in for tokens; a cent a prompt)."""
        session.updated_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if not session.title and text:
            session.title = text.splitlines()[0][:40]
            title = {"sessionUpdate": "session_info_update", "title": session.title}
            await self._update(session.session_id, title)
        used = sum(len(entry["text"]) for entry in session.history)
        prompts = sum(1 for entry in session.history if entry["role"] == "user")
        usage = {
            "sessionUpdate": "usage_update",
            "used": used,
            "size": CONTEXT_SIZE,
            "cost": {"amount": round(0.01 * prompts, 2), "currency": "USD"},
        }
        await self._update(session.session_id, usage)

    async def _announce_commands(self, session_id: str) -> None:
        commands = [{"name": name, "description": text} for name, text in SCENARIOS.items()]
        await self._update(
            session_id,
            {"sessionUpdate": "available_commands_update", "availableCommands": commands},
        )

    async def _idle_burst(self, session_id: str) -> None:
        await self._announce_commands(session_id)
        await self._update(
            session_id, {"sessionUpdate": "current_mode_update", "currentModeId": "code"}
        )
        await self._update(
            session_id, {"sessionUpdate": "session_info_update", "title": "Scripted"}
        )
        await self._update(
            session_id, {"sessionUpdate": "agent_message_chunk", "content": text_block("late")}
        )
