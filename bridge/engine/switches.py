"""Carrying out `/project`, `/agent`, `/cd`, `/sessions`, `/resume` and `/status`: what the
conversation may move to, moving it, and what its session runs on. The core chose to ask
and chooses the words; this module finds the facts (paths resolved on disk, the store's
record of sessions, the runtime's view of the session).

A move is a choice kept in the store (`AGENT_CHOICE`, `WORKSPACE_CHOICE`) plus the session
binding dropped, so the next message opens a session there; the runtime router reads the
choices when it opens one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bridge.core.effects import AskStatus, AskSwitch
from bridge.core.inputs import StatusAnswered, SwitchAnswered, SwitchResult
from bridge.engine.actor import ConversationActor
from bridge.engine.turn_runner import TurnRunner
from bridge.runtime.events import SessionFacts
from bridge.runtime.port import (
    AGENT_CHOICE,
    PROJECT_CHOICE,
    WORKSPACE_CHOICE,
    AgentRuntime,
    RuntimeUnavailable,
)
from bridge.runtime.router import Projects
from bridge.store.port import SessionRecord, Store

SESSIONS_LISTED = 10


class Switches:
    def __init__(
        self,
        *,
        routes: Projects,
        runtime: AgentRuntime,
        store: Store,
        runner: TurnRunner,
        clock: Callable[[], float],
    ) -> None:
        self._routes = routes
        self._runtime = runtime
        self._store = store
        self._runner = runner
        self._clock = clock

    async def switch(self, actor: ConversationActor, work: AskSwitch) -> None:
        key = actor.key
        if work.kind == "agent":
            answer = await self._agent(key, work)
        elif work.kind == "cd":
            answer = await self._cd(key, work)
        elif work.kind == "project":
            answer = await self._project(key, work)
        else:
            answer = await self._resume(key, work)
        actor.feed(answer)

    async def status(self, actor: ConversationActor, work: AskStatus) -> None:
        facts = await self._runtime.facts(work.session_id) if work.session_id else None
        if facts is None:  # no session yet: where the next one will be opened
            chosen = await self._store.preferences(actor.key)
            routes = self._routes.of(actor.key, chosen)
            facts = SessionFacts(routes.agent(chosen), str(routes.folder(chosen)[1]))
        actor.feed(StatusAnswered(work.message_id, facts))

    async def _agent(self, key: str, work: AskSwitch) -> SwitchAnswered:
        chosen = await self._store.preferences(key)
        routes = self._routes.of(key, chosen)
        current = routes.agent(chosen)
        entries = tuple(f"{name} — {Path(argv[0]).name}" for name, argv in routes.agents)

        def answer(result: SwitchResult, detail: str = "") -> SwitchAnswered:
            return SwitchAnswered(
                work.message_id, "agent", result, current, entries, work.choice, detail
            )

        if not work.choice:
            return answer(SwitchResult.LISTED)
        if work.choice not in routes.agent_names:
            return answer(SwitchResult.UNKNOWN)
        if work.choice == current:
            return answer(SwitchResult.SAME, current)
        await self._move(key, {AGENT_CHOICE: work.choice})
        return answer(SwitchResult.SWITCHED, work.choice)

    async def _cd(self, key: str, work: AskSwitch) -> SwitchAnswered:
        chosen = await self._store.preferences(key)
        routes = self._routes.of(key, chosen)
        _, folder = routes.folder(chosen)
        entries = tuple(f"{name} — {root}" for name, root in routes.workspaces)

        def answer(result: SwitchResult, detail: str = "") -> SwitchAnswered:
            return SwitchAnswered(
                work.message_id, "cd", result, str(folder), entries, work.choice, detail
            )

        if not work.choice:
            return answer(SwitchResult.LISTED)
        named = dict(routes.workspaces).get(work.choice)
        # Symlinks and `..` resolved before the check: the real folder must be inside a root.
        target = named or (folder / work.choice).resolve()
        if routes.root_of(target) is None:
            return answer(SwitchResult.OUTSIDE)
        if not target.is_dir():
            return answer(SwitchResult.UNKNOWN)
        if target == folder:
            return answer(SwitchResult.SAME, str(target))
        await self._move(key, {WORKSPACE_CHOICE: str(target)})
        return answer(SwitchResult.SWITCHED, str(target))

    async def _project(self, key: str, work: AskSwitch) -> SwitchAnswered:
        """`/project`: the projects of this bot (its agents and first folder each), or a move
        to one: its own agents and folders from then on, each at its default."""
        chosen = await self._store.preferences(key)
        current = self._routes.name(key, chosen)
        projects = self._routes.projects
        entries = tuple(  # one project: nothing to switch to (`command.project_none`)
            f"{name} — {Path(routes.agents[0][1][0]).name} · {routes.workspaces[0][1]}"
            for name, routes in (projects if len(projects) > 1 else ())
        )

        def answer(result: SwitchResult, detail: str = "") -> SwitchAnswered:
            return SwitchAnswered(
                work.message_id, "project", result, current, entries, work.choice, detail
            )

        if not work.choice:
            return answer(SwitchResult.LISTED)
        if work.choice not in self._routes.names:
            return answer(SwitchResult.UNKNOWN)
        if work.choice == current:
            return answer(SwitchResult.SAME, current)
        # The agent and folder chosen in the other project mean nothing in this one.
        await self._move(key, {PROJECT_CHOICE: work.choice, AGENT_CHOICE: "", WORKSPACE_CHOICE: ""})
        return answer(SwitchResult.SWITCHED, work.choice)

    async def _resume(self, key: str, work: AskSwitch) -> SwitchAnswered:
        records = await self._titled(await self._store.sessions_of(key, SESSIONS_LISTED))
        bound = await self._store.session_for(key)
        entries = tuple(
            f"{n}. {_title(r)} · {r.agent} · {Path(r.folder).name or r.folder}"
            f" · {time.strftime('%m-%d %H:%M', time.localtime(r.active_at))}"
            + (" ◀" if r.session_id == bound else "")
            for n, r in enumerate(records, start=1)
        )
        current = next((str(n) for n, r in enumerate(records, 1) if r.session_id == bound), "")

        def answer(result: SwitchResult, detail: str = "") -> SwitchAnswered:
            return SwitchAnswered(
                work.message_id, "resume", result, current, entries, work.choice, detail
            )

        if not work.choice:
            return answer(SwitchResult.LISTED)
        number = int(work.choice) if work.choice.isdigit() else 0
        if not 1 <= number <= len(records):
            return answer(SwitchResult.UNKNOWN)
        record = records[number - 1]
        title = _title(record)
        if record.session_id == bound:
            return answer(SwitchResult.SAME, title)
        await self._move(key, {AGENT_CHOICE: record.agent, WORKSPACE_CHOICE: record.folder})
        await self._store.bind_session(key, record.session_id, self._clock())
        try:
            # Resumed now, not at the next message, so the user learns at once if it worked.
            opened = await self._runner.open_session(key)
        except RuntimeUnavailable as exc:
            return answer(SwitchResult.FAILED, exc.reason)
        if opened != record.session_id:
            return answer(SwitchResult.FRESH, title)
        return answer(SwitchResult.SWITCHED, title)

    async def _titled(self, records: list[SessionRecord]) -> list[SessionRecord]:
        """The agent's own titles (`session/list`) where it keeps them, for these sessions
        only: its list holds every chat's sessions in that folder, never shown here."""
        titles: dict[str, str] = {}
        for agent, folder in {(r.agent, r.folder) for r in records}:
            chosen = {AGENT_CHOICE: agent, WORKSPACE_CHOICE: folder}
            titles.update(await self._runtime.session_titles(chosen))
        return [replace(r, title=titles.get(r.session_id) or r.title) for r in records]

    async def _move(self, key: str, choices: dict[str, str]) -> None:
        now = self._clock()
        await self._runner.leave(key, "switched")
        for name, value in choices.items():
            await self._store.set_preference(key, name, value, now)


def _title(record: SessionRecord) -> str:
    """A session as the user reads it: its title, or the start of its id without one."""
    return record.title or record.session_id[:12]
