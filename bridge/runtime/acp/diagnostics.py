"""What operators and tests read of an `AcpRuntime`: its processes, sessions and counters.
Mixed into `AcpRuntime`."""

from __future__ import annotations

from typing import Any

from bridge.runtime.acp.pool import AgentPool
from bridge.runtime.acp.process import AgentProcess
from bridge.runtime.acp.requests import PendingRequests
from bridge.runtime.acp.session import SessionInfo
from bridge.runtime.acp.sessions import Sessions


class Diagnostics:
    _pool: AgentPool
    _sessions: Sessions
    _requests: PendingRequests
    unknown_updates: int
    late_updates: int
    cancel_tails: int

    def session_info(self, session_id: str) -> SessionInfo | None:
        session = self._sessions.get(session_id)
        return session.info if session else None

    def pending_request_ids(self) -> list[str]:
        return self._requests.ids()

    def running_processes(self) -> list[AgentProcess]:
        return self._pool.running()

    def snapshot(self) -> dict[str, Any]:
        """Operator view: processes and their sessions. Never the stderr tail: an agent may
        echo the prompt there (it is in the DEBUG log only)."""
        return {
            "command": self._pool.program,
            "unknown_updates": self.unknown_updates,
            "late_updates": self.late_updates,
            "cancel_tails": self.cancel_tails,
            "oversize_updates": self._pool.oversize_lines,
            "pending_requests": len(self._requests),
            "agents": [
                {
                    "slot": slot.index,
                    "pid": slot.process.pid if slot.process else None,
                    "alive": slot.alive,
                    "state": slot.state,
                    "started_at": slot.started_at,
                    "restarts": max(0, slot.starts - 1),
                    "returncode": slot.process.returncode if slot.process else None,
                    "sessions": sessions,
                    "running_turns": running,
                }
                for slot in self._pool.slots
                for sessions, running in [self._sessions.counts(slot.index)]
            ],
        }
