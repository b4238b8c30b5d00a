"""One ACP agent process: spawn, stdio JSON-RPC connection, stderr drain, exit watch.

Built on the SDK's low-level `acp.connection.Connection` rather than `spawn_agent_process`
because we need three things that helper hides: our own stderr pipe reader (an unread pipe
blocks an agent that writes more than 64 KB to it), the exit code as soon as the process
ends (a dying agent only surfaces as `ConnectionError` otherwise), and a message handler we
wrap to drop unknown update kinds quietly.

**The spawn port.** What starts the process is injected (`StartProcess`): by default
`start_subprocess`, a real subprocess in its own process group (`Subprocess`). Everything
above it (the batched stdout reader, the transport, the connection, the exit watch) uses
only `ChildProcess`: its three pipes, its pid and exit code, and signals to it and its
group; the simulator starts an in-memory agent behind the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from acp.connection import Connection, MethodHandler
from acp.meta import AGENT_METHODS, PROTOCOL_VERSION
from acp.schema import (
    AgentCapabilities,
    CancelNotification,
    ClientCapabilities,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    LoadSessionRequest,
    NewSessionRequest,
    NewSessionResponse,
    PromptRequest,
    PromptResponse,
    SessionModeState,
    SetSessionModeRequest,
)
from acp.utils import notify_model, request_model, serialize_params

from bridge.runtime.acp.transport import (
    DEFAULT_WINDOW_SECONDS,
    MAX_LINE_BYTES,
    READ_BYTES,
    BatchedTransport,
    CappedLines,
    StdinWriter,
)
from bridge.runtime.sandbox import SandboxPolicy

logger = logging.getLogger(__name__)
stderr_logger = logging.getLogger("bridge.runtime.agent_stderr")


class SpawnError(Exception):
    """The command could not be executed at all (missing program, bad workdir, no permission)."""


class ChildProcess(Protocol):
    """What the adapter needs of a started agent process."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def stdin(self) -> StdinWriter: ...

    @property
    def stdout(self) -> asyncio.StreamReader: ...

    @property
    def stderr(self) -> asyncio.StreamReader: ...

    async def ended(self) -> int:
        """The exit code, as soon as the process itself has exited."""
        ...

    async def wait(self) -> int:
        """The exit code, once the process has exited and its pipes are released."""
        ...

    def kill(self) -> None:
        """SIGKILL to the process alone."""
        ...

    def signal_group(self, sig: signal.Signals) -> None:
        """A signal to the process and everything it started (its process group)."""
        ...


# How a process is started: argv (sandbox already applied), working folder, environment
# (None: the bridge's). Raises SpawnError when the command cannot run at all.
StartProcess = Callable[[Sequence[str], Path, Mapping[str, str] | None], Awaitable[ChildProcess]]

EXIT_POLL_SECONDS = 0.25
# After an agent's exit, how long its last output may take to be read and handed on before
# its turns end (its stderr's tail, its stdout's last updates).
EXIT_READ_SECONDS = 0.5


class Subprocess:
    """`ChildProcess` over a real `asyncio.subprocess.Process` in its own process group."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        self.process = process
        self.stdin: asyncio.StreamWriter = process.stdin
        self.stdout: asyncio.StreamReader = process.stdout
        self.stderr: asyncio.StreamReader = process.stderr

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def ended(self) -> int:
        # `Process.wait()` resolves only once every pipe is closed (a child the agent
        # started may still hold them): the return code is polled instead.
        waiter = asyncio.ensure_future(self.process.wait())
        try:
            while self.process.returncode is None:
                await asyncio.wait({waiter}, timeout=EXIT_POLL_SECONDS)
            return self.process.returncode
        finally:
            waiter.cancel()

    async def wait(self) -> int:
        return await self.process.wait()

    def kill(self) -> None:
        self.process.kill()

    def signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)


# How long an agent's stdout pipe rests after a small read. A streaming agent writes a few
# lines at a time, hundreds of times a second; each read wakes the loop, the reader and the
# transport for a handful of lines. Left in the pipe this long, they arrive as one read:
# with 200 turns streaming through two agents, the bridge's CPU per agent update fell by
# about a third (bench/stream_bench.py). A line waits at most this long, and only behind
# a read this recent: after a quiet spell the pipe is being read, and a line goes at once.
STDOUT_PACE_SECONDS = 0.01
# A read at least this big is worth its wake-up, and more may be waiting (a long line, a
# burst): the pipe goes on being read at once.
STDOUT_BULK_BYTES = 64 * 1024


class _PacedStdout(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's subprocess protocol, whose stdout pipe rests `pace` seconds after each
    small read (the pipe itself holds what the agent writes meanwhile; a full pipe blocks
    the agent, as when the bridge is slow to read)."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop, pace: float) -> None:
        super().__init__(limit=limit, loop=loop)
        self._loop = loop
        self._pace = pace
        self._stdout: asyncio.ReadTransport | None = None
        self._resting = False  # paused here (not by the reader's own flow control)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # (uvloop's process transport is a SubprocessTransport in all but its bases)
        pipe = cast(asyncio.SubprocessTransport, transport).get_pipe_transport(1)
        self._stdout = cast(asyncio.ReadTransport, pipe)

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        super().pipe_data_received(fd, data)
        pipe = self._stdout
        # Not reading: the reader paused the pipe itself (its buffer is full, to be
        # resumed as it is read), and that pause is the reader's to end.
        if (
            fd == 1
            and self._pace > 0
            and len(data) < STDOUT_BULK_BYTES
            and pipe is not None
            and pipe.is_reading()
        ):
            pipe.pause_reading()
            self._resting = True
            self._loop.call_later(self._pace, self._rest_over)

    def process_exited(self) -> None:
        # What the agent wrote just before it ended is read at once, unrested: its exit
        # ends its turns right after, and a line still in the pipe would be lost with them.
        self._pace = 0.0
        self._rest_over()
        super().process_exited()

    def _rest_over(self) -> None:
        pipe = self._stdout
        if not self._resting or pipe is None:
            return
        self._resting = False
        if not pipe.is_closing() and not pipe.is_reading():
            pipe.resume_reading()


async def start_subprocess(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None
) -> ChildProcess:
    """The default `StartProcess`: the command as a subprocess, in a process group of its
    own (killed as a whole), its three pipes connected, its stdout resting STDOUT_PACE_SECONDS
    after each small read (asyncio's `create_subprocess_exec`, with that protocol)."""
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.subprocess_exec(
            # How much stdout is buffered before the pipe is paused (CappedLines reads it
            # in bulk, and caps a line itself).
            lambda: _PacedStdout(READ_BYTES, loop, STDOUT_PACE_SECONDS),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(cwd),
            env=dict(env) if env is not None else None,
            start_new_session=True,  # its own process group, killed as a whole
        )
    except OSError as exc:
        raise SpawnError(exc.strerror or str(exc)) from exc
    except ValueError as exc:
        raise SpawnError(str(exc)) from exc
    return Subprocess(asyncio.subprocess.Process(transport, protocol, loop))


@dataclass
class StderrTail:
    """Keeps the last lines an agent wrote to stderr and logs them, rate-limited, at DEBUG.

    Only DEBUG, because an agent may echo what it was asked; the tail stays in memory for the
    operator's diagnostics and for the start-failure warning (no prompt has been sent then).
    """

    label: str
    clock: Callable[[], float]  # the log's rate limit is timed on it (the bridge's Clock.now)
    max_lines: int = 200
    max_line_chars: int = 500
    log_lines_per_second: int = 20
    lines: deque[str] = field(init=False)
    total_bytes: int = 0
    total_lines: int = 0
    suppressed: int = 0
    _partial: bytes = b""
    _window_start: float = 0.0
    _window_count: int = 0

    def __post_init__(self) -> None:
        self.lines = deque(maxlen=self.max_lines)

    def feed(self, data: bytes) -> None:
        self.total_bytes += len(data)
        buffer = self._partial + data
        *complete, self._partial = buffer.split(b"\n")
        # A line without a newline must not grow without bound either.
        if len(self._partial) > self.max_line_chars * 4:
            complete.append(self._partial)
            self._partial = b""
        for raw in complete:
            self._line(raw)

    def flush(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = b""

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")[: self.max_line_chars]
        self.total_lines += 1
        self.lines.append(text)
        now = self.clock()
        if now - self._window_start >= 1.0:
            if self.suppressed:
                stderr_logger.debug("%s: %d stderr lines not logged", self.label, self.suppressed)
                self.suppressed = 0
            self._window_start, self._window_count = now, 0
        if self._window_count < self.log_lines_per_second:
            self._window_count += 1
            stderr_logger.debug("%s: %s", self.label, text)
        else:
            self.suppressed += 1

    def tail(self, count: int = 20) -> list[str]:
        return list(self.lines)[-count:]


async def _drain(stream: asyncio.StreamReader, tail: StderrTail) -> None:
    while chunk := await stream.read(64 * 1024):
        tail.feed(chunk)
    tail.flush()


@dataclass(eq=False)
class AgentProcess:
    """A running agent: its connection, its capabilities and the sessions it serves."""

    slot: int
    generation: int
    process: ChildProcess
    conn: Connection
    stderr: StderrTail
    exited: asyncio.Future[int]
    capabilities: AgentCapabilities | None = None
    agent_info: Implementation | None = None
    sessions: set[str] = field(default_factory=set)
    ready: bool = False  # initialize completed
    retiring: bool = False  # stopped on purpose (a restart after a cancel), not a crash
    # A restart waiting for the other turns on it to end: new prompts wait for it too, so
    # they cannot keep it busy for ever (`Sessions.until_free`).
    hold: asyncio.Future[None] | None = None
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return not self.exited.done()

    @property
    def returncode(self) -> int | None:
        return self.exited.result() if self.exited.done() else None

    @property
    def can_load(self) -> bool:
        return bool(self.capabilities and self.capabilities.load_session)

    @property
    def accepts_images(self) -> bool:
        """`promptCapabilities.image`: images may go as prompt content."""
        prompt = self.capabilities.prompt_capabilities if self.capabilities else None
        return bool(prompt and prompt.image)

    @property
    def accepts_audio(self) -> bool:
        """`promptCapabilities.audio`: a voice message's audio may go beside its words."""
        prompt = self.capabilities.prompt_capabilities if self.capabilities else None
        return bool(prompt and prompt.audio)

    @property
    def can_resume(self) -> bool:
        """`session/resume` (unstable): an earlier session back without its replay."""
        return self._offers("resume")

    @property
    def can_reopen(self) -> bool:
        """An earlier session can be taken back here (`reopen`: loaded or resumed)."""
        return self.can_load or self.can_resume

    @property
    def can_list(self) -> bool:
        return self._offers("list")

    def _offers(self, name: str) -> bool:
        """The agent declares the session capability `name` (`{}` means offered)."""
        offered = self.capabilities.session_capabilities if self.capabilities else None
        return getattr(offered, name, None) is not None

    async def list_sessions(self, cwd: str) -> dict[str, str]:
        """`session/list` for one folder: the titles the agent keeps, by session id (the
        first page; the bridge lists ten at most)."""
        raw = await self.conn.send_request(AGENT_METHODS["session_list"], {"cwd": cwd})
        sessions = raw.get("sessions") if isinstance(raw, dict) else None
        items = sessions if isinstance(sessions, list) else []
        return {
            str(item["sessionId"]): str(item["title"])
            for item in items
            if isinstance(item, dict) and item.get("sessionId") and item.get("title")
        }

    async def reopen(self, cwd: str, session_id: str) -> tuple[SessionModeState | None, Any]:
        """An earlier session back on this process: `session/resume` where offered, else
        `session/load` (its replayed history arrives as updates, never shown)."""
        if not self.can_resume:
            return await self.load_session(cwd, session_id)
        params = {"sessionId": session_id, "cwd": cwd, "mcpServers": []}
        raw = await self.conn.send_request(AGENT_METHODS["session_resume"], params)
        return _modes_and_config(raw)

    async def initialize(
        self, capabilities: ClientCapabilities, info: Implementation
    ) -> InitializeResponse:
        request = InitializeRequest(
            protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities, client_info=info
        )
        # Declared explicitly (not dropped as defaults): we offer no fs and no terminal.
        params = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        raw = await self.conn.send_request(AGENT_METHODS["initialize"], params)
        response = InitializeResponse.model_validate(raw)
        self.capabilities = response.agent_capabilities or AgentCapabilities()
        self.agent_info = response.agent_info
        return response

    async def new_session(self, cwd: str) -> tuple[str, SessionModeState | None, Any]:
        """The session id, its modes and its config options (raw JSON)."""
        request = NewSessionRequest(cwd=cwd, mcp_servers=[])
        raw = await self.conn.send_request(AGENT_METHODS["session_new"], serialize_params(request))
        response = NewSessionResponse.model_validate(raw)
        return response.session_id, response.modes, (raw or {}).get("configOptions")

    async def load_session(self, cwd: str, session_id: str) -> tuple[SessionModeState | None, Any]:
        """The session's modes and config options (raw JSON); the replayed history arrives
        as updates."""
        request = LoadSessionRequest(cwd=cwd, session_id=session_id, mcp_servers=[])
        raw = await self.conn.send_request(AGENT_METHODS["session_load"], serialize_params(request))
        return _modes_and_config(raw)

    async def set_config(self, session_id: str, config_id: str, value: str) -> Any:
        """`session/set_config_option`; the agent's options after it (raw JSON)."""
        params = {"sessionId": session_id, "configId": config_id, "value": value}
        raw = await self.conn.send_request(AGENT_METHODS["session_set_config_option"], params)
        return (raw or {}).get("configOptions") if isinstance(raw, dict) else None

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        request = SetSessionModeRequest(session_id=session_id, mode_id=mode_id)
        await self.conn.send_request(AGENT_METHODS["session_set_mode"], serialize_params(request))

    async def prompt(self, session_id: str, blocks: list[Any]) -> PromptResponse:
        request = PromptRequest(session_id=session_id, prompt=blocks)
        return await request_model(
            self.conn, AGENT_METHODS["session_prompt"], request, PromptResponse
        )

    async def cancel(self, session_id: str) -> None:
        await notify_model(
            self.conn, AGENT_METHODS["session_cancel"], CancelNotification(session_id=session_id)
        )

    async def wait_exit(self, grace: float) -> int:
        """The exit code; kills the process if it has not ended within `grace` seconds."""
        try:
            return await asyncio.wait_for(asyncio.shield(self.exited), grace)
        except TimeoutError:
            self.signal_group(signal.SIGKILL)
            return await asyncio.shield(self.exited)

    def signal_group(self, sig: signal.Signals) -> None:
        """Signal the agent and everything it started (its own process group): an agent that
        re-executes itself as a child must not outlive the bridge."""
        self.process.signal_group(sig)

    async def shutdown(self, grace: float) -> None:
        """Close stdin (agents exit on EOF), then terminate, then kill."""
        with contextlib.suppress(Exception):
            await self.conn.close()
        with contextlib.suppress(Exception):
            self.process.stdin.close()
        if self.alive:
            try:
                await asyncio.wait_for(asyncio.shield(self.exited), grace)
            except TimeoutError:
                self.signal_group(signal.SIGTERM)
                await self.wait_exit(grace)
        self.signal_group(signal.SIGKILL)  # whatever the agent left behind in its group
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_discard(self.process.stdout), grace)
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, grace)


async def _discard(stdout: asyncio.StreamReader | None) -> None:
    """What the agent wrote after the bridge stopped reading, read to its end and dropped: a
    pipe left full stays paused and never sees its end (its transport would stay open)."""
    while stdout is not None and await stdout.read(READ_BYTES):
        pass


def _modes_and_config(raw: Any) -> tuple[SessionModeState | None, Any]:
    answer = raw if isinstance(raw, dict) else {}
    try:
        modes = SessionModeState.model_validate(answer["modes"]) if answer.get("modes") else None
    except ValueError:
        modes = None  # malformed modes: the session works without them
    return modes, answer.get("configOptions")


class HandledNotifications:
    """The bridge's handler as the connection calls it, counting the notifications being
    handled now: the SDK hands each to a task of its own, so one read before the agent's
    exit may still be on its way when the exit is seen (`settled`)."""

    def __init__(self, handler: MethodHandler) -> None:
        self._handler = handler
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def __call__(self, method: str, params: Any, is_notification: bool) -> Any:
        if not is_notification:  # a request may wait for a person: not waited for
            return await self._handler(method, params, is_notification)
        self._running += 1
        self._idle.clear()
        try:
            return await self._handler(method, params, is_notification)
        finally:
            self._running -= 1
            if not self._running:
                self._idle.set()

    async def settled(self) -> None:
        """Once no notification is being handled."""
        await self._idle.wait()


async def _wait_exit(
    process: ChildProcess, agent: AgentProcess, read_out: Callable[[], Awaitable[None]]
) -> int:
    """The exit code, as soon as the agent itself has exited.

    A child the agent started may still hold its pipes, and the bridge would never notice
    the exit: the agent counts as exited when it has (`ended`), and the rest of its process
    group is ended then to release the pipes; what the agent wrote is read out before the
    exit is told, as `spawn_agent`'s watcher does."""
    waiter = asyncio.ensure_future(process.wait())
    ender = asyncio.ensure_future(process.ended())
    try:
        await asyncio.wait({waiter, ender}, return_when=asyncio.FIRST_COMPLETED)
        while not waiter.done():
            agent.signal_group(signal.SIGKILL)
            if not agent.exited.done():
                await read_out()
                agent.exited.set_result(ender.result())
            await asyncio.wait({waiter}, timeout=EXIT_POLL_SECONDS)
        return waiter.result()
    finally:
        waiter.cancel()
        ender.cancel()


async def spawn_agent(
    argv: Sequence[str],
    *,
    slot: int,
    generation: int,
    cwd: Path,
    env: Mapping[str, str] | None,
    handler: MethodHandler,
    on_exit: Callable[[AgentProcess], None],
    now: Callable[[], float],
    stderr_lines: int = 200,
    sandbox: SandboxPolicy | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    on_oversize: Callable[[int], None] = lambda size: None,
    batch_window: float = DEFAULT_WINDOW_SECONDS,
    start: StartProcess = start_subprocess,
) -> AgentProcess:
    """Start the agent command (inside `sandbox` when given) with `start` and wire its
    stdio; raises SpawnError when it cannot run. `batch_window`: how long streaming updates
    are held to be merged (`transport.py`; 0 merges nothing); `now`: the bridge's clock
    (`Clock.now`)."""
    command = sandbox.wrap(argv) if sandbox is not None else list(argv)
    process = await start(command, cwd, env)
    label = f"agent[{slot}] pid {process.pid}"
    stdout = CappedLines(process.stdout, label=label, cap=max_line_bytes, on_oversize=on_oversize)
    transport = BatchedTransport(stdout, process.stdin, now=now, window=batch_window, label=label)
    handled = HandledNotifications(handler)
    conn = Connection(handled, transport)
    loop = asyncio.get_running_loop()
    agent = AgentProcess(
        slot=slot,
        generation=generation,
        process=process,
        conn=conn,
        stderr=StderrTail(label=label, clock=now, max_lines=stderr_lines),
        exited=loop.create_future(),
    )
    drain = asyncio.create_task(_drain(process.stderr, agent.stderr), name=f"{label} stderr")

    async def handed_on() -> None:
        await asyncio.shield(drain)
        await asyncio.shield(transport.received)
        await handled.settled()

    async def read_out() -> None:
        """What the agent wrote before it died reaches its turns before they end: its
        stderr's tail and its stdout read to the end, each update handed to the bridge (the
        SDK runs a task for each); only then is the exit told (else a crash loses the last
        updates). At most EXIT_READ_SECONDS (a pipe a stray child holds never ends)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handed_on(), EXIT_READ_SECONDS)

    async def watch() -> None:
        code = await _wait_exit(process, agent, read_out)
        await read_out()
        if not agent.exited.done():
            agent.exited.set_result(code)
        on_exit(agent)

    watcher = asyncio.create_task(watch(), name=f"{label} watch")
    agent.tasks.update((drain, watcher))
    logger.info("started %s (%s)", label, Path(argv[0]).name)
    return agent
