"""The router remembers which runtime holds each session; sessions no runtime holds any more
(a conversation's earlier ones, after /new or a move) are not remembered for ever."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from bridge.runtime.port import CONFIG_CHOICE, MODE_CHOICE, WORKSPACE_CHOICE, SessionHandle
from bridge.runtime.router import OWNERS_KEPT, Projects, RoutedRuntime, Routes


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


class Chosen(OneSessionEach):
    """Records what each session was opened with."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[dict[str, str]] = []

    async def open_session(
        self,
        conversation_key: str,
        *,
        resume_session_id: str | None = None,
        chosen: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        self.opened.append(dict(chosen or {}))
        return await super().open_session(conversation_key, resume_session_id=resume_session_id)


async def test_each_project_opens_on_its_own_runtime_with_its_mode_and_model(
    tmp_path: Path,
) -> None:
    """A project's mode and model are where a session starts; the conversation's own
    choices (/mode, /model) win; each project's agents are its own runtimes."""
    built: dict[tuple[str, str], Chosen] = {}

    def build(project: str, argv: Any, root: Path) -> Chosen:
        return built.setdefault((project, argv[0]), Chosen())

    plain = Routes.of([("claude", ["claude-acp"])], [("w", tmp_path)])
    planned = replace(
        Routes.of([("codex", ["codex-acp"])], [("w", tmp_path)]),
        defaults=((MODE_CHOICE, "plan"), (CONFIG_CHOICE + "model", "o3")),
    )
    router = RoutedRuntime(
        Projects((("backend", plain), ("docs", planned)), {("oc_docs", None): "docs"}), of=build
    )
    await router.open_session("oc_backend")
    await router.open_session("oc_docs")
    await router.open_session("oc_docs:omt_1", chosen={MODE_CHOICE: "code"})
    backend, docs = built[("backend", "claude-acp")], built[("docs", "codex-acp")]
    assert backend.opened == [{WORKSPACE_CHOICE: str(tmp_path)}]
    assert docs.opened == [
        {MODE_CHOICE: "plan", CONFIG_CHOICE + "model": "o3", WORKSPACE_CHOICE: str(tmp_path)},
        {MODE_CHOICE: "code", CONFIG_CHOICE + "model": "o3", WORKSPACE_CHOICE: str(tmp_path)},
    ]
