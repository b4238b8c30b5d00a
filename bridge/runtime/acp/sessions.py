"""The ACP sessions a runtime knows: which agent process serves which conversation's
session; binding, resuming after a bridge restart (`session/load`), and reloading after an
agent restart.

Each session's record (`AcpSession`: its process, slot, folder and the turn running on it)
holds what the agent reports about it outside turns (`SessionInfo`); the table of them
(`SessionTable`) keeps each slot's session and running-turn counts as they change: the
operator's process view reads them at every turn's start and end, and counting them afresh
walked every session ever opened on the runtime (thousands, on a busy bridge) twice per
turn.

Without `loadSession` a session lost with its process stays lost: `ensure_bound` raises
`SessionLost`, `resume` returns None and the caller opens a new session. History replayed
during a load is never emitted (no turn is running on the session then).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from acp.exceptions import RequestError
from acp.schema import (
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    SessionInfoUpdate,
    SessionModeState,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
)

from bridge.runtime.acp.cancel_tails import CancelTails
from bridge.runtime.acp.pool import AgentPool, describe_error
from bridge.runtime.acp.process import AgentProcess
from bridge.runtime.events import (
    ConfigOption,
    ModeOption,
    SessionModes,
    TurnEvent,
    Usage,
    config_from_wire,
)
from bridge.runtime.port import (
    CONFIG_CHOICE,
    MODE_CHOICE,
    WORKSPACE_CHOICE,
    AgentRefused,
    EventSink,
    RuntimeUnavailable,
    SessionHandle,
)

logger = logging.getLogger(__name__)


# One prompt on one session: its events go to the engine's sink, and exactly one terminal
# event ends it (the first wins; later ones are dropped).
@dataclass
class AcpTurn:
    session_id: str
    sink: EventSink
    done: bool = False
    cancel_requested: bool = False
    updates: int = 0  # session updates relayed for this prompt
    answered_after: int = 0  # of them, those relayed before its answer was read
    # The first prompt after a cancel (on the same process): an empty `end_turn` before any
    # update is the cancelled turn's leftover (a tail), not this prompt's answer.
    suspect_tail: bool = False
    moving: bool = False  # its process is being replaced after a tail; its exit ends nothing
    released: asyncio.Future[None] | None = None  # set by cancel(): stop waiting
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # its prompt call returned
    # What each tool call of this prompt said it will do (content, raw input), for a
    # permission request that names the call but leaves that out (Codex).
    tool_calls: dict[str, ToolCallUpdate] = field(default_factory=dict)

    def note_tool_call(self, update: Any) -> None:
        if not isinstance(update, ToolCallStart | ToolCallProgress):
            return
        said = _filled(update, self.tool_calls.get(update.tool_call_id))
        if said["content"] or said["raw_input"] is not None:
            self.tool_calls[update.tool_call_id] = ToolCallUpdate(
                tool_call_id=update.tool_call_id, **said
            )

    def completed(self, tool_call: ToolCallUpdate) -> ToolCallUpdate:
        """The request's tool call, with what the call itself said where the request is
        silent (ACP: a request's tool call is an update of the call announced before)."""
        known = self.tool_calls.get(tool_call.tool_call_id)
        if known is None:
            return tool_call
        return tool_call.model_copy(update=_filled(tool_call, known))

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


def _filled(
    update: ToolCallStart | ToolCallProgress | ToolCallUpdate, known: ToolCallUpdate | None
) -> dict[str, Any]:
    """A tool call's content and raw input: the update's where it has them, else the known."""
    if known is None:
        return {"content": update.content, "raw_input": update.raw_input}
    return {
        "content": update.content or known.content,
        "raw_input": known.raw_input if update.raw_input is None else update.raw_input,
    }


@dataclass
class SessionInfo:
    """Session state the agent reports outside turns (kept, never emitted as turn events)."""

    available_commands: tuple[str, ...] = ()
    mode_id: str | None = None
    modes: tuple[ModeOption, ...] = ()  # offered in the session/new or session/load answer
    config: tuple[ConfigOption, ...] = ()  # the agent's session config options, as last told
    title: str | None = None
    usage: Usage | None = None
    idle_updates: int = 0  # updates that arrived while no turn ran (incl. load replay)

    def offered(self, state: SessionModeState | None, config: Any = None) -> None:
        if config is not None:
            self.config = config_from_wire(config)
        if state is not None:
            self.modes = tuple(ModeOption(m.id, m.name) for m in state.available_modes)
            self.mode_id = state.current_mode_id

    def absorb(self, update: Any) -> None:
        if isinstance(update, AvailableCommandsUpdate):
            self.available_commands = tuple(c.name for c in update.available_commands)
        elif isinstance(update, CurrentModeUpdate):
            self.mode_id = update.current_mode_id
        elif isinstance(update, SessionInfoUpdate) and update.title is not None:
            self.title = update.title
        elif isinstance(update, UsageUpdate):
            cost = update.cost
            self.usage = Usage(
                update.used,
                update.size,
                cost.amount if cost else None,
                cost.currency if cost else None,
            )
        elif isinstance(update, ConfigOptionUpdate):
            self.config = config_from_wire(update.model_dump(by_alias=True)["configOptions"])


@dataclass
class AcpSession:
    session_id: str
    conversation_key: str
    slot: int
    process: AgentProcess
    cwd: str  # the session's working folder (session/new, and every reload of it)
    turn: AcpTurn | None = None
    prompts: int = 0  # prompts sent on this session by this bridge
    # The last turn was cancelled: some agents answer the next prompt with that turn's
    # leftover result, so the session is settled before the next prompt goes out.
    after_cancel: bool = False
    info: SessionInfo = field(default_factory=SessionInfo)
    reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Held by a prompt from its call to its turn's end: a prompt still waiting for its
    # agent when the next one comes (its round stopped meanwhile) goes first, never beside.
    prompt_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionTable:
    def __init__(self) -> None:
        self._by_id: dict[str, AcpSession] = {}
        self._sessions: Counter[int] = Counter()  # slot -> sessions
        self._running: Counter[int] = Counter()  # slot -> sessions with a turn running

    def get(self, session_id: str) -> AcpSession | None:
        return self._by_id.get(session_id)

    def __getitem__(self, session_id: str) -> AcpSession:
        return self._by_id[session_id]

    def values(self) -> Iterator[AcpSession]:
        return iter(list(self._by_id.values()))

    def add(self, session: AcpSession) -> None:
        known = self._by_id.get(session.session_id)
        if known is session:
            return
        if known is not None:
            self.drop(known.session_id)
        self._by_id[session.session_id] = session
        self._sessions[session.slot] += 1
        if session.turn is not None:
            self._running[session.slot] += 1

    def drop(self, session_id: str) -> AcpSession | None:
        session = self._by_id.pop(session_id, None)
        if session is not None:
            self._sessions[session.slot] -= 1
            if session.turn is not None:
                self._running[session.slot] -= 1
        return session

    def turn_began(self, session: AcpSession, turn: AcpTurn) -> None:
        if session.turn is None and self._by_id.get(session.session_id) is session:
            self._running[session.slot] += 1
        session.turn = turn

    def turn_ended(self, session: AcpSession, turn: AcpTurn) -> None:
        """`turn` is over; the session is free unless another turn has taken it since."""
        if session.turn is not turn:
            return
        session.turn = None
        if self._by_id.get(session.session_id) is session:
            self._running[session.slot] -= 1

    def counts(self, slot: int) -> tuple[int, int]:
        """The slot's (sessions, running turns)."""
        return self._sessions[slot], self._running[slot]


class AfterCancel(enum.Enum):
    """How the first prompt after a cancel goes (`Sessions.settle_after_cancel`)."""

    WATCH = "watch"  # to the same process, watched for a tail
    CLEAN = "clean"  # the process was restarted and the session reloaded: no tail can come
    RESTART_WHEN_FREE = "restart_when_free"  # a restart is owed once no other turn runs on it


class SessionLost(RuntimeUnavailable):
    """The session is unknown here, or its agent restarted without being able to reload it."""


class Sessions:
    def __init__(self, pool: AgentPool, tails: CancelTails | None = None) -> None:
        self._pool = pool
        self.tails = tails or CancelTails()
        self._sessions = SessionTable()
        self._by_conversation: dict[str, str] = {}
        self._chosen: dict[str, dict[str, str]] = {}  # conversation key -> its choices
        # One open at a time per conversation (kept, like its choices): a turn ended while
        # its session was loading leaves that open running, and the next turn's must not
        # load the session a second time (the second load's replayed history would reach
        # the turn begun meanwhile as its answer).
        self._opening: dict[str, asyncio.Lock] = {}
        # Sessions being opened on each slot, not yet bound: counted in its load, so that
        # opens at the same moment do not all see the same process as empty.
        self._placing: Counter[int] = Counter()

    def get(self, session_id: str) -> AcpSession | None:
        return self._sessions.get(session_id)

    def all(self) -> list[AcpSession]:
        return list(self._sessions.values())

    def on_process(self, process: AgentProcess) -> list[AcpSession]:
        return [s for s in self._sessions.values() if s.process is process]

    def turns_on(self, process: AgentProcess) -> list[AcpTurn]:
        """The turns still running on `process` (a turn moving to a new process is not)."""
        return [
            s.turn
            for s in self.on_process(process)
            if s.turn is not None and not s.turn.done and not s.turn.moving
        ]

    def load(self, slot: int, replacing: str | None = None) -> int:
        """Sessions a slot serves; the one a conversation is about to replace does not count."""
        sessions, _ = self._sessions.counts(slot)
        sessions += self._placing[slot]
        replaced = self._sessions.get(replacing) if replacing else None
        if replaced is not None and replaced.slot == slot and replaced.turn is None:
            sessions -= 1
        return sessions

    def counts(self, slot: int) -> tuple[int, int]:
        """The slot's (sessions, running turns), as kept (`SessionTable`)."""
        return self._sessions.counts(slot)

    def turn_began(self, session: AcpSession, turn: AcpTurn) -> None:
        self._sessions.turn_began(session, turn)

    def turn_ended(self, session: AcpSession, turn: AcpTurn) -> None:
        self._sessions.turn_ended(session, turn)

    async def open(
        self, conversation_key: str, resume_session_id: str | None, chosen: Mapping[str, str]
    ) -> SessionHandle:
        """The conversation's session: `resume_session_id` resumed or loaded where it can
        be, else a new one; either way brought to the conversation's choices."""
        async with self._opening.setdefault(conversation_key, asyncio.Lock()):
            self.choose(conversation_key, chosen)
            handle = None
            if resume_session_id:
                handle = await self.resume(conversation_key, resume_session_id)
            handle = handle or await self.open_new(conversation_key)
            session = self._sessions[handle.session_id]
            await self.apply_chosen(session, session.process)
            return handle

    async def open_new(self, conversation_key: str) -> SessionHandle:
        slot = self._pool.choose(self.load, replacing=self._by_conversation.get(conversation_key))
        with self._placed(slot.index):
            process = await self._pool.live(slot)
            cwd = self.cwd_of(conversation_key)
            try:
                session_id, modes, config = await process.new_session(cwd)
            except RequestError as exc:
                reason = describe_error(exc)
                raise RuntimeUnavailable(f"the agent refused session/new: {reason}") from exc
            except ConnectionError as exc:
                raise RuntimeUnavailable("the agent exited while opening a session") from exc
            session = AcpSession(session_id, conversation_key, slot.index, process, cwd)
            session.info.offered(modes, config)
            self._bind(conversation_key, session)
        logger.info("opened session %s on agent[%d]", session_id, slot.index)
        return SessionHandle(session_id=session_id, loaded=False)

    @contextlib.contextmanager
    def _placed(self, slot: int) -> Iterator[None]:
        """A session on its way to `slot` (until bound, or failed) counts in its load."""
        self._placing[slot] += 1
        try:
            yield
        finally:
            self._placing[slot] -= 1
            if not self._placing[slot]:
                del self._placing[slot]

    async def resume(self, conversation_key: str, session_id: str) -> SessionHandle | None:
        known = self._sessions.get(session_id)
        if known is not None:
            try:
                await self.ensure_bound(known)
            except SessionLost as exc:
                logger.info("session %s not resumed (%s); opening a new one", session_id, exc)
                self._sessions.drop(session_id)
                return None
            self._bind(conversation_key, known)
            return SessionHandle(session_id=session_id, loaded=True)
        # Unknown here (e.g. the bridge restarted): ask an agent that can load sessions.
        slot = self._pool.choose(self.load, replacing=self._by_conversation.get(conversation_key))
        with self._placed(slot.index):
            process = await self._pool.live(slot)
            if not process.can_reopen:
                return None
            cwd = self.cwd_of(conversation_key)
            try:
                modes, config = await process.reopen(cwd, session_id)
            except (RequestError, ConnectionError) as exc:
                logger.info("agent could not load session %s (%s)", session_id, type(exc).__name__)
                return None
            session = AcpSession(session_id, conversation_key, slot.index, process, cwd)
            session.info.offered(modes, config)
            self._bind(conversation_key, session)
        logger.info("loaded session %s on agent[%d]", session_id, slot.index)
        return SessionHandle(session_id=session_id, loaded=True)

    async def ensure_bound(self, session: AcpSession) -> AgentProcess:
        """The live process serving this session, restarting and reloading as needed."""
        if session.process.alive:
            return session.process
        process = await self._pool.live(self._pool.slots[session.slot])
        async with session.reload_lock:
            if session.process is process:
                return process
            if not process.can_reopen:
                raise SessionLost(
                    f"the agent restarted and cannot reload session {session.session_id}"
                )
            try:
                modes, config = await process.reopen(session.cwd, session.session_id)
            except RequestError as exc:
                reason = describe_error(exc)
                raise SessionLost(f"the agent could not reload the session: {reason}") from exc
            except ConnectionError as exc:
                raise RuntimeUnavailable("the agent exited while reloading a session") from exc
            session.info.offered(modes, config)
            await self.apply_chosen(session, process)  # a restarted agent is in its defaults
            session.process = process
            session.after_cancel = False  # a fresh process holds no cancelled turn's leftover
            process.sessions.add(session.session_id)
            logger.info("reloaded session %s on agent[%d]", session.session_id, process.slot)
            return process

    async def settle_after_cancel(
        self, session: AcpSession, process: AgentProcess
    ) -> tuple[AgentProcess, AfterCancel]:
        """Settle a session whose last turn was cancelled, before its next prompt.

        Cancel in place: the next prompt goes to the same process and session, watched for
        a tail (`cancel_tails`). An agent known to leave one is restarted and the session
        reloaded first (a `session/load` on the same process does not clear it); while
        another conversation's turn runs on it, the restart is owed (`RESTART_WHEN_FREE`:
        the prompt waits for those turns, `until_free`). Returns the process to prompt and
        how.

        One that cannot load sessions cannot take this one back clean on any process: kept,
        it would be one turn behind for good (each round absorbed and ended by the stall
        rules, a cancel again). It is let go, and `SessionLost` raised: the turn runner
        opens a new session (`session.fresh`). Not by a restart, which would cost the
        process's other conversations their sessions too."""
        session.after_cancel = False
        if not self.tails.leaves_tail(process.agent_info):
            return process, AfterCancel.WATCH
        if not process.can_reopen:
            self._sessions.drop(session.session_id)
            process.sessions.discard(session.session_id)
            raise SessionLost(f"session {session.session_id} holds a cancelled turn's result")
        if self.turns_on(process):  # a restart now would cost another chat its turn
            return process, AfterCancel.RESTART_WHEN_FREE
        return await self.restart(session, process, "after a cancelled turn"), AfterCancel.CLEAN

    async def until_free(self, process: AgentProcess, turn: AcpTurn) -> bool:
        """Until no turn but `turn` runs on `process`, so that restarting it costs no one
        their turn; new prompts are held off it meanwhile (`past_hold`: else the chats
        sharing it could keep it busy for ever). False when `turn` is stopped first. The
        caller restarts the process, then `release_hold`s it."""
        loop = asyncio.get_running_loop()
        if process.hold is None or process.hold.done():
            process.hold = loop.create_future()
        released = turn.released = loop.create_future()
        if turn.cancel_requested:
            return False
        while True:
            busy = [t for t in self.turns_on(process) if t is not turn]
            if not busy or not process.alive:
                return True
            ends = [asyncio.ensure_future(t.ended.wait()) for t in busy]
            try:
                await asyncio.wait(
                    [*ends, released, process.exited], return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for end in ends:
                    end.cancel()
            if released.done():
                return False

    @staticmethod
    def release_hold(process: AgentProcess) -> None:
        hold, process.hold = process.hold, None
        if hold is not None and not hold.done():
            hold.set_result(None)

    async def past_hold(self, session: AcpSession, process: AgentProcess) -> AgentProcess:
        """`process` once no restart holds it (`until_free`): then the process serving
        the session, which the restart replaced."""
        while process.hold is not None and not process.hold.done():
            await asyncio.shield(process.hold)
            process = await self.ensure_bound(session)
        return process

    async def restart(self, session: AcpSession, process: AgentProcess, why: str) -> AgentProcess:
        """A new process for the session's slot, the session reloaded on it; raises
        `RuntimeUnavailable` when it cannot be reloaded (the turn runner then opens a new
        session, `session.fresh`)."""
        logger.info("restarting agent[%d] %s (session %s)", process.slot, why, session.session_id)
        process.retiring = True
        await process.shutdown(self._pool.shutdown_timeout)
        try:
            return await self.ensure_bound(session)
        except SessionLost as exc:
            raise RuntimeUnavailable(str(exc)) from exc

    def modes(self, session_id: str) -> SessionModes | None:
        session = self._sessions.get(session_id)
        if session is None or not session.info.modes:
            return None
        return SessionModes(session.info.mode_id, session.info.modes)

    def cwd_of(self, conversation_key: str) -> str:
        """The folder the conversation chose (/cd), else the pool's workspace."""
        chosen = self._chosen.get(conversation_key, {})
        return chosen.get(WORKSPACE_CHOICE) or str(self._pool.workdir)

    def release(self, conversation_key: str) -> None:
        """The conversation moved to another agent or workspace: its idle session here is
        let go (a running one ends with its turn)."""
        session_id = self._by_conversation.pop(conversation_key, None)
        session = self._sessions.get(session_id) if session_id else None
        if session is not None and session.turn is None:
            self._sessions.drop(session.session_id)
            session.process.sessions.discard(session.session_id)

    def choose(self, conversation_key: str, chosen: Mapping[str, str]) -> None:
        """What the conversation chose of its agent (`MODE_CHOICE`, `CONFIG_CHOICE` + id),
        set on each of its sessions from now on: opened, resumed or reloaded."""
        self._chosen.setdefault(conversation_key, {}).update(chosen)

    async def apply_chosen(self, session: AcpSession, process: AgentProcess) -> None:
        """Bring the session to the conversation's choices that its agent still offers; a
        refusal is logged, the agent's own value then stands."""
        info = session.info
        for name, value in self._chosen.get(session.conversation_key, {}).items():
            if not _wants_change(info, name, value):
                continue
            config: Any = None
            try:
                if name == MODE_CHOICE:
                    await process.set_mode(session.session_id, value)
                else:
                    config_id = name.removeprefix(CONFIG_CHOICE)
                    config = await process.set_config(session.session_id, config_id, value)
            except (RequestError, ConnectionError) as exc:
                logger.warning("could not set %s on session %s (%s)", name, session.session_id, exc)
                continue
            _took(info, name, value, config)

    async def set_mode(self, session_id: str, mode_id: str) -> None:
        session, process = await self._bound(session_id)
        with _refusals():
            await process.set_mode(session_id, mode_id)
        _took(session.info, MODE_CHOICE, mode_id, None)
        self.choose(session.conversation_key, {MODE_CHOICE: mode_id})

    async def _bound(self, session_id: str) -> tuple[AcpSession, AgentProcess]:
        session = self._sessions.get(session_id)
        if session is None:
            raise AgentRefused("the session is gone")
        return session, await self.ensure_bound(session)

    def info(self, session_id: str) -> SessionInfo | None:
        session = self._sessions.get(session_id)
        return session.info if session else None

    def config(self, session_id: str) -> tuple[ConfigOption, ...]:
        session = self._sessions.get(session_id)
        return session.info.config if session else ()

    async def set_config(self, session_id: str, config_id: str, value: str) -> None:
        session, process = await self._bound(session_id)
        with _refusals():
            config = await process.set_config(session_id, config_id, value)
        _took(session.info, CONFIG_CHOICE + config_id, value, config)
        self.choose(session.conversation_key, {CONFIG_CHOICE + config_id: value})

    def _bind(self, conversation_key: str, session: AcpSession) -> None:
        """The conversation's session is now `session`; its previous idle one is released."""
        previous = self._by_conversation.get(conversation_key)
        if previous and previous != session.session_id:
            old = self._sessions.get(previous)
            if old is not None and old.turn is None:
                self._sessions.drop(previous)
                old.process.sessions.discard(previous)
        self._by_conversation[conversation_key] = session.session_id
        self._sessions.add(session)
        session.process.sessions.add(session.session_id)


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """An agent's error answer, or its exit, as `AgentRefused` with a short reason."""
    try:
        yield
    except RequestError as exc:
        raise AgentRefused(describe_error(exc)) from exc
    except ConnectionError as exc:
        raise AgentRefused("the agent exited") from exc


def _wants_change(info: SessionInfo, name: str, value: str) -> bool:
    """The session is not at the chosen value, and its agent still offers it."""
    if name == MODE_CHOICE:
        return info.mode_id != value and any(m.mode_id == value for m in info.modes)
    option = next((c for c in info.config if CONFIG_CHOICE + c.config_id == name), None)
    if option is None or option.current == value:
        return False
    return not option.values or any(v.mode_id == value for v in option.values)


def _took(info: SessionInfo, name: str, value: str, config: Any) -> None:
    """The agent accepted `name` = `value`; `config` is its options after it, when it sent
    them (else the option is assumed to hold the value now)."""
    if name == MODE_CHOICE:
        info.mode_id = value
        return
    info.offered(None, config)
    if config is None:
        config_id = name.removeprefix(CONFIG_CHOICE)
        info.config = tuple(
            replace(c, current=value) if c.config_id == config_id else c for c in info.config
        )
