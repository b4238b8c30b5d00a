"""The agent of the simulated world, behind the real ACP adapter: an in-memory agent
process (the spawn port's `ChildProcess`) that speaks ACP JSON-RPC over in-memory pipes,
each prompt played from the plan the seed drew (`agent.draw_plan`: silences, text chunks,
tool calls, approvals, a crash, a cancel honoured at once, late or never).

Its stdout reaches the bridge in pieces the seed draws (a line split across reads, many
lines in one read); its starts may be slow or fail (it exits during `initialize`), a
`session/load` may be refused, and in some worlds the agent leaves a cancelled turn's result
for the next prompt (a tail: one the bridge's cancel-tail table knows, or one it learns).
Nothing here sleeps on the wall clock or draws from anything but the run's seeded streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import signal
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from acp.meta import AGENT_METHODS, CLIENT_METHODS, PROTOCOL_VERSION

from bridge.clock import Clock
from bridge.devtools.scripted_agent.wire import message_chunk
from bridge.runtime.acp.cancel_tails import CANCEL_TAIL_AGENTS
from bridge.runtime.acp.process import ChildProcess
from bridge.runtime.acp.runtime import AcpRuntime
from bridge.runtime.acp.transport import READ_BYTES
from bridge.runtime.events import PermissionRequested, PromptSent, TurnEvent
from bridge.runtime.port import EventSink, PromptFile

from .agent import Ask, Plan, PromptRecord, Step, draw_plan
from .cluster import MEMBER

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


@dataclass(frozen=True)
class Temper:
    """What kind of agent the world runs, drawn once per world."""

    can_load: bool
    tail: str  # "none", "known" (in the bridge's cancel-tail table) or "unknown"
    slow_starts: float  # the share of starts that take seconds
    failed_starts: float  # the share of starts that exit during `initialize`
    failed_loads: float  # the share of `session/load` answered with an error
    split_reads: float  # the share of stdout deliveries cut at a drawn byte

    @property
    def info(self) -> dict[str, str]:
        if self.tail == "known":
            return {"name": CANCEL_TAIL_AGENTS[-1].name, "version": "1.0.0"}
        return {"name": f"sim-agent-{self.tail}", "version": "1.0.0"}


def draw_temper(rng: random.Random) -> Temper:
    return Temper(
        can_load=rng.random() < 0.8,
        tail=rng.choice(("none", "none", "none", "known", "unknown")),
        slow_starts=rng.choice((0.0, 0.2, 0.5)),
        failed_starts=rng.choice((0.0, 0.0, 0.1, 0.3)),
        failed_loads=rng.choice((0.0, 0.0, 0.2, 0.5)),
        split_reads=rng.choice((0.0, 0.3, 0.8)),
    )


@dataclass
class SimAgents:
    """Every agent process the bridge started in the world (across its restarts), and what
    the agents saw: prompts, prompts into a busy session, permissions asked and answered."""

    rng: random.Random
    now: Callable[[], float]
    plans: dict[str, Plan]
    temper: Temper
    processes: list[SimAgentProcess] = field(default_factory=list)
    prompts: list[PromptRecord] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    asks: dict[str, Ask] = field(default_factory=dict)  # by the bridge's request id, in order
    # When the bridge's runtime last said a prompt of this text went out (`PromptSent`, from
    # which the bridge counts the turn's silence; the agent may read it a little later).
    handed: dict[str, float] = field(default_factory=dict)
    _sessions: Any = field(default_factory=lambda: itertools.count(1))
    _pids: Any = field(default_factory=lambda: itertools.count(4001))
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def new_id(self) -> str:
        """The bridge's ids for what it asks of users: counted, so a seed replays."""
        return f"{next(self._ids):012x}".ljust(32, "0")  # the bridge keeps the first 12

    async def start(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None
    ) -> ChildProcess:
        """The spawn port (`StartProcess`): an in-memory agent process."""
        process = SimAgentProcess(self, next(self._pids), random.Random(self.rng.random()))
        process.member = MEMBER.get()  # the cluster's member that started it, if any
        self.processes.append(process)
        return process

    def new_session(self) -> str:
        return f"sess_{next(self._sessions)}"

    def bridge_died(self) -> None:
        """The bridge was killed: its agents' stdin closed with it, and they exit."""
        for process in self.processes:
            process.die(0)

    def died(self, member: str) -> None:
        """One member of a cluster was killed: the agents it started exit."""
        for process in self.processes:
            if process.member == member:
                process.die(0)


class _Stdin:
    """The agent's stdin as the bridge writes it (a `StreamWriter`'s part the SDK uses)."""

    def __init__(self, process: SimAgentProcess) -> None:
        self._process = process

    def write(self, data: bytes) -> None:
        if self._process.returncode is None and not self._process.inbox.at_eof():
            self._process.inbox.feed_data(data)

    async def drain(self) -> None:
        if self._process.returncode is not None:
            raise ConnectionResetError("Connection lost")

    def close(self) -> None:
        if not self._process.inbox.at_eof():
            self._process.inbox.feed_eof()


class SimAgentProcess:
    """`ChildProcess` in memory: its agent runs as tasks of the loop, and exits on stdin's
    end, on a crash its plan draws, or on a signal."""

    def __init__(self, world: SimAgents, pid: int, rng: random.Random) -> None:
        self._world = world
        self._rng = rng
        self.pid = pid
        self.member: str | None = None
        self.returncode: int | None = None
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._exit: asyncio.Future[int] = loop.create_future()
        self.inbox = asyncio.StreamReader(limit=READ_BYTES)
        self.stdin = _Stdin(self)
        self.stdout = asyncio.StreamReader(limit=READ_BYTES)
        self.stderr = asyncio.StreamReader(limit=READ_BYTES)
        self._out = b""
        self._pumping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._asked: dict[int, asyncio.Future[Any]] = {}  # the agent's requests, by id
        self._ids = itertools.count(1)
        self._running: dict[str, PromptRecord] = {}  # session -> its prompt
        self._cancels: dict[str, asyncio.Event] = {}
        self._owed: set[str] = set()  # sessions whose next prompt gets a tail
        self._spawn(self._serve())

    # -- ChildProcess ------------------------------------------------------------------

    async def ended(self) -> int:
        return await asyncio.shield(self._exit)

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def kill(self) -> None:
        self.die(-signal.SIGKILL)

    def signal_group(self, sig: signal.Signals) -> None:
        self.die(-sig)

    # -- the process -------------------------------------------------------------------

    def die(self, code: int) -> None:
        if self.returncode is not None:
            return
        self.returncode = code
        if self._out:  # what it wrote is in the pipe: the bridge still reads it
            self.stdout.feed_data(self._out)
            self._out = b""
        self.stdout.feed_eof()
        self.stderr.feed_eof()
        if not self.inbox.at_eof():
            self.inbox.feed_eof()
        now = self._world.now()
        for record in self._running.values():
            record.ended = record.ended or now
        self._running.clear()
        for task in self._tasks:
            task.cancel()
        self._exit.set_result(code)

    def _spawn(self, work: Any) -> None:
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send(self, message: dict[str, Any]) -> None:
        if self.returncode is not None:
            return
        self._out += _encoded(message) + b"\n"
        if not self._pumping:
            self._pumping = True
            self._loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Deliver what was written: all of it in one read, or cut at a drawn byte (the
        rest follows a moment later)."""
        if self.returncode is not None or not self._out:
            self._pumping = False
            return
        cut = len(self._out)
        if cut > 1 and self._rng.random() < self._world.temper.split_reads:
            cut = self._rng.randint(1, cut - 1)
        piece, self._out = self._out[:cut], self._out[cut:]
        self.stdout.feed_data(piece)
        if self._out:
            self._loop.call_later(self._rng.choice((0.0, 0.001, 0.02)), self._pump)
        else:
            self._pumping = False

    def _respond(self, request_id: Any, result: Any) -> None:
        self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _refuse(self, request_id: Any, code: int, message: str) -> None:
        error = {"code": code, "message": message}
        self._send({"jsonrpc": "2.0", "id": request_id, "error": error})

    def _update(self, session_id: str, update: dict[str, Any]) -> None:
        params = {"sessionId": session_id, "update": update}
        self._send({"jsonrpc": "2.0", "method": CLIENT_METHODS["session_update"], "params": params})

    async def _ask(self, method: str, params: dict[str, Any]) -> Any:
        request_id = next(self._ids)
        answer = self._asked[request_id] = self._loop.create_future()
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await answer

    async def _serve(self) -> None:
        self.stderr.feed_data(b"sim agent listening on stdin\n")
        while line := await self.inbox.readline():
            message = orjson.loads(line)
            if "method" not in message:
                found = self._asked.pop(message.get("id"), None)
                if found is not None and not found.done():
                    found.set_result(message.get("result"))
            elif message["method"] == AGENT_METHODS["session_prompt"]:
                # Taken in the order it came: a cancel read right after it cancels it.
                self._spawn(self._prompt(message["id"], message["params"]))
            elif "id" in message:
                self._spawn(self._request(message["id"], message["method"], message["params"]))
            elif message["method"] == AGENT_METHODS["session_cancel"]:
                self._cancel(message["params"]["sessionId"])
        self.die(0)  # agents exit at their stdin's end

    # -- the agent ---------------------------------------------------------------------

    async def _request(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        temper = self._world.temper
        if method == AGENT_METHODS["initialize"]:
            slow = self._rng.random() < temper.slow_starts
            await asyncio.sleep(self._rng.uniform(2.0, 8.0) if slow else 0.02)
            if self._rng.random() < temper.failed_starts:
                self.stderr.feed_data(b"sim agent: cannot start\n")
                self.die(1)
                return
            capabilities = {"loadSession": temper.can_load}
            result = {
                "protocolVersion": PROTOCOL_VERSION,
                "agentCapabilities": capabilities,
                "agentInfo": temper.info,
            }
            self._respond(request_id, result)
        elif method == AGENT_METHODS["session_new"]:
            await asyncio.sleep(self._rng.uniform(0.0, 0.05))
            self._respond(request_id, {"sessionId": self._world.new_session()})
        elif method == AGENT_METHODS["session_load"] and temper.can_load:
            await asyncio.sleep(self._rng.uniform(0.0, 0.2))
            if self._rng.random() < temper.failed_loads:
                self._refuse(request_id, -32002, "session not found")
                return
            session_id = params["sessionId"]
            self._update(session_id, message_chunk("history, replayed"))  # never shown
            self._respond(request_id, {})
        else:
            self._refuse(request_id, -32601, f"method not found: {method}")

    def _cancel(self, session_id: str) -> None:
        record = self._running.get(session_id)
        if record is not None:
            record.cancelled_at = record.cancelled_at or self._world.now()
        found = self._cancels.get(session_id)
        if found is not None:
            found.set()

    def _prompt(self, request_id: Any, params: dict[str, Any]) -> Coroutine[Any, Any, None]:
        """Take a prompt at once, as it is read (what follows it on stdin, a cancel, finds it
        running); its turn is played by the coroutine returned."""
        session_id = params["sessionId"]
        text = "".join(b.get("text", "") for b in params["prompt"] if b.get("type") == "text")
        world = self._world
        if session_id in self._running:
            world.overlaps.append(f"{text!r} sent while {session_id} was running")
        record = PromptRecord(session_id, text, world.now(), handed=world.handed.get(text))
        self._running[session_id] = record
        cancel = self._cancels[session_id] = asyncio.Event()
        plan = world.plans.get(text) or draw_plan(self._rng, text)
        tail = session_id in self._owed
        if tail:
            # The cancelled turn's result answers this prompt at once, and the prompt runs
            # on, one turn behind. The bridge either restarts the agent and sends it again
            # (a new record), or keeps the turn open until a cancel or a kill: the quirk's
            # timeline, not one the presence rules can judge (its record is not listed), and
            # answered as far as the protocol goes (a prompt after it overlaps nothing).
            self._owed.discard(session_id)
            self._respond(request_id, {"stopReason": "end_turn"})
            del self._running[session_id]  # answered, as far as the protocol goes
        else:
            world.prompts.append(record)
        return self._played(request_id, record, plan, cancel, tail)

    async def _played(
        self, request_id: Any, record: PromptRecord, plan: Plan, cancel: asyncio.Event, tail: bool
    ) -> None:
        reason = await self._play(record.session_id, plan, cancel)
        if reason is None:
            return  # it crashed
        if tail or (reason == "cancelled" and self._world.temper.tail != "none"):
            self._owed.add(record.session_id)  # the next prompt gets this result
        self._finish(None if tail else request_id, record, reason)

    def _finish(self, request_id: Any, record: PromptRecord, reason: str) -> None:
        if request_id is not None:
            self._respond(request_id, {"stopReason": reason})
        record.ended = record.ended or self._world.now()
        if self._running.get(record.session_id) is record:
            del self._running[record.session_id]

    async def _play(self, session_id: str, plan: Plan, cancel: asyncio.Event) -> str | None:
        """The plan's steps; the stop reason, or None when the agent crashed."""
        for n, step in enumerate(plan.steps):
            if await _cancelled_within(cancel, step.after):
                return await _honour(plan)
            if step.kind == "chunk":
                self._update(session_id, message_chunk(step.text))
            elif step.kind == "tool":
                self._tool(session_id, f"tool_{n}", step)
            elif step.kind == "crash":
                self.stderr.feed_data(b"sim agent: panic\n")
                self.die(1)
                return None
            elif step.kind == "permission":
                if await self._permission(session_id, f"tool_{n}", step, cancel):
                    return await _honour(plan, at_once=True)
            else:
                return "end_turn"
        return "end_turn"

    def _tool(self, session_id: str, tool_call_id: str, step: Step) -> None:
        start = {
            "sessionUpdate": "tool_call",
            "toolCallId": tool_call_id,
            "title": step.text,
            "status": "in_progress",
        }
        self._update(session_id, start)
        done = {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id}
        self._update(session_id, {**done, "status": "completed"})

    async def _permission(
        self, session_id: str, tool_call_id: str, step: Step, cancel: asyncio.Event
    ) -> bool:
        """Ask; True when the turn was cancelled before an answer came."""
        tool_call = {"toolCallId": tool_call_id, "title": step.text, "status": "pending"}
        params = {"sessionId": session_id, "toolCall": tool_call, "options": OPTIONS}
        answer = asyncio.ensure_future(
            self._ask(CLIENT_METHODS["session_request_permission"], params)
        )
        cancelled = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({answer, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
        if answer.done():
            return False
        answer.cancel()
        return True


def _encoded(message: dict[str, Any]) -> bytes:
    """The agent's JSON as `json.dumps` writes it, ASCII (the seed cuts reads at drawn bytes,
    so the bytes must not change): orjson's, at a fraction of the cost, when it is ASCII too
    (the two differ only beyond ASCII and in a float's spelling; the agent writes no float)."""
    data = orjson.dumps(message)
    if data.isascii() and b"\x7f" not in data:  # json escapes the rest (ensure_ascii)
        return data
    return json.dumps(message, separators=(",", ":")).encode()


async def _honour(plan: Plan, *, at_once: bool = False) -> str:
    """A cancel: honoured after the plan's delay, or never (the bridge must give up)."""
    if plan.cancel_delay is None and not at_once:
        await asyncio.Event().wait()  # never: only a kill ends it
    await asyncio.sleep(plan.cancel_delay or 0.0)
    return "cancelled"


async def _cancelled_within(cancel: asyncio.Event, seconds: float) -> bool:
    if cancel.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(cancel.wait(), seconds)
    return cancel.is_set()


class WatchedRuntime(AcpRuntime):
    """The real runtime on the in-memory agents, noting what the bridge asked of its users
    and their answers (by the bridge's request ids, which the cards carry)."""

    def __init__(self, agents: SimAgents, clock: Clock, ids: Callable[[], str]) -> None:
        super().__init__(
            ["sim-agent", "--acp"],
            Path("/sim/workspace"),
            clock=clock,
            start_process=agents.start,
            new_id=ids,
        )
        self._agents = agents
        self._now = clock.now

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        asks, handed = self._agents.asks, self._agents.handed

        def watched(event: TurnEvent) -> None:
            if isinstance(event, PromptSent):
                handed[text] = self._now()
            if isinstance(event, PermissionRequested):
                asks[event.request_id] = Ask(event.request_id, text, self._now())
            sink(event)

        await super().prompt(session_id, text, watched, files)

    async def answer_permission(self, request_id: str, option_id: str | None) -> None:
        pending = request_id in self.pending_request_ids()
        await super().answer_permission(request_id, option_id)
        ask = self._agents.asks.get(request_id)
        if pending and ask is not None and ask.answered is None:
            ask.answered, ask.option = self._now(), option_id

    def owns(self) -> set[int]:
        """The pids of the agent processes its pool holds, alive."""
        return {process.pid for process in self.running_processes()}
