"""The router remembers which runtime holds each session; sessions no runtime holds any more
(a conversation's earlier ones, after /new or a move) are not remembered for ever."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.runtime.port import SessionHandle
from bridge.runtime.router import OWNERS_KEPT, RoutedRuntime, Routes


class OneSessionEach:
    """A route's runtime holding one session per conversation: a new one lets the old go."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.held: dict[str, str] = {}  # conversation -> its session

    async def open_session(
        self,
        conversation_key: str,
        *,
        resume_session_id: str | None = None,
        chosen: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        session_id = resume_session_id or f"sess_{next(self._ids)}"
        self.held[conversation_key] = session_id
        return SessionHandle(session_id, loaded=resume_session_id is not None)

    def session_info(self, session_id: str) -> Any:
        return object() if session_id in self.held.values() else None

    def release(self, conversation_key: str) -> None:
        self.held.pop(conversation_key, None)


async def test_sessions_no_runtime_holds_are_forgotten(tmp_path: Path) -> None:
    runtime = OneSessionEach()
    routes = Routes.single(tmp_path)
    router = RoutedRuntime(routes, build=lambda argv, root: runtime)  # type: ignore[arg-type,return-value]
    conversations = [f"oc_{i}" for i in range(3)]
    for _ in range(400):  # /new, again and again
        for key in conversations:
            await router.open_session(key)
    assert len(router._owner) <= OWNERS_KEPT  # the bound is the point
    for session_id in runtime.held.values():  # the live ones are still routed
        assert router._owner[session_id] is runtime
    # A session forgotten here is resumed where the conversation opens now.
    await router.open_session(conversations[0], resume_session_id="sess_1")
    assert runtime.held[conversations[0]] == "sess_1"
