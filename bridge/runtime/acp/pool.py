"""The agent process pool: up to `max_agents` processes ("slots"), each serving many
sessions; starting, restarting and stopping them.

Placement: a new session goes to a running process that serves no session yet, else to a
slot never started (a new process), else to the least-loaded slot. A session still being
opened counts in its slot's load (`Sessions`), so opens at the same moment spread. With
`sessions_per_agent` set, a slot serving that many is full; when every slot is full,
`choose` raises `RuntimeUnavailable(limit_reached=True)` at once — never a wait.

Start: a process that cannot be executed (missing program, bad workdir) fails at once; one
that exits or errors during `initialize` is retried with tenacity (`restart_attempts`,
`restart_wait` — tests inject `wait_none()`). Either way the caller gets
`RuntimeUnavailable` saying why; nothing looks "running" meanwhile. A dead process is
restarted lazily, by the next caller that needs its slot.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from acp.connection import MethodHandler
from acp.exceptions import RequestError
from acp.schema import ClientCapabilities, Implementation
from pydantic import ValidationError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_base

from bridge.clock import Clock
from bridge.runtime.acp.process import (
    AgentProcess,
    SpawnError,
    StartProcess,
    spawn_agent,
    start_subprocess,
)
from bridge.runtime.acp.transport import DEFAULT_WINDOW_SECONDS, MAX_LINE_BYTES
from bridge.runtime.events import RuntimeExited
from bridge.runtime.port import RuntimeUnavailable
from bridge.runtime.sandbox import SandboxPolicy

logger = logging.getLogger(__name__)

CLIENT_NAME = "feishu-presence-bridge"


class _StartFailed(Exception):
    """The process ran but did not complete `initialize`; worth a retry."""


def describe_error(exc: RequestError) -> str:
    # The JSON-RPC code and its short message only: `data.details` may quote the prompt or
    # the agent's output, and this reason ends up in the turn's trace for operators.
    message = (str(exc) or "agent error")[:80]
    return f"agent error {exc.code}: {message}"


@dataclass
class Slot:
    index: int
    process: AgentProcess | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    starts: int = 0  # processes started in this slot (the first, then restarts)
    started_at: float | None = None  # when its current process became ready (wall clock)
    starting: bool = False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.alive

    @property
    def state(self) -> str:
        """For operators: alive, starting, restarting, exited (restarts on demand), or
        not_started."""
        if self.alive:
            return "alive"
        if self.starting:
            return "restarting" if self.starts else "starting"
        return "exited" if self.process is not None else "not_started"


@dataclass(frozen=True)
class PoolLimits:
    max_agents: int = 2
    sessions_per_agent: int | None = None
    restart_attempts: int = 3
    start_timeout: float = 60.0
    shutdown_timeout: float = 2.0
    stderr_lines: int = 200
    sandbox: SandboxPolicy | None = None  # bubblewrap around every agent process
    max_line_bytes: int = MAX_LINE_BYTES  # one stdout line over this is dropped, not held
    batch_window: float = DEFAULT_WINDOW_SECONDS  # streaming updates held this long to merge


# Sessions a slot serves (by slot index), not counting the one a conversation replaces.
LoadOf = Callable[[int, str | None], int]


class AgentPool:
    def __init__(
        self,
        argv: Sequence[str],
        workdir: Path,
        env: Mapping[str, str],
        limits: PoolLimits,
        restart_wait: wait_base,
        *,
        capabilities: ClientCapabilities,
        handler_for: Callable[[int], MethodHandler],
        on_exit: Callable[[AgentProcess], None],
        clock: Clock,
        on_change: Callable[[], None] | None = None,
        start: StartProcess = start_subprocess,
    ) -> None:
        """`start`: how an agent process is started (the spawn port; a real subprocess by
        default, an in-memory agent in the simulator)."""
        self._start = start
        self._on_change = on_change or (lambda: None)
        self._clock = clock
        self.argv = list(argv)
        self._program = Path(self.argv[0]).name
        self.workdir = workdir
        self._env = env
        self._limits = limits
        self._restart_wait = restart_wait
        self._capabilities = capabilities
        self._handler_for = handler_for
        self._on_exit = on_exit
        self.slots = [Slot(i) for i in range(limits.max_agents)]
        self._generations = itertools.count(1)
        self.closing = False
        self.oversize_lines = 0  # agent stdout lines dropped for their size

    def _count_oversize(self, size: int) -> None:
        self.oversize_lines += 1

    @property
    def shutdown_timeout(self) -> float:
        return self._limits.shutdown_timeout

    @property
    def program(self) -> str:
        return self._program

    def choose(self, load: LoadOf, replacing: str | None = None) -> Slot:
        cap = self._limits.sessions_per_agent
        open_slots = [s for s in self.slots if cap is None or load(s.index, replacing) < cap]
        if not open_slots:
            raise RuntimeUnavailable(
                f"all {len(self.slots)} agent processes already serve {cap} sessions each",
                limit_reached=True,
            )
        for slot in open_slots:
            if slot.alive and not load(slot.index, replacing):
                return slot
        for slot in open_slots:
            if slot.process is None and not load(slot.index, replacing):  # none on its way
                return slot
        return min(open_slots, key=lambda s: (load(s.index, replacing), not s.alive))

    async def live(self, slot: Slot) -> AgentProcess:
        """The slot's running process, started (with retries) when it has none."""
        async with slot.lock:
            if slot.process is not None and slot.process.alive:
                return slot.process
            if self.closing:
                raise RuntimeUnavailable("the agent runtime is shut down")
            slot.starting = True
            self._on_change()
            try:
                slot.process = await self._start_with_retry(slot.index)
                slot.starts += 1
                slot.started_at = self._clock.wall()
            finally:
                slot.starting = False
                self._on_change()
            return slot.process

    def exited(self, process: AgentProcess, session_id: str) -> RuntimeExited:
        """The event that ends a turn whose process died (restarting unless shutting down)."""
        code = process.returncode
        return RuntimeExited(
            session_id,
            returncode=code if code is None or code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            restarting=not self.closing,
            extra={"slot": str(process.slot), "pid": str(process.pid)},
        )

    def running(self) -> list[AgentProcess]:
        return [s.process for s in self.slots if s.process is not None and s.process.alive]

    async def close(self) -> None:
        self.closing = True
        for slot in self.slots:
            if slot.process is not None:
                await slot.process.shutdown(self._limits.shutdown_timeout)

    async def _start_with_retry(self, index: int) -> AgentProcess:
        attempts = max(1, self._limits.restart_attempts)
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(attempts),
                wait=self._restart_wait,
                retry=retry_if_exception_type(_StartFailed),
                reraise=True,
            ):
                with attempt:
                    return await self._start_once(index)
        except SpawnError as exc:
            raise RuntimeUnavailable(
                f"cannot run the agent command `{self.program}`: {exc}"
            ) from exc
        except _StartFailed as exc:
            raise RuntimeUnavailable(
                f"the agent `{self.program}` did not start after {attempts} attempts: {exc}"
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises

    async def _start_once(self, index: int) -> AgentProcess:
        generation = next(self._generations)
        process = await spawn_agent(
            self.argv,
            slot=index,
            generation=generation,
            cwd=self.workdir,
            env=self._env,
            handler=self._handler_for(generation),
            on_exit=self._on_exit,
            now=self._clock.now,
            stderr_lines=self._limits.stderr_lines,
            sandbox=self._limits.sandbox,
            max_line_bytes=self._limits.max_line_bytes,
            on_oversize=self._count_oversize,
            batch_window=self._limits.batch_window,
            start=self._start,
        )
        try:
            await asyncio.wait_for(
                process.initialize(
                    self._capabilities, Implementation(name=CLIENT_NAME, version="0.1.0")
                ),
                self._limits.start_timeout,
            )
        except (ConnectionError, RequestError, ValidationError, TimeoutError) as exc:
            await process.shutdown(self._limits.shutdown_timeout)
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
            return f"no answer to initialize within {self._limits.start_timeout:g}s"
        if isinstance(exc, RequestError):
            return f"initialize failed: {describe_error(exc)}"
        if isinstance(exc, ValidationError):
            return "initialize answer is not valid ACP"
        return f"it exited during initialize (code {process.returncode})"
