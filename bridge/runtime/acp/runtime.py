"""`AcpRuntime`: the `AgentRuntime` port over the Agent Client Protocol (stdio JSON-RPC).

The pieces: `pool` (agent processes: placement, start, restart), `sessions` (bind, resume,
reload), `prompting` (prompt, cancel, and a cancelled turn's leftover result), `turns` (one
prompt and its one ending), `client` (the agent's calls, and what it asks of the user, per
dialect). This facade wires them, answers the agent's callbacks, passes on what a
conversation changes of its session (`/mode`, `/model`: kept by `Sessions`, which sets them
again on a restarted agent) and shows operators its processes, sessions and counters.

* **Process death** is watched directly (the SDK only shows a dead agent as
  `ConnectionError`). Running turns on it end with `RuntimeExited` and their pending
  requests resolve; idle sessions get no event. The next caller needing the slot restarts
  it and reloads the session where the agent can.
* **Cancel** sends `session/cancel` and answers every pending request of the session
  `cancelled` at once, as the spec asks; the session stays on its process (`prompting`).
* **No watchdog here.** Turn staleness is the core's job; the SDK's receive timeout would
  kill the whole connection, so it is never set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp.exceptions import RequestError
from acp.schema import (
    CancelElicitationResponse,
    ElicitationFormSessionMode,
    ElicitationMode,
    PermissionOption,
    ToolCallUpdate,
)
from tenacity import wait_exponential
from tenacity.wait import wait_base

from bridge.clock import Clock, Ids, new_id
from bridge.runtime.acp.client import (
    BridgeClient,
    ElicitationRequest,
    PendingRequest,
    PendingRequests,
    PermissionRequest,
    QwenQuestion,
    build_handler,
    cancelled_permission,
    client_capabilities,
)
from bridge.runtime.acp.normalize import (
    SESSION_STATE_KINDS,
    elicitation_question,
    is_qwen_question,
    offer_events,
    permission_event,
    qwen_question,
    turn_event,
    update_kind,
)
from bridge.runtime.acp.pool import AgentPool, PoolLimits
from bridge.runtime.acp.process import AgentProcess, StartProcess, start_subprocess
from bridge.runtime.acp.prompting import Prompting
from bridge.runtime.acp.sessions import AcpSession, AcpTurn, SessionInfo, SessionLost, Sessions
from bridge.runtime.events import (
    ConfigOption,
    RuntimeExited,
    SessionFacts,
    SessionModes,
    TurnEvent,
    UsageReported,
    model_option,
)
from bridge.runtime.port import WORKSPACE_CHOICE, EventSink, PromptFile, SessionHandle
from bridge.runtime.sandbox import SandboxPolicy

if TYPE_CHECKING:
    from bridge.config import Settings

logger = logging.getLogger(__name__)

# Environment variables an agent process never sees: the Feishu app secret, the operator
# token, and every other setting of the bridge (a future secret among them).
SCRUBBED_PREFIXES = ("FEISHU_", "BRIDGE_")

__all__ = ["AcpRuntime", "SessionInfo", "SessionLost"]


class AcpRuntime:
    """Drives ACP agent subprocesses; see the module docstring for the policies."""

    def __init__(
        self,
        argv: Sequence[str],
        workdir: Path,
        *,
        clock: Clock,
        max_agents: int = 2,
        elicitation: bool = False,
        env: Mapping[str, str] | None = None,
        sessions_per_agent: int | None = None,
        restart_attempts: int = 3,
        restart_wait: wait_base | None = None,
        start_timeout: float = 60.0,
        shutdown_timeout: float = 2.0,
        stderr_lines: int = 200,
        sandbox: SandboxPolicy | None = None,
        on_change: Callable[[], None] | None = None,
        new_id: Ids = new_id,
        start_process: StartProcess = start_subprocess,
    ) -> None:
        """`on_change`: told (synchronously) when an agent process starts or exits, a
        session opens or is let go, or a turn begins or ends, so the operator view of the
        processes is pushed, never polled. `clock`: the bridge's (when a process became
        ready; how its output is timed). `start_process`: how an agent process is started
        (the spawn port, `process.StartProcess`)."""
        if not argv:
            raise ValueError("argv must name a program")
        if max_agents < 1:
            raise ValueError("max_agents must be at least 1")
        self._elicitation = elicitation
        self._new_id = new_id
        # The agent needs its own credentials (API keys) from the environment: inherit it,
        # but never the bridge's own Feishu secrets.
        inherited = {
            k: v for k, v in os.environ.items() if not k.upper().startswith(SCRUBBED_PREFIXES)
        }
        limits = PoolLimits(
            max_agents=max_agents,
            sessions_per_agent=sessions_per_agent,
            restart_attempts=restart_attempts,
            start_timeout=start_timeout,
            shutdown_timeout=shutdown_timeout,
            stderr_lines=stderr_lines,
            sandbox=sandbox,
        )
        self._pool = AgentPool(
            argv,
            Path(workdir).resolve(),
            {**inherited, **(env or {})},
            limits,
            restart_wait or wait_exponential(multiplier=0.5, max=10),
            capabilities=client_capabilities(elicitation),
            handler_for=lambda generation: build_handler(BridgeClient(self, generation)),
            on_exit=self._on_process_exit,
            clock=clock,
            on_change=on_change,
            start=start_process,
        )
        self._on_change = on_change or (lambda: None)
        self._sessions = Sessions(self._pool)
        self._requests = PendingRequests()
        self._prompting = Prompting(
            self._sessions,
            self._requests,
            exited=self._pool.exited,
            shutdown_timeout=shutdown_timeout,
            on_change=self._on_change,
        )
        self.unknown_updates = 0
        self.late_updates = 0  # turn updates after their prompt's result: dropped

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        clock: Clock,
        argv: Sequence[str] | None = None,
        workdir: Path | None = None,
        **overrides: Any,
    ) -> AcpRuntime:
        """The runtime of one agent profile (`argv`) in one workspace (`workdir`); by
        default the first of each."""
        agent = settings.agent
        argv = argv or agent.agent_profiles[0][1]
        workdir = workdir or agent.workspace_roots[0][1]
        options: dict[str, Any] = {
            "max_agents": agent.bridge_max_agents,
            "sessions_per_agent": agent.bridge_sessions_per_agent or None,
            "elicitation": agent.bridge_elicitation,
            "sandbox": SandboxPolicy.from_settings(settings, workdir=workdir),
        }
        options.update(overrides)
        return cls(argv, workdir, clock=clock, **options)

    # --- the AgentRuntime port ----------------------------------------------------------------

    async def start(self) -> None:
        """Start the first agent process now, so a broken command is reported at startup."""
        await self._pool.live(self._pool.slots[0])

    async def open_session(
        self,
        conversation_key: str,
        *,
        resume_session_id: str | None = None,
        chosen: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        try:
            return await self._sessions.open(conversation_key, resume_session_id, chosen or {})
        finally:
            self._on_change()  # a slot's session count

    def release(self, conversation_key: str) -> None:
        """The conversation now works with another agent or workspace (see `Sessions`)."""
        self._sessions.release(conversation_key)
        self._on_change()

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        await self._prompting.prompt(session_id, text, sink, files)

    async def cancel(self, session_id: str) -> None:
        await self._prompting.cancel(session_id)

    async def abandon(self, session_id: str) -> None:
        await self._prompting.abandon(session_id)

    async def answer_permission(self, request_id: str, option_id: str | None) -> None:
        pending = self._pending(request_id)
        if pending is None:
            return
        if not isinstance(pending, PermissionRequest):
            raise ValueError(f"request {request_id} is a question; use answer_question")
        pending.answer(option_id)

    async def answer_question(self, request_id: str, answers: Mapping[str, str] | None) -> None:
        pending = self._pending(request_id)
        if pending is None:
            return
        if not isinstance(pending, ElicitationRequest | QwenQuestion):
            raise ValueError(f"request {request_id} is a permission; use answer_permission")
        pending.answer(answers)

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

    async def close(self) -> None:
        self._pool.closing = True
        for session in self._sessions.all():
            if session.turn is not None:
                session.turn.finish(RuntimeExited(session.session_id, restarting=False))
        for pending in self._requests:
            pending.cancel()
        await self._pool.close()

    # --- what operators and tests read --------------------------------------------------------

    @property
    def cancel_tails(self) -> int:
        """Prompts answered by a cancelled turn's leftover result (see `Prompting`)."""
        return self._prompting.cancel_tails

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

    # --- processes ----------------------------------------------------------------------------

    def _on_process_exit(self, process: AgentProcess) -> None:
        sessions = self._sessions.on_process(process)
        turns = self._sessions.turns_on(process)
        if not process.ready:
            logger.debug("agent[%d] pid %d exited during start", process.slot, process.pid)
        elif process.retiring:
            logger.info("agent[%d] pid %d stopped for a restart", process.slot, process.pid)
        elif not self._pool.closing:
            logger.warning(
                "agent[%d] pid %d exited with code %s; %d running turn(s) ended",
                process.slot,
                process.pid,
                process.returncode,
                len(turns),
            )
        for turn in turns:
            turn.finish(self._pool.exited(process, turn.session_id))
        # Its pending requests are over for us; no answer can reach a dead process, so the
        # handler tasks are cancelled rather than made to write to a closed pipe.
        for pending in self._requests.of_sessions({s.session_id for s in sessions}):
            pending.future.cancel()
        task = asyncio.get_running_loop().create_task(self._close_connection(process))
        process.tasks.add(task)
        task.add_done_callback(process.tasks.discard)
        self._on_change()

    @staticmethod
    async def _close_connection(process: AgentProcess) -> None:
        """Stop the SDK's tasks (receive loop, request handlers) of a dead connection."""
        with contextlib.suppress(Exception):
            await process.conn.close()

    def _pending(self, request_id: str) -> PendingRequest | None:
        pending = self._requests.get(request_id)
        if pending is None:
            logger.info("answer for request %s ignored: it is no longer pending", request_id)
        return pending

    def _turn_for(
        self, generation: int, session_id: str
    ) -> tuple[AcpSession | None, AcpTurn | None]:
        session = self._sessions.get(session_id)
        if session is None or session.process.generation != generation:
            return None, None
        if session.process.retiring:
            return None, None  # a process being replaced: nothing of it is shown
        turn = session.turn
        if turn is not None and turn.moving:
            return None, None  # a prompt to be sent again on a new process: its run here is not
        return session, (turn if turn is not None and not turn.done else None)

    # --- ClientHost: callbacks from BridgeClient ------------------------------------------

    def on_update(self, generation: int, session_id: str, update: Any) -> None:
        session, turn = self._turn_for(generation, session_id)
        if session is None:
            return  # a stale process, a replay during load, or an unknown session
        if update_kind(update) in SESSION_STATE_KINDS:
            session.info.absorb(update)
            usage = session.info.usage
            if turn is not None and update_kind(update) == "usage_update" and usage:
                turn.emit(UsageReported(session_id, usage))
            return
        if turn is None:
            session.info.idle_updates += 1
            if session.prompts and not session.reload_lock.locked():
                # Not a load's replay: the agent wrote after its prompt's result.
                self.late_updates += 1
                logger.info("dropped a late %s (session %s)", update_kind(update), session_id)
            return
        turn.note_tool_call(update)
        event = turn_event(session_id, update)
        if event is not None:
            turn.updates += 1
            turn.emit(event)
        for offer in offer_events(session_id, update):
            turn.emit(offer)

    async def on_permission(
        self,
        generation: int,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        meta: dict[str, Any],
    ) -> Any:
        _, turn = self._turn_for(generation, session_id)
        if turn is None or turn.cancel_requested:
            logger.info("permission request outside a running turn answered cancelled")
            return cancelled_permission()
        request_id = self._new_id()[:12]
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending: PendingRequest
        if is_qwen_question(tool_call, meta):
            question = qwen_question(session_id, request_id, tool_call, options, meta)
            pending = QwenQuestion(
                request_id,
                session_id,
                future,
                submit_option_id=question.submit_option_id,
                decline_option_id=question.decline_option_id,
            )
            event: TurnEvent = question.event
        else:
            option_ids = frozenset(o.option_id for o in options)
            pending = PermissionRequest(request_id, session_id, future, option_ids=option_ids)
            event = permission_event(session_id, request_id, turn.completed(tool_call), options)
        return await self._wait_answer(turn, pending, event)

    async def on_elicitation(
        self, generation: int, message: str, mode: ElicitationMode, meta: dict[str, Any]
    ) -> Any:
        if not self._elicitation:
            raise RequestError.method_not_found("elicitation/create")
        if not isinstance(mode, ElicitationFormSessionMode):
            # Only session-scoped forms were declared; URL or request-scoped forms are not.
            return CancelElicitationResponse(action="cancel")
        _, turn = self._turn_for(generation, mode.session_id)
        if turn is None or turn.cancel_requested:
            return CancelElicitationResponse(action="cancel")
        request_id = self._new_id()[:12]
        question = elicitation_question(mode.session_id, request_id, message, mode.requested_schema)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending = ElicitationRequest(request_id, mode.session_id, future, types=question.types)
        return await self._wait_answer(turn, pending, question.event)

    async def _wait_answer(self, turn: AcpTurn, pending: PendingRequest, event: TurnEvent) -> Any:
        self._requests.add(pending)
        turn.emit(event)  # before the await: keeps its place among the turn's updates
        try:
            return await pending.future
        finally:
            self._requests.discard(pending.request_id)

    def on_unknown_update(self, kind: str) -> None:
        """An update kind the SDK schema lacks (its notification is dropped)."""
        self.unknown_updates += 1
        logger.warning("agent sent an unknown session update kind %r; dropped", kind[:64])
