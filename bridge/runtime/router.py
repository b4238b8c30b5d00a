"""Routes: which project, which agent profile, in which workspace, serves a conversation.

A project (several in BRIDGE_CONFIG_FILE; one otherwise) is a set of agent profiles and
workspaces of its own (`Routes`); a conversation works on the project it chose (`/project`,
kept as `PROJECT_CHOICE`), else the one its chat (or topic thread) is routed to, else its
app's default (`Projects`).

`BRIDGE_AGENTS` names agent profiles and `BRIDGE_WORKSPACES` named folders; a conversation
picks one of each (`/agent`, `/cd`, kept as its choices `AGENT_CHOICE` and
`WORKSPACE_CHOICE`). Each (profile, workspace) pair gets its own runtime, built on first
use: its own agent processes, limits and sandbox around that workspace. A session belongs
to the runtime that opened it; every call about the session goes there.

With one profile and one workspace (the default) there is exactly one runtime.

Building on first use is also what lets the bridge answer `/healthz` before the ACP SDK is
loaded: importing it (its pydantic schema models) takes about 0.9 s, and no agent starts
before the first message anyway. `BridgeService.start` warms the import in a worker thread
once the bridge is ready (`warm`); the first call that needs a runtime builds it (importing
right then if the warm-up has not finished). Until then `snapshot()` says no agent runs,
which is true.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from bridge.clock import Clock
from bridge.paths import within
from bridge.runtime.events import (
    ConfigOption,
    PermissionRequested,
    QuestionAsked,
    SessionFacts,
    SessionModes,
    TurnEvent,
)
from bridge.runtime.port import (
    AGENT_CHOICE,
    PROJECT_CHOICE,
    WORKSPACE_CHOICE,
    AgentRuntime,
    EventSink,
    PromptFile,
    SessionHandle,
)

if TYPE_CHECKING:
    from bridge.config import Settings
    from bridge.runtime.acp.process import AgentProcess
    from bridge.runtime.acp.sessions import SessionInfo

ACP_MODULE: Final = "bridge.runtime.acp.runtime"
# Sessions whose runtime is remembered before those no runtime holds any more are forgotten
# (every /new, move or lost agent leaves one); then twice as many as are still held.
OWNERS_KEPT: Final = 256


@dataclass(frozen=True)
class Routes:
    """The configured agent profiles (name, argv) and workspaces (name, resolved folder),
    the first of each the default. Pure data the engine reads too (for /agent and /cd)."""

    agents: tuple[tuple[str, tuple[str, ...]], ...]
    workspaces: tuple[tuple[str, Path], ...]
    # A project's mode and model for a session the conversation set nothing for
    # (`MODE_CHOICE`, `CONFIG_CHOICE` + "model"), applied where its agent offers them.
    defaults: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.agents or not self.workspaces:
            raise ValueError("at least one agent and one workspace")

    @classmethod
    def of(
        cls, agents: Sequence[tuple[str, Sequence[str]]], workspaces: Sequence[tuple[str, Path]]
    ) -> Routes:
        return cls(tuple((n, tuple(argv)) for n, argv in agents), tuple(workspaces))

    @classmethod
    def single(cls, folder: Path | None = None) -> Routes:
        """One agent in one folder (tests, and engines built without settings)."""
        return cls((("agent", ("agent",)),), (("work", folder or Path.cwd()),))

    @property
    def agent_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.agents)

    def agent(self, chosen: Mapping[str, str]) -> str:
        """The conversation's agent: its choice while that profile exists, else the first."""
        name = chosen.get(AGENT_CHOICE, "")
        return name if name in self.agent_names else self.agents[0][0]

    def folder(self, chosen: Mapping[str, str]) -> tuple[Path, Path]:
        """(workspace root, working folder) of the conversation: its choice while it is
        still inside a configured workspace, else the first workspace."""
        wanted = chosen.get(WORKSPACE_CHOICE)
        root = self.root_of(Path(wanted)) if wanted else None
        if wanted and root is not None:
            return root, Path(wanted)
        root = self.workspaces[0][1]
        return root, root

    def root_of(self, path: Path) -> Path | None:
        """The workspace `path` (resolved) lies in; None when it is in none."""
        return next((root for _, root in self.workspaces if within(path, root)), None)

    def workspace_name(self, root: Path) -> str:
        return next((name for name, folder in self.workspaces if folder == root), root.name)


@dataclass(frozen=True)
class Projects:
    """Every project a conversation may work on (name, its `Routes`), the first its app's
    default; `routed`: the project a chat (chat id, None) or one topic thread of it (chat
    id, thread id) works on unless it chose another."""

    projects: tuple[tuple[str, Routes], ...]
    routed: Mapping[tuple[str, str | None], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.projects:
            raise ValueError("at least one project")

    @classmethod
    def single(cls, routes: Routes) -> Projects:
        """One project (the environment settings': unnamed)."""
        return cls((("", routes),))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.projects)

    @property
    def first(self) -> Routes:
        return self.projects[0][1]

    def name(self, conversation_key: str, chosen: Mapping[str, str]) -> str:
        wanted = chosen.get(PROJECT_CHOICE, "")
        if wanted and wanted in self.names:
            return wanted
        chat, _, thread = conversation_key.partition(":")
        found = self.routed.get((chat, thread or None)) or self.routed.get((chat, None))
        return found if found in self.names else self.projects[0][0]

    def of(self, conversation_key: str, chosen: Mapping[str, str]) -> Routes:
        """The `Routes` of the project the conversation works on."""
        return dict(self.projects)[self.name(conversation_key, chosen)]


class RouteRuntime(AgentRuntime, Protocol):
    """What serves one route: the port, plus letting a conversation go that moved to another
    route, plus the diagnostics operators and tests read."""

    def release(self, conversation_key: str) -> None: ...

    def session_info(self, session_id: str) -> SessionInfo | None: ...

    def running_processes(self) -> list[AgentProcess]: ...


Build = Callable[[Sequence[str], Path], RouteRuntime]
# A project's builder: its name first (its sandbox and limits are its own).
ProjectBuild = Callable[[str, Sequence[str], Path], RouteRuntime]


class RoutedRuntime:
    """Implements `AgentRuntime` over one runtime per (project, agent profile, workspace),
    each built when a call first needs it."""

    def __init__(
        self,
        routes: Routes | Projects,
        build: Build | None = None,
        *,
        of: ProjectBuild | None = None,
    ) -> None:
        self.projects = routes if isinstance(routes, Projects) else Projects.single(routes)
        self.routes = self.projects.first
        if of is None:
            if build is None:
                raise TypeError("a builder is needed")
            one = build

            def of(project: str, argv: Sequence[str], root: Path) -> RouteRuntime:
                return one(argv, root)

        self._build = of
        self._runtimes: dict[tuple[str, str, Path], RouteRuntime] = {}
        self._owner: dict[str, RouteRuntime] = {}  # session id -> its runtime
        self._owners_kept = OWNERS_KEPT
        self._requests: dict[str, RouteRuntime] = {}  # pending request id -> its runtime
        self._placed: dict[str, RouteRuntime] = {}  # conversation key -> its runtime now

    def runtime(self, agent: str, root: Path, project: str | None = None) -> RouteRuntime:
        project = self.projects.names[0] if project is None else project
        found = self._runtimes.get((project, agent, root))
        if found is None:
            argv = dict(dict(self.projects.projects)[project].agents)[agent]
            found = self._runtimes[(project, agent, root)] = self._build(project, argv, root)
        return found

    @property
    def default(self) -> RouteRuntime:
        return self.runtime(self.routes.agents[0][0], self.routes.workspaces[0][1])

    async def warm(self) -> None:
        """Import the ACP SDK in a worker thread: the event loop keeps serving meanwhile."""
        await asyncio.to_thread(importlib.import_module, ACP_MODULE)

    async def start(self) -> None:
        await self.default.start()

    async def open_session(
        self,
        conversation_key: str,
        *,
        resume_session_id: str | None = None,
        chosen: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        chosen = dict(chosen or {})
        project = self.projects.name(conversation_key, chosen)
        routes = dict(self.projects.projects)[project]
        chosen = {**dict(routes.defaults), **chosen}
        root, folder = routes.folder(chosen)
        runtime = self.runtime(routes.agent(chosen), root, project)
        before = self._placed.get(conversation_key)
        if before is not None and before is not runtime:
            before.release(conversation_key)  # it moved: its idle session there goes
        chosen[WORKSPACE_CHOICE] = str(folder)
        owner = self._owner.get(resume_session_id or "")
        resume = resume_session_id if owner in (None, runtime) else None
        handle = await runtime.open_session(
            conversation_key, resume_session_id=resume, chosen=chosen
        )
        self._owner[handle.session_id] = runtime
        self._placed[conversation_key] = runtime
        if len(self._owner) > self._owners_kept:
            self._forget_gone()
        return handle

    def _forget_gone(self) -> None:
        """Sessions no runtime holds any more (a conversation's earlier ones) are forgotten,
        as a restart forgets them all: resuming one asks the runtime it would open on."""
        held = {s: rt for s, rt in self._owner.items() if rt.session_info(s) is not None}
        self._owner = held
        self._owners_kept = max(OWNERS_KEPT, 2 * len(held))

    def _of(self, session_id: str) -> RouteRuntime:
        return self._owner.get(session_id) or self.default

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        runtime = self._of(session_id)

        def routed(event: TurnEvent) -> None:
            if isinstance(event, PermissionRequested | QuestionAsked):
                self._requests[event.request_id] = runtime  # its answer goes back there
            sink(event)

        await runtime.prompt(session_id, text, routed, files)

    async def cancel(self, session_id: str) -> None:
        await self._of(session_id).cancel(session_id)

    async def abandon(self, session_id: str) -> None:
        await self._of(session_id).abandon(session_id)

    async def answer_permission(self, request_id: str, option_id: str | None) -> None:
        runtime = self._requests.pop(request_id, None) or self.default
        await runtime.answer_permission(request_id, option_id)

    async def answer_question(self, request_id: str, answers: Mapping[str, str] | None) -> None:
        runtime = self._requests.pop(request_id, None) or self.default
        await runtime.answer_question(request_id, answers)

    async def modes(self, session_id: str) -> SessionModes | None:
        return await self._of(session_id).modes(session_id)

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        await self._of(session_id).set_mode(session_id, mode_id)

    async def config(self, session_id: str) -> tuple[ConfigOption, ...]:
        return await self._of(session_id).config(session_id)

    async def set_config(self, session_id: str, config_id: str, value: str) -> None:
        await self._of(session_id).set_config(session_id, config_id, value)

    async def commands(self, session_id: str) -> tuple[str, ...]:
        return await self._of(session_id).commands(session_id)

    async def facts(self, session_id: str) -> SessionFacts | None:
        runtime = self._owner.get(session_id)
        found = await (runtime or self.default).facts(session_id)
        if found is None:
            return None
        agent = next((a for (_, a, _), rt in self._runtimes.items() if rt is runtime), "")
        return replace(found, agent=agent or self.routes.agents[0][0])

    async def session_titles(self, chosen: Mapping[str, str]) -> dict[str, str]:
        """The titles the runtime of `chosen`'s agent and folder keeps: of the project that
        has that agent and folder, else of the first; never built just to list."""
        wanted = Path(chosen.get(WORKSPACE_CHOICE) or ".")
        project, routes = next(
            (
                (name, routes)
                for name, routes in self.projects.projects
                if chosen.get(AGENT_CHOICE) in routes.agent_names and routes.root_of(wanted)
            ),
            self.projects.projects[0],
        )
        root, folder = routes.folder(chosen)
        runtime = self._runtimes.get((project, routes.agent(chosen), root))
        if runtime is None:
            return {}
        return await runtime.session_titles({**chosen, WORKSPACE_CHOICE: str(folder)})

    async def close(self) -> None:
        for runtime in self._runtimes.values():
            with contextlib.suppress(Exception):
                await runtime.close()

    # --- what operators and tests read ------------------------------------------------------

    def session_info(self, session_id: str) -> SessionInfo | None:
        runtime = self._owner.get(session_id)
        return runtime.session_info(session_id) if runtime is not None else None

    def running_processes(self) -> list[AgentProcess]:
        """Every route's running agent processes."""
        return [p for runtime in self._runtimes.values() for p in runtime.running_processes()]

    def snapshot(self) -> dict[str, Any]:
        """The default runtime's view; with several routes, every route's agents too; before
        any runtime is built, no agent."""
        if not self._runtimes:
            idle = {"unknown_updates": 0, "late_updates": 0, "oversize_updates": 0}
            program = Path(self.routes.agents[0][1][0]).name
            return {
                "command": program,
                **idle,
                "cancel_tails": 0,
                "pending_requests": 0,
                "agents": [],
            }
        if len(self._runtimes) <= 1:
            return self.default.snapshot()
        merged = dict(self.default.snapshot())
        merged["routes"] = [
            {
                **({"project": project} if project else {}),
                "agent": agent,
                "workspace": dict(self.projects.projects)[project].workspace_name(root),
                **rt.snapshot(),
            }
            for (project, agent, root), rt in self._runtimes.items()
        ]
        return merged


def acp_routed(
    settings: Settings,
    routes: Routes | Projects,
    clock: Clock,
    options: Mapping[str, Any],
    project_settings: Mapping[str, Settings] | None = None,
) -> RoutedRuntime:
    """One ACP runtime per project, agent profile and workspace, built as conversations need
    them (`options`: the agent's extra environment, the process-change hook;
    `project_settings`: a project's own agent settings, its sandbox among them)."""

    def build(project: str, argv: Sequence[str], folder: Path) -> RouteRuntime:
        # The ACP SDK is imported here, at the first build, never at start-up (see above).
        from bridge.runtime.acp.runtime import AcpRuntime

        own = (project_settings or {}).get(project, settings)
        return AcpRuntime.from_settings(own, clock=clock, argv=argv, workdir=folder, **options)

    return RoutedRuntime(routes, of=build)
