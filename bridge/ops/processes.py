"""The agent processes as the operator sees them: one row per process slot, whichever agent
profile and workspace it serves, read from the runtime's `snapshot()` (never a stderr line)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.ops.projection import Projection
from bridge.runtime.port import AgentRuntime

_FIELDS = (
    "slot",
    "pid",
    "state",
    "alive",
    "started_at",
    "restarts",
    "returncode",
    "sessions",
    "running_turns",
)


def process_view(runtime: Mapping[str, Any], agent: str, workspace: str) -> list[dict[str, Any]]:
    """Flatten the runtime's view: with several routes each route's agents, else the one
    runtime's, named after the default `agent` profile and `workspace`. Slots never started
    are left out (capacity, not processes)."""
    routes = runtime.get("routes")
    groups = routes if routes else [{"agent": agent, "workspace": workspace, **runtime}]
    return [
        {
            "agent": group.get("agent", agent),
            "workspace": group.get("workspace", workspace),
            "command": group.get("command"),
            **{name: row.get(name) for name in _FIELDS},
        }
        for group in groups
        for row in group.get("agents", [])
        if row.get("state") != "not_started"
    ]


class ProcessWatch:
    """Pushes the agent processes' view onto the projection when it changed (never polled):
    told by the runtime when a process starts or exits, a session opens or is let go, and a
    turn begins or ends (not at each of a turn's updates: a streamed answer's every chunk
    recomputed the view). `runtime` is set once it is built."""

    def __init__(self, projection: Projection, agent: str, workspace: str) -> None:
        self._projection = projection
        self._agent = agent
        self._workspace = workspace
        self.runtime: AgentRuntime | None = None

    def changed(self) -> None:
        if self.runtime is not None:
            view = process_view(self.runtime.snapshot(), self._agent, self._workspace)
            self._projection.processes(view)

    def publish(self, conversation_key: str, snapshot: dict[str, object]) -> None:
        """The engine's `publish`: the conversation's snapshot."""
        self._projection.publish(conversation_key, snapshot)
