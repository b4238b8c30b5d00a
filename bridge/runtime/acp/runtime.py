"""`AcpRuntime`: the `AgentRuntime` port over the Agent Client Protocol (stdio JSON-RPC).

Policies (documented in docs/configuration.md by the integrator; summarized here):

* **Process pool.** Up to `max_agents` agent processes ("slots"); each serves many
  sessions. A new session goes to a running process that serves no session yet, else to a
  slot never started (a new process), else to the least-loaded slot. With
  `sessions_per_agent` set, a slot serving that many is full; when every slot is full,
  `open_session` raises `RuntimeUnavailable(limit_reached=True)` at once — never a wait.
  Opening a session for a conversation releases that conversation's previous session.
* **Start and restart.** A process that cannot be executed (missing program, bad workdir)
  fails at once; one that exits or errors during `initialize` is retried with tenacity
  (`restart_attempts`, `restart_wait` — inject `wait_none()` in tests). Either way the
  caller gets `RuntimeUnavailable` saying why; nothing looks "running" meanwhile.
* **Process death.** Watched directly (the SDK only shows a dead agent as
  `ConnectionError`). Running turns on it end with `RuntimeExited` and their pending
  approvals/questions resolve as cancelled; idle sessions get no event. The process is
  restarted lazily by the next `open_session`/`prompt` that needs it, which reloads the
  session with `session/load` when the agent advertises `loadSession` (history replayed
  during the load is never emitted). Without `loadSession` the old session is lost:
  `prompt` raises `SessionLost`, `open_session(resume_session_id=…)` opens a new session
  (`loaded=False`).
* **Cancel.** `session/cancel`, and every pending request of the session answered
  `cancelled` at once (as the spec asks). An error answer to a cancelled prompt counts as
  the `cancelled` stop reason (the spec asks agents not to do that, but some do).
* **No watchdog here.** Turn staleness is the core's job; the SDK's receive timeout would
  kill the whole connection, so it is never set.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from acp.connection import StreamDirection, StreamEvent
from acp.exceptions import RequestError
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    AvailableCommandsUpdate,
    CancelElicitationResponse,
    ClientCapabilities,
    CurrentModeUpdate,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    ElicitationFormSessionMode,
    ElicitationMode,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    SessionInfoUpdate,
    ToolCallUpdate,
)
from pydantic import ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential
from tenacity.wait import wait_base

from bridge.runtime.acp.client import BridgeClient, build_handler, unknown_update_kind
from bridge.runtime.acp.normalize import (
    SESSION_STATE_KINDS,
    elicitation_content,
    elicitation_question,
    is_qwen_question,
    permission_event,
    qwen_answer_response,
    qwen_question,
    turn_event,
    update_kind,
)
from bridge.runtime.acp.process import AgentProcess, SpawnError, spawn_agent
from bridge.runtime.events import (
    PromptSent,
    RuntimeExited,
    RuntimeFailed,
    StopReason,
    TurnEnded,
    TurnEvent,
)
from bridge.runtime.port import EventSink, RuntimeUnavailable, SessionHandle
from bridge.runtime.sandbox import SandboxPolicy

if TYPE_CHECKING:
    from bridge.config import Settings

logger = logging.getLogger(__name__)

CLIENT_NAME = "feishu-presence-bridge"


class SessionLost(RuntimeUnavailable):
    """The session is unknown here, or its agent restarted without being able to reload it."""


class _StartFailed(Exception):
    """The process ran but did not complete `initialize`; worth a retry."""


@dataclass
class SessionInfo:
    """Session state the agent reports outside turns (kept, never emitted as turn events)."""

    available_commands: tuple[str, ...] = ()
    mode_id: str | None = None
    title: str | None = None
    idle_updates: int = 0  # updates that arrived while no turn ran (incl. load replay)


@dataclass
class _Turn:
    session_id: str
    sink: EventSink
    done: bool = False
    cancel_requested: bool = False

    def emit(self, event: TurnEvent) -> None:
        if self.done:
            return
        try:
            self.sink(event)
        except Exception:
            logger.exception("turn event sink failed (session %s)", self.session_id)

    def finish(self, event: TurnEvent) -> None:
        """Emit the terminal event; the first one wins, later ones are dropped."""
        if not self.done:
            self.emit(event)
            self.done = True


@dataclass
class _Pending:
    request_id: str
    session_id: str
    kind: Literal["permission", "elicitation", "qwen"]
    future: asyncio.Future[Any]
    option_ids: frozenset[str] = frozenset()
    submit_option_id: str | None = None
    decline_option_id: str | None = None
    types: Mapping[str, str] = field(default_factory=dict)

    def resolve(self, response: Any) -> None:
        if not self.future.done():
            self.future.set_result(response)

    def cancel(self) -> None:
        if self.kind == "elicitation":
            self.resolve(CancelElicitationResponse(action="cancel"))
        else:
            self.resolve(_cancelled())


@dataclass
class _Session:
    session_id: str
    conversation_key: str
    slot: int
    process: AgentProcess
    turn: _Turn | None = None
    info: SessionInfo = field(default_factory=SessionInfo)
    reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _Slot:
    index: int
    process: AgentProcess | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _cancelled() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def _selected(option_id: str) -> RequestPermissionResponse:
    return RequestPermissionResponse(
        outcome=AllowedOutcome(outcome="selected", option_id=option_id)
    )


# Environment variables an agent process never sees: the Feishu app secret, the operator
# token, and every other setting of the bridge (a future secret among them).
SCRUBBED_PREFIXES = ("FEISHU_", "BRIDGE_")


def _describe_error(exc: RequestError) -> str:
    # The JSON-RPC code and its short message only: `data.details` may quote the prompt or
    # the agent's output, and this reason ends up in the turn's trace for operators.
    message = (str(exc) or "agent error")[:80]
    return f"agent error {exc.code}: {message}"


class AcpRuntime:
    """Drives ACP agent subprocesses; see the module docstring for the policies."""

    def __init__(
        self,
        argv: Sequence[str],
        workdir: Path,
        *,
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
    ) -> None:
        if not argv:
            raise ValueError("argv must name a program")
        if max_agents < 1:
            raise ValueError("max_agents must be at least 1")
        self._argv = list(argv)
        self._workdir = Path(workdir).resolve()
        self._elicitation = elicitation
        # The agent needs its own credentials (API keys) from the environment: inherit it,
        # but never the bridge's own Feishu secrets.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED_PREFIXES)}
        self._env = {**inherited, **(env or {})}
        self._sessions_per_agent = sessions_per_agent
        self._restart_attempts = max(1, restart_attempts)
        self._restart_wait = restart_wait or wait_exponential(multiplier=0.5, max=10)
        self._start_timeout = start_timeout
        self._shutdown_timeout = shutdown_timeout
        self._stderr_lines = stderr_lines
        self._sandbox = sandbox
        self._slots = [_Slot(i) for i in range(max_agents)]
        self._sessions: dict[str, _Session] = {}
        self._by_conversation: dict[str, str] = {}
        self._pending: dict[str, _Pending] = {}
        self._generations = itertools.count(1)
        self._closing = False
        self.unknown_updates = 0

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> AcpRuntime:
        options: dict[str, Any] = {
            "max_agents": settings.bridge_max_agents,
            "sessions_per_agent": settings.bridge_sessions_per_agent or None,
            "elicitation": settings.bridge_elicitation,
            "sandbox": SandboxPolicy.from_settings(settings),
        }
        options.update(overrides)
        return cls(settings.agent_argv, settings.bridge_workdir, **options)

    # --- the AgentRuntime port ----------------------------------------------------------------

    async def start(self) -> None:
        """Start the first agent process now, so a broken command is reported at startup."""
        await self._live_process(self._slots[0])

    async def open_session(
        self, conversation_key: str, *, resume_session_id: str | None = None
    ) -> SessionHandle:
        if resume_session_id:
            handle = await self._resume(conversation_key, resume_session_id)
            if handle is not None:
                return handle
        slot = self._choose_slot(replacing=self._by_conversation.get(conversation_key))
        process = await self._live_process(slot)
        try:
            session_id = await process.new_session(str(self._workdir))
        except RequestError as exc:
            raise RuntimeUnavailable(
                f"the agent refused session/new: {_describe_error(exc)}"
            ) from exc
        except ConnectionError as exc:
            raise RuntimeUnavailable("the agent exited while opening a session") from exc
        self._bind(conversation_key, _Session(session_id, conversation_key, slot.index, process))
        logger.info("opened session %s on agent[%d]", session_id, slot.index)
        return SessionHandle(session_id=session_id, loaded=False)

    async def prompt(self, session_id: str, text: str, sink: EventSink) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionLost(f"unknown session {session_id}; open a session first")
        if session.turn is not None:
            raise RuntimeError(f"a turn is already running on session {session_id}")
        process = await self._ensure_bound(session)
        turn = _Turn(session_id, sink)
        session.turn = turn
        turn.emit(PromptSent(session_id))
        try:
            await self._run_turn(process, turn, text)
        finally:
            if session.turn is turn:
                session.turn = None
            self._cancel_pending(session_id)

    async def cancel(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        turn = session.turn if session else None
        if session is None or turn is None or turn.done:
            return
        turn.cancel_requested = True
        self._cancel_pending(session_id)
        if session.process.alive:
            with contextlib.suppress(ConnectionError):
                await session.process.cancel(session_id)

    async def answer_permission(self, request_id: str, option_id: str | None) -> None:
        pending = self._pending.get(request_id)
        if pending is None:
            logger.info("answer for request %s ignored: it is no longer pending", request_id)
            return
        if pending.kind == "elicitation":
            raise ValueError(f"request {request_id} is a question; use answer_question")
        if option_id is None:
            pending.resolve(_cancelled())
        elif option_id in pending.option_ids:
            pending.resolve(_selected(option_id))
        else:
            raise ValueError(f"option {option_id!r} was not offered for request {request_id}")

    async def answer_question(self, request_id: str, answers: Mapping[str, str] | None) -> None:
        pending = self._pending.get(request_id)
        if pending is None:
            logger.info("answer for question %s ignored: it is no longer pending", request_id)
            return
        if pending.kind == "permission":
            raise ValueError(f"request {request_id} is a permission; use answer_permission")
        if pending.kind == "elicitation":
            if answers is None:
                pending.resolve(DeclineElicitationResponse(action="decline"))
            else:
                content = elicitation_content(answers, pending.types)
                pending.resolve(AcceptElicitationResponse(action="accept", content=content))
            return
        # qwen: the answers ride next to the submit option; "no answer" is its Cancel option.
        if answers is not None and pending.submit_option_id:
            pending.resolve(qwen_answer_response(pending.submit_option_id, answers))
        elif pending.decline_option_id:
            pending.resolve(_selected(pending.decline_option_id))
        else:
            pending.resolve(_cancelled())

    async def close(self) -> None:
        self._closing = True
        for session in self._sessions.values():
            if session.turn is not None:
                session.turn.finish(RuntimeExited(session.session_id, restarting=False))
        for pending in list(self._pending.values()):
            pending.cancel()
        for slot in self._slots:
            if slot.process is not None:
                await slot.process.shutdown(self._shutdown_timeout)

    # --- diagnostics --------------------------------------------------------------------------

    def session_info(self, session_id: str) -> SessionInfo | None:
        session = self._sessions.get(session_id)
        return session.info if session else None

    def pending_request_ids(self) -> list[str]:
        return list(self._pending)

    def running_processes(self) -> list[AgentProcess]:
        return [s.process for s in self._slots if s.process is not None and s.process.alive]

    def snapshot(self) -> dict[str, Any]:
        """Operator view: processes and their sessions. Never the stderr tail: an agent may
        echo the prompt there (it is in the DEBUG log only)."""
        return {
            "command": Path(self._argv[0]).name,
            "unknown_updates": self.unknown_updates,
            "pending_requests": len(self._pending),
            "agents": [
                {
                    "slot": slot.index,
                    "pid": slot.process.pid if slot.process else None,
                    "alive": bool(slot.process and slot.process.alive),
                    "returncode": slot.process.returncode if slot.process else None,
                    "sessions": self._load(slot),
                    "running_turns": sum(
                        1 for s in self._sessions.values() if s.slot == slot.index and s.turn
                    ),
                }
                for slot in self._slots
            ],
        }

    # --- processes ----------------------------------------------------------------------------

    def _load(self, slot: _Slot, replacing: str | None = None) -> int:
        """Sessions a slot serves; the one a conversation is about to replace does not count."""
        return sum(
            1
            for s in self._sessions.values()
            if s.slot == slot.index and (s.session_id != replacing or s.turn is not None)
        )

    def _choose_slot(self, replacing: str | None = None) -> _Slot:
        cap = self._sessions_per_agent
        open_slots = [s for s in self._slots if cap is None or self._load(s, replacing) < cap]
        if not open_slots:
            raise RuntimeUnavailable(
                f"all {len(self._slots)} agent processes already serve {cap} sessions each",
                limit_reached=True,
            )
        for slot in open_slots:
            if slot.process is not None and slot.process.alive and not self._load(slot, replacing):
                return slot
        for slot in open_slots:
            if slot.process is None:
                return slot
        return min(
            open_slots,
            key=lambda s: (self._load(s, replacing), not (s.process and s.process.alive)),
        )

    async def _live_process(self, slot: _Slot) -> AgentProcess:
        async with slot.lock:
            if slot.process is not None and slot.process.alive:
                return slot.process
            if self._closing:
                raise RuntimeUnavailable("the agent runtime is shut down")
            slot.process = await self._start_with_retry(slot.index)
            return slot.process

    async def _start_with_retry(self, index: int) -> AgentProcess:
        program = Path(self._argv[0]).name
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self._restart_attempts),
                wait=self._restart_wait,
                retry=retry_if_exception_type(_StartFailed),
                reraise=True,
            ):
                with attempt:
                    return await self._start_once(index)
        except SpawnError as exc:
            raise RuntimeUnavailable(f"cannot run the agent command `{program}`: {exc}") from exc
        except _StartFailed as exc:
            raise RuntimeUnavailable(
                f"the agent `{program}` did not start after {self._restart_attempts} "
                f"attempts: {exc}"
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises

    async def _start_once(self, index: int) -> AgentProcess:
        generation = next(self._generations)
        process = await spawn_agent(
            self._argv,
            slot=index,
            generation=generation,
            cwd=self._workdir,
            env=self._env,
            handler=build_handler(BridgeClient(self, generation)),
            observer=self._observe,
            on_exit=self._on_process_exit,
            stderr_lines=self._stderr_lines,
            sandbox=self._sandbox,
        )
        try:
            await asyncio.wait_for(
                process.initialize(
                    self._capabilities(), Implementation(name=CLIENT_NAME, version="0.1.0")
                ),
                self._start_timeout,
            )
        except (ConnectionError, RequestError, ValidationError, TimeoutError) as exc:
            await process.shutdown(self._shutdown_timeout)
            reason = self._start_failure(process, exc)
            logger.warning(
                "agent[%d] failed to start: %s; last stderr lines: %s",
                index,
                reason,
                process.stderr.tail(5),
            )
            raise _StartFailed(reason) from exc
        process.ready = True
        info = process.agent_info
        logger.info(
            "agent[%d] ready: %s, loadSession=%s",
            index,
            f"{info.name} {info.version}" if info else "unnamed agent",
            process.can_load,
        )
        return process

    def _start_failure(self, process: AgentProcess, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"no answer to initialize within {self._start_timeout:g}s"
        if isinstance(exc, RequestError):
            return f"initialize failed: {_describe_error(exc)}"
        if isinstance(exc, ValidationError):
            return "initialize answer is not valid ACP"
        return f"it exited during initialize (code {process.returncode})"

    def _capabilities(self) -> ClientCapabilities:
        return ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
            terminal=False,
            elicitation=(
                ElicitationCapabilities(form=ElicitationFormCapabilities())
                if self._elicitation
                else None
            ),
        )

    def _on_process_exit(self, process: AgentProcess) -> None:
        code = process.returncode
        turns = [
            s.turn
            for s in self._sessions.values()
            if s.process is process and s.turn is not None and not s.turn.done
        ]
        if not process.ready:
            logger.debug("agent[%d] pid %d exited during start", process.slot, process.pid)
        elif not self._closing:
            logger.warning(
                "agent[%d] pid %d exited with code %s; %d running turn(s) ended",
                process.slot,
                process.pid,
                code,
                len(turns),
            )
        for turn in turns:
            turn.finish(self._exited(process, turn.session_id))
        # Its pending requests are over for us; no answer can reach a dead process, so the
        # handler tasks are cancelled rather than made to write to a closed pipe.
        for pending in list(self._pending.values()):
            session = self._sessions.get(pending.session_id)
            if session is not None and session.process is process:
                pending.future.cancel()
        task = asyncio.get_running_loop().create_task(self._close_connection(process))
        process.tasks.add(task)
        task.add_done_callback(process.tasks.discard)

    @staticmethod
    async def _close_connection(process: AgentProcess) -> None:
        """Stop the SDK's tasks (receive loop, request handlers) of a dead connection."""
        with contextlib.suppress(Exception):
            await process.conn.close()

    def _exited(self, process: AgentProcess, session_id: str) -> RuntimeExited:
        code = process.returncode
        return RuntimeExited(
            session_id,
            returncode=code if code is None or code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            restarting=not self._closing,
            extra={"slot": str(process.slot), "pid": str(process.pid)},
        )

    # --- sessions -----------------------------------------------------------------------------

    def _bind(self, conversation_key: str, session: _Session) -> None:
        previous = self._by_conversation.get(conversation_key)
        if previous and previous != session.session_id:
            old = self._sessions.get(previous)
            if old is not None and old.turn is None:
                self._sessions.pop(previous, None)
                old.process.sessions.discard(previous)
        self._by_conversation[conversation_key] = session.session_id
        self._sessions[session.session_id] = session
        session.process.sessions.add(session.session_id)

    async def _resume(self, conversation_key: str, session_id: str) -> SessionHandle | None:
        known = self._sessions.get(session_id)
        if known is not None:
            try:
                await self._ensure_bound(known)
            except SessionLost as exc:
                logger.info("session %s not resumed (%s); opening a new one", session_id, exc)
                self._sessions.pop(session_id, None)
                return None
            self._bind(conversation_key, known)
            return SessionHandle(session_id=session_id, loaded=True)
        # Unknown here (e.g. the bridge restarted): ask an agent that can load sessions.
        slot = self._choose_slot(replacing=self._by_conversation.get(conversation_key))
        process = await self._live_process(slot)
        if not process.can_load:
            return None
        try:
            await process.load_session(str(self._workdir), session_id)
        except (RequestError, ConnectionError) as exc:
            logger.info("agent could not load session %s (%s)", session_id, type(exc).__name__)
            return None
        self._bind(conversation_key, _Session(session_id, conversation_key, slot.index, process))
        logger.info("loaded session %s on agent[%d]", session_id, slot.index)
        return SessionHandle(session_id=session_id, loaded=True)

    async def _ensure_bound(self, session: _Session) -> AgentProcess:
        """The live process serving this session, restarting and reloading as needed."""
        if session.process.alive:
            return session.process
        process = await self._live_process(self._slots[session.slot])
        async with session.reload_lock:
            if session.process is process:
                return process
            if not process.can_load:
                raise SessionLost(
                    f"the agent restarted and cannot reload session {session.session_id}"
                )
            try:
                await process.load_session(str(self._workdir), session.session_id)
            except RequestError as exc:
                reason = _describe_error(exc)
                raise SessionLost(f"the agent could not reload the session: {reason}") from exc
            except ConnectionError as exc:
                raise RuntimeUnavailable("the agent exited while reloading a session") from exc
            session.process = process
            process.sessions.add(session.session_id)
            logger.info("reloaded session %s on agent[%d]", session.session_id, process.slot)
            return process

    # --- turns --------------------------------------------------------------------------------

    async def _run_turn(self, process: AgentProcess, turn: _Turn, text: str) -> None:
        request = asyncio.ensure_future(process.prompt(turn.session_id, text))
        try:
            watched: list[asyncio.Future[Any]] = [request, process.exited]
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            request.cancel()
            raise
        if not request.done():
            # The process died first; the exit callback already ended the turn.
            request.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await request
            turn.finish(self._exited(process, turn.session_id))
            return
        try:
            response = request.result()
        except RequestError as exc:
            if turn.cancel_requested:
                turn.finish(TurnEnded(turn.session_id, StopReason.CANCELLED))
            else:
                turn.finish(RuntimeFailed(turn.session_id, reason=_describe_error(exc)))
        except ConnectionError:
            # stdout closed: the exit code follows shortly (or we kill a lingering process).
            await process.wait_exit(self._shutdown_timeout)
            turn.finish(self._exited(process, turn.session_id))
        except ValidationError:
            turn.finish(RuntimeFailed(turn.session_id, reason="invalid session/prompt answer"))
        else:
            turn.finish(TurnEnded(turn.session_id, StopReason(response.stop_reason)))

    def _cancel_pending(self, session_id: str) -> None:
        for pending in list(self._pending.values()):
            if pending.session_id == session_id:
                pending.cancel()

    def _turn_for(self, generation: int, session_id: str) -> tuple[_Session | None, _Turn | None]:
        session = self._sessions.get(session_id)
        if session is None or session.process.generation != generation:
            return None, None
        turn = session.turn
        return session, (turn if turn is not None and not turn.done else None)

    # --- ClientHost: callbacks from BridgeClient ------------------------------------------

    def on_update(self, generation: int, session_id: str, update: Any) -> None:
        session, turn = self._turn_for(generation, session_id)
        if session is None:
            return  # a stale process, a replay during load, or an unknown session
        if update_kind(update) in SESSION_STATE_KINDS:
            self._absorb(session.info, update)
            return
        if turn is None:
            session.info.idle_updates += 1
            return
        event = turn_event(session_id, update)
        if event is not None:
            turn.emit(event)

    @staticmethod
    def _absorb(info: SessionInfo, update: Any) -> None:
        if isinstance(update, AvailableCommandsUpdate):
            info.available_commands = tuple(c.name for c in update.available_commands)
        elif isinstance(update, CurrentModeUpdate):
            info.mode_id = update.current_mode_id
        elif isinstance(update, SessionInfoUpdate) and update.title is not None:
            info.title = update.title

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
            return _cancelled()
        request_id = uuid.uuid4().hex[:12]
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if is_qwen_question(tool_call, meta):
            question = qwen_question(session_id, request_id, tool_call, options, meta)
            pending = _Pending(
                request_id,
                session_id,
                "qwen",
                future,
                option_ids=frozenset(o.option_id for o in options),
                submit_option_id=question.submit_option_id,
                decline_option_id=question.decline_option_id,
            )
            event: TurnEvent = question.event
        else:
            pending = _Pending(
                request_id,
                session_id,
                "permission",
                future,
                option_ids=frozenset(o.option_id for o in options),
            )
            event = permission_event(session_id, request_id, tool_call, options)
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
        request_id = uuid.uuid4().hex[:12]
        question = elicitation_question(mode.session_id, request_id, message, mode.requested_schema)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending = _Pending(request_id, mode.session_id, "elicitation", future, types=question.types)
        return await self._wait_answer(turn, pending, question.event)

    async def _wait_answer(self, turn: _Turn, pending: _Pending, event: TurnEvent) -> Any:
        self._pending[pending.request_id] = pending
        turn.emit(event)  # before the await: keeps its place among the turn's updates
        try:
            return await pending.future
        finally:
            self._pending.pop(pending.request_id, None)

    def _observe(self, event: StreamEvent) -> None:
        """Raw tap on every JSON-RPC message: the only place unknown update kinds show up."""
        if event.direction is not StreamDirection.INCOMING:
            return
        kind = unknown_update_kind(event.message)
        if kind is not None:
            self.unknown_updates += 1
            logger.warning("agent sent an unknown session update kind %r; dropped", kind[:64])
