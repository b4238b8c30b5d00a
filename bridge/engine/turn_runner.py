"""Runs one agent turn: a slot, a session, the prompt, and the runtime's events fed back.

What the turn means to the user is decided in the core; this module only moves inputs in
(`SessionOpened`, `SessionNotReloaded`, runtime events, `RuntimeUnavailableAtStart`) and
carries out the effects addressed to it, `SendPrompt` and `OpenSession`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from bridge.core.effects import OpenSession, SendPrompt, StartTurn
from bridge.core.inputs import (
    NotStartedReason,
    RuntimeRestarted,
    RuntimeRestartFailed,
    RuntimeUnavailableAtStart,
    SessionNotReloaded,
    SessionOpened,
    StartFailed,
    TurnNotStarted,
)
from bridge.engine.actor import ConversationActor, Trace
from bridge.media.attachments import Attachments
from bridge.media.voice import Voice
from bridge.ops.metrics import Metrics
from bridge.preferences import agent_choices
from bridge.runtime.events import (
    PermissionRequested,
    PromptSent,
    QuestionAsked,
    RuntimeExited,
    RuntimeFailed,
    SessionFacts,
    ToolCallStarted,
    TurnEnded,
    TurnEvent,
)
from bridge.runtime.port import AgentRuntime, PromptFile, RuntimeUnavailable
from bridge.store.port import SessionRecord, Store, StoreUnavailable
from bridge.store.steady import StoreRetry
from bridge.tasks import TaskTracker

log = logging.getLogger(__name__)

_ENDINGS = (TurnEnded, RuntimeFailed, RuntimeExited)
# A session's last activity is written at most this often (and whenever its title changes).
NOTE_EVERY_SECONDS = 60.0
# Sessions noted before the notes older than NOTE_EVERY_SECONDS (they save no write) are
# dropped: those of sessions gone with a lost agent or another instance stay no longer.
NOTED_KEPT = 64

# Told when a conversation's agent session ends: (kind, conversation key, session id, reason),
# kind `session_closed` (let go: /new, a move, the operator) or `session_died` (lost with its
# agent). The operator stream's terminal frames (`Projection.session_ended`).
SessionEnded = Callable[[str, str, str, str], object]


def _nobody(kind: str, key: str, session_id: str, reason: str) -> None:
    return None


class TurnRunner:
    def __init__(
        self,
        *,
        runtime: AgentRuntime,
        store: Store,
        retry: StoreRetry,
        clock: Callable[[], float],
        tasks: TaskTracker,
        max_running_turns: int,
        attachments: Attachments | None = None,
        metrics: Metrics | None = None,
        session_ended: SessionEnded | None = None,
        voice: Voice | None = None,
        cancel_limit: float = 30.0,
    ) -> None:
        self._voice = voice
        # How long a stopped prompt the agent has not answered may run before its process is
        # killed (the core's own stop waits as long: `Timings.cancel_limit`).
        self._cancel_limit = cancel_limit
        self._session_ended = session_ended or _nobody
        self._attachments = attachments
        self._noted: dict[str, tuple[str, float]] = {}  # session id -> (title, when) noted
        self._noted_kept = NOTED_KEPT
        self._runtime = runtime
        self._store = store
        # The store's calls of a turn wait out a database restart (bridge/store/steady.py).
        self._retry = retry
        # Several instances: whether the conversation's lease is this instance's, waited on
        # while unconfirmed, before a prompt goes out. One instance alone holds every one.
        self.confirm: Callable[[str], Awaitable[bool]] = _always
        self._clock = clock
        self._tasks = tasks
        self._slots = asyncio.Semaphore(max_running_turns)
        self._metrics = metrics

    @property
    def shutting_down(self) -> bool:
        """The bridge is stopping: rounds under way may finish, no new one starts."""
        return self._tasks.draining

    def stopping(self) -> bool:
        """`shutting_down`, read afresh after an await (a method, so never narrowed)."""
        return self._tasks.draining

    def start(self, actor: ConversationActor, work: StartTurn) -> None:
        self._tasks.spawn(self._run(actor, work), name=f"turn:{work.turn_id}")

    async def _run(self, actor: ConversationActor, work: StartTurn) -> None:
        if self._slots.locked():
            # Every slot is busy: say so now rather than wait in silence behind other rounds.
            busy = "too many rounds running at once"
            actor.feed(RuntimeUnavailableAtStart(work.turn_id, busy, limit_reached=True))
            return
        async with self._slots:
            try:
                await self._run_in_slot(actor, work)
            finally:
                if work.attachments and self._attachments is not None:
                    self._attachments.release(work.turn_id)

    async def _run_in_slot(self, actor: ConversationActor, work: StartTurn) -> None:
        files: list[PromptFile] = []
        if work.attachments and self._voice is not None:
            heard = await self._voice.hear(actor, work)  # its words first, or the one line
            if heard is None:
                return
            work, files = heard
        if work.attachments and self._attachments is not None:
            try:
                fetched, failed = await self._attachments.fetch(work.turn_id, work.attachments)
                files += fetched
            except Exception as exc:  # e.g. the data folder: not one file's problem, the turn's
                log.exception("fetching the attachments of turn %s failed", work.turn_id)
                actor.feed(StartFailed(work.turn_id, type(exc).__name__))
                return
            for problem in failed:
                actor.feed(problem)
        opening: OpenSession | None = OpenSession(work.turn_id, work.session_id)
        while opening is not None:  # the core asks again when a session was not reloaded
            opening = await self._open_and_prompt(actor, work, files, opening.session_id)

    async def _open_and_prompt(
        self,
        actor: ConversationActor,
        work: StartTurn,
        files: list[PromptFile],
        session_id: str | None,
    ) -> OpenSession | None:
        """The session (`session_id`, or the conversation's opened or resumed), then the
        prompt; what the core asks next when the session could not be reloaded."""
        fresh = False
        try:
            if not session_id:
                session_id, fresh = await self._open_for_turn(actor.key)
        except RuntimeUnavailable as exc:
            actor.feed(RuntimeUnavailableAtStart(work.turn_id, exc.reason, exc.limit_reached))
            return None
        except StoreUnavailable:  # past the retries: the bridge's part failed, not the agent
            log.error("turn %s: the store stayed unavailable", work.turn_id)
            actor.feed(StartFailed(work.turn_id, "StoreUnavailable"))
            return None
        except Exception as exc:  # a bug or a malformed answer must not strand the turn
            log.exception("opening a session for turn %s failed", work.turn_id)
            actor.feed(RuntimeUnavailableAtStart(work.turn_id, type(exc).__name__))
            return None
        if not await self._may_prompt(actor, work):
            return None
        answer = actor.feed(SessionOpened(work.turn_id, session_id, fresh=fresh))
        if not any(isinstance(e, SendPrompt) and e.turn_id == work.turn_id for e in answer):
            return None
        return await self._prompt(actor, work, session_id, files)

    async def _may_prompt(self, actor: ConversationActor, work: StartTurn) -> bool:
        """Before the prompt can go out: the lease is still this instance's, and the turn is
        marked prompted in the store (a turn cut without the mark never reached the agent,
        so a takeover or a restart runs its message again instead of asking for a resend).
        Marked before it is sent: a crash in between asks for a resend rather than running
        the prompt twice."""
        if not await self.confirm(actor.key):
            log.info("turn %s: %s went to another instance", work.turn_id, actor.key)
            actor.feed(TurnNotStarted(work.turn_id, NotStartedReason.NOT_OWNER))
            return False
        mark = partial(self._store.mark_prompted, work.turn_id, self._clock())
        try:
            await self._retry.call("mark_prompted", mark)
        except StoreUnavailable:
            log.error("turn %s: the store stayed unavailable", work.turn_id)
            actor.feed(StartFailed(work.turn_id, "StoreUnavailable"))
            return False
        return True

    async def open_session(self, key: str) -> str:
        """The conversation's session: resumed from the store's binding, or a new one."""
        return (await self._open_for_turn(key))[0]

    async def _open_for_turn(self, key: str) -> tuple[str, bool]:
        """The session, and whether a bound one could not be resumed (a fresh one instead)."""
        resume = await self._retry.call("session_for", partial(self._store.session_for, key))
        # /mode, /model, /agent, /cd: kept across restarts (the operator's own names stay here)
        kept = await self._retry.call("preferences", partial(self._store.preferences, key))
        chosen = agent_choices(kept)
        handle = await self._runtime.open_session(key, resume_session_id=resume, chosen=chosen)
        if resume is not None and handle.session_id != resume:
            self._session_ended("session_died", key, resume, "not_resumable")
        if handle.session_id != resume:
            bind = partial(self._store.bind_session, key, handle.session_id, self._clock())
            await self._retry.call("bind_session", bind)
            await self.remember(key, handle.session_id)
        return handle.session_id, resume is not None and handle.session_id != resume

    async def leave(self, key: str, reason: str = "new") -> None:
        """The conversation lets its session go (/new, /agent, /cd, /resume, the operator):
        recorded once more first, as an agent may tell its title late, then unbound."""
        session_id = await self._store.session_for(key)
        if session_id is not None:
            await self.remember(key, session_id)
            self._noted.pop(session_id, None)  # back to it later: its next turn is written
        await self._store.unbind(key)
        if session_id is not None:
            self._session_ended("session_closed", key, session_id, reason)

    async def remember(self, key: str, session_id: str) -> SessionFacts | None:
        """Record the session among the conversation's (for /sessions): which agent, which
        folder, its title as the agent told it, active now. Returns what the runtime told."""
        facts = await self._runtime.facts(session_id)
        if facts is None:
            return None
        now = self._clock()
        title = facts.title or ""
        noted = self._noted.get(session_id)
        if noted is not None and noted[0] == title and now - noted[1] < NOTE_EVERY_SECONDS:
            return facts  # /sessions shows minutes: a write a turn would buy nothing
        self._noted[session_id] = (title, now)
        if len(self._noted) > self._noted_kept:
            fresh = {s: n for s, n in self._noted.items() if now - n[1] < NOTE_EVERY_SECONDS}
            self._noted, self._noted_kept = fresh, max(NOTED_KEPT, 2 * len(fresh))
        record = SessionRecord(key, session_id, facts.agent, facts.folder, title, now, now)
        await self._retry.call("note_session", partial(self._store.note_session, record))
        return facts

    async def _prompt(
        self,
        actor: ConversationActor,
        work: StartTurn,
        session_id: str,
        files: list[PromptFile],
    ) -> OpenSession | None:
        """Runs the prompt to its one ending. When the session could not be brought back
        (an agent restarted and refused `session/load`) before the prompt went out, the
        core is told and its `OpenSession`, if it asks for one, returned."""
        ended: list[TurnEvent] = []
        sent: list[PromptSent] = []
        over = asyncio.Event()  # the prompt has its ending (or returned)

        def sink(event: TurnEvent) -> None:
            if isinstance(event, PromptSent):
                sent.append(event)
            if isinstance(event, _ENDINGS):
                ended.append(event)
                over.set()
            if not _is_current(actor, work.turn_id):
                # The engine already ended this turn (a forced stop): what its prompt still
                # reports, such as the killed agent's exit, must not reach the next turn.
                log.info("dropped %s of ended turn %s", type(event).__name__, work.turn_id)
                if isinstance(event, PromptSent):
                    # Its stop gave up waiting before the prompt went out (a slow agent
                    # start): nothing shows what the agent does with it, so it is stopped,
                    # and killed if it will not stop, as the core's own stop would: the
                    # next round's prompt waits behind it (seed 101294).
                    stop = self._stop_unseen(work.turn_id, session_id, over)
                    self._tasks.spawn(stop, name=f"cancel-ended:{work.turn_id}")
                return
            traced = trace_of_event(event)
            if traced is not None:
                actor.enqueue(Trace(work.turn_id, *traced))
            actor.feed(event)

        try:
            await self._runtime.prompt(session_id, work.text, sink, files)
        except Exception as exc:
            over.set()
            unsent = not (sent or ended) and isinstance(exc, RuntimeUnavailable)
            if unsent and _is_current(actor, work.turn_id):
                log.warning("turn %s: its session was not reloaded (%s)", work.turn_id, exc)
                reason = type(exc).__name__
                answer = actor.feed(SessionNotReloaded(work.turn_id, session_id, reason))
                opening = [e for e in answer if isinstance(e, OpenSession)]
                if not opening:  # the core ended the turn: the prompt failed
                    actor.enqueue(Trace(work.turn_id, "runtime_failed", reason))
                return opening[0] if opening else None
            log.exception("prompt of turn %s raised", work.turn_id)
            if not ended:
                sink(RuntimeFailed(session_id, reason=type(exc).__name__))
        over.set()
        if not ended:
            sink(RuntimeFailed(session_id, reason="prompt returned without an ending"))
        first = ended[0]
        if isinstance(first, RuntimeFailed):
            # The JSON-RPC code and short message only (never the agent's details).
            log.warning("turn %s failed in the agent: %s", work.turn_id, first.reason)
        if isinstance(first, RuntimeExited):
            if self._metrics:
                self._metrics.runtime_exits.inc()
            if first.restarting and _is_current(actor, work.turn_id):
                await self._reopen(actor, session_id)
        return None

    async def _stop_unseen(self, turn_id: str, session_id: str, over: asyncio.Event) -> None:
        """Cancel a prompt of a round already ended; kill its agent if the prompt has not
        ended within the cancel limit."""
        await self._runtime.cancel(session_id)
        try:
            await asyncio.wait_for(over.wait(), self._cancel_limit)
        except TimeoutError:
            log.warning("turn %s: its prompt did not stop after the round ended", turn_id)
            await self._runtime.abandon(session_id)

    async def _reopen(self, actor: ConversationActor, session_id: str) -> None:
        try:
            handle = await self._runtime.open_session(actor.key, resume_session_id=session_id)
        except RuntimeUnavailable as exc:
            self._session_ended("session_died", actor.key, session_id, "restart_failed")
            actor.feed(RuntimeRestartFailed(exc.reason))
            return
        if handle.session_id != session_id:  # the agent could not reload it: a fresh one
            self._session_ended("session_died", actor.key, session_id, "agent_exit")
        await self._store.bind_session(actor.key, handle.session_id, self._clock())
        actor.feed(RuntimeRestarted(handle.session_id, reloaded=handle.loaded))


async def _always(key: str) -> bool:
    return True


def _is_current(actor: ConversationActor, turn_id: str) -> bool:
    """The conversation's turn is this one."""
    turn = actor.conv.turn
    return turn is not None and turn.turn_id == turn_id


def trace_of_event(event: TurnEvent) -> tuple[str, str] | None:
    """Runtime events worth a timeline entry (titles and reasons, never message text)."""
    match event:
        case PromptSent():
            return "prompt_sent", ""
        case ToolCallStarted(title=title):
            return "tool", title[:120]
        case PermissionRequested(title=title):
            return "permission", title[:120]
        case QuestionAsked(kind=kind):
            return "question", kind.value
        case TurnEnded(stop_reason=reason):
            return "turn_ended", reason.value
        case RuntimeFailed(reason=reason):
            return "runtime_failed", reason
        case RuntimeExited(returncode=code, signal=sig):
            return "runtime_exited", f"code={code} signal={sig}"
    return None
