"""`Prompting`: prompts (and what they carry), cancels and tails, the `AgentRuntime` port's
turn calls, which `AcpRuntime` hands to it.

* **Cancel in place.** `/stop` sends `session/cancel`; once the cancelled prompt's own result
  is back, the next prompt goes to the same process and session. Only an agent known to
  leave a tail (`cancel_tails`) is restarted and the session reloaded first (or, when it
  cannot load sessions, the session let go for a new one: one turn behind for good costs
  more); a cancel that never settles is ended by the core, which kills the agent
  (`abandon`; it restarts on demand).
* **A tail is never an answer.** The first prompt after a cancel is watched: answered by
  the cancelled turn's leftover result, the agent is restarted, the session reloaded and
  the prompt sent again, so the bridge is never one turn behind (logged, and counted in
  `cancel_tails`). On a process another chat's turn keeps busy, the restart waits for
  those turns (what the old process streams for the prompt meanwhile is dropped: it runs
  again). Only an agent that cannot load sessions keeps the turn open (`absorb_tail`).
* **What a prompt carries** (`prompt_blocks`): the user's text, and the images and files
  they sent. An image goes as ACP image content when the agent declares
  `promptCapabilities.image`; anything else (and an image for an agent without it) is put
  in the session's folder, under `.feishu/inbox/<message>/`, and linked (`resource_link`).
  A voice message's audio (its words are the text) goes as ACP audio content to an agent
  that declares `promptCapabilities.audio`, and not at all to one that does not. The name
  was sanitized by the engine; the target is checked once more to lie inside the folder.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from acp.exceptions import RequestError
from acp.schema import (
    AudioContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
)
from pydantic import ValidationError

from bridge.paths import safe_name, within
from bridge.runtime.acp.client import PendingRequests
from bridge.runtime.acp.pool import describe_error
from bridge.runtime.acp.process import AgentProcess
from bridge.runtime.acp.sessions import (
    AcpSession,
    AcpTurn,
    AfterCancel,
    SessionLost,
    Sessions,
)
from bridge.runtime.events import (
    AnswerRewound,
    PromptSent,
    RuntimeExited,
    RuntimeFailed,
    StopReason,
    TurnEnded,
)
from bridge.runtime.port import EventSink, PromptFile, RuntimeUnavailable

logger = logging.getLogger(__name__)


class Prompting:
    """One prompt at a time per session, over the sessions' processes. `exited`: the event
    ending a turn whose process died; `on_change`: told when a turn begins or ends."""

    def __init__(
        self,
        sessions: Sessions,
        requests: PendingRequests,
        *,
        exited: Callable[[AgentProcess, str], RuntimeExited],
        shutdown_timeout: float,
        on_change: Callable[[], None],
    ) -> None:
        self._sessions = sessions
        self._requests = requests
        self._exited = exited
        self._shutdown_timeout = shutdown_timeout
        self._on_change = on_change
        self.cancel_tails = 0  # prompts answered by a cancelled turn's leftover result

    async def prompt(
        self, session_id: str, text: str, sink: EventSink, files: Sequence[PromptFile] = ()
    ) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionLost(f"unknown session {session_id}; open a session first")
        # One prompt at a time from its call on: a stopped round's prompt still waiting for
        # its agent (a slow start) when the next round's comes would otherwise go out beside
        # it (seed 49495), the two turns on one session at once.
        async with session.prompt_lock:
            await self._prompt(session, text, sink, files)

    async def _prompt(
        self, session: AcpSession, text: str, sink: EventSink, files: Sequence[PromptFile]
    ) -> None:
        session_id = session.session_id
        process = await self._sessions.past_hold(
            session, await self._sessions.ensure_bound(session)
        )
        how = AfterCancel.CLEAN
        if session.after_cancel:
            process, how = await self._sessions.settle_after_cancel(session, process)
        if self._sessions.get(session_id) is not session:
            # Let go while the prompt waited for its agent (a restart's reload of it was
            # refused, and the conversation moved to a new session): sent now, it would run
            # where no cancel finds it (seed 76162: a recalled round's prompt ran whole).
            raise SessionLost(f"session {session_id} was let go while its prompt waited")
        turn = AcpTurn(session_id, sink, suspect_tail=how is AfterCancel.WATCH)
        self._sessions.turn_began(session, turn)
        session.prompts += 1
        try:
            self._on_change()  # a slot's running turns
            if how is AfterCancel.RESTART_WHEN_FREE:
                restarted = await self._restart_when_free(
                    session, process, turn, "after a cancelled turn"
                )
                if restarted is None:
                    return  # stopped while it waited, or the agent could not come back
                process = restarted
            turn.emit(PromptSent(session_id))  # the agent's silence counts from here
            if await self._run(process, session, turn, text, files):
                await self._after_tail(process, session, turn, text, files)
        finally:
            self._sessions.turn_ended(session, turn)
            turn.ended.set()
            session.after_cancel = turn.cancel_requested
            self._requests.cancel_session(session_id)
            self._on_change()

    async def _run(
        self,
        process: AgentProcess,
        session: AcpSession,
        turn: AcpTurn,
        text: str,
        files: Sequence[PromptFile],
    ) -> bool:
        """The prompt on `process`; True when its answer was a tail (the turn still open)."""
        images, audio = process.accepts_images, process.accepts_audio
        blocks = prompt_blocks(text, files, images=images, audio=audio, cwd=session.cwd)
        return await run_prompt(
            process,
            turn,
            blocks,
            exited=self._exited,
            shutdown_timeout=self._shutdown_timeout,
        )

    async def _restart_when_free(
        self, session: AcpSession, process: AgentProcess, turn: AcpTurn, why: str
    ) -> AgentProcess | None:
        """An agent that leaves a tail after a cancel, on a process another chat's turn keeps
        busy: prompted there, it would answer with the tail and stay one turn behind each
        time the process is busy. The prompt waits (the user sees the turn running) until
        the other turns end, then the agent is restarted and the session reloaded. None,
        the turn finished, when it was stopped meanwhile or the agent did not come back.
        A prompt the tail already answered waits the same way: its run on the old process
        is shown nothing of (`moving`), as it is sent again."""
        turn.moving = True  # it runs nothing while it waits: not a turn the others wait for
        try:
            if not await self._sessions.until_free(process, turn):
                turn.finish(TurnEnded(session.session_id, StopReason.CANCELLED))
                return None
            restarted = await self._sessions.restart(session, process, why)
        except RuntimeUnavailable as exc:
            turn.finish(RuntimeFailed(session.session_id, reason=exc.reason[:80]))
            return None
        finally:
            turn.moving = False
            turn.released = None
            self._sessions.release_hold(process)
        if turn.cancel_requested:  # /stop while the agent restarted
            turn.finish(TurnEnded(session.session_id, StopReason.CANCELLED))
            return None
        return restarted

    async def _after_tail(
        self,
        process: AgentProcess,
        session: AcpSession,
        turn: AcpTurn,
        text: str,
        files: Sequence[PromptFile],
    ) -> None:
        """The prompt after a cancel was answered by the cancelled turn's leftover result:
        the agent now runs this prompt with its result owed to the next one. Never one turn
        behind: restart the agent, reload the session and send the prompt again (what the
        old process still streams is dropped), once no other chat's turn runs on the
        process (`_restart_when_free`). Only an agent that cannot load sessions keeps the
        turn open instead (`absorb_tail`: a restart would lose the session). Kept open, the
        round shows its answer, then waits for a result owed to the next prompt until the
        stall rules end it as unresponsive."""
        info = process.agent_info
        self.cancel_tails += 1
        logger.warning(
            "agent[%d] (%s) answered the first prompt after a cancel with the cancelled"
            " turn's leftover result (session %s)",
            process.slot,
            info.name[:64] if info else "unknown",
            session.session_id,
        )
        self._sessions.tails.saw_tail(info)
        if not process.can_reopen:
            await absorb_tail(process, turn, exited=self._exited)
            return
        restarted = await self._restart_when_free(session, process, turn, "after a leftover result")
        if restarted is None:
            return  # stopped, or the agent could not come back
        turn.suspect_tail = False
        # What the first run streamed after the leftover, read in the same batch, was shown
        # before the leftover was known for one: the run sent again says it anew (seed 82280).
        turn.emit(AnswerRewound(session.session_id))
        await self._run(restarted, session, turn, text, files)

    async def cancel(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        turn = session.turn if session else None
        if session is None or turn is None or turn.done:
            return
        turn.cancel_requested = True
        self._requests.cancel_session(session_id)
        if turn.released is not None and not turn.released.done():
            turn.released.set_result(None)  # an absorbed tail: nothing more will come
        if session.process.alive:
            # The turn's `session/prompt` is handed to the connection by a task started just
            # before (`run_prompt`); one pass of the loop lets it go first. A cancel that
            # overtook its prompt on the wire would cancel nothing (the agent has no prompt
            # running yet), and the turn would run on until the bridge kills the agent.
            await asyncio.sleep(0)
            with contextlib.suppress(ConnectionError):
                await session.process.cancel(session_id)

    async def abandon(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        turn = session.turn if session else None
        if session is None or turn is None or turn.done:
            return  # the agent did answer the cancel after all
        process = session.process
        logger.warning(
            "agent[%d] pid %d never confirmed a cancel; killing it (it restarts on demand)",
            process.slot,
            process.pid,
        )
        process.signal_group(signal.SIGKILL)


# --- what a prompt carries ----------------------------------------------------------------

INBOX = Path(".feishu") / "inbox"
VOICE = "voice"  # a voice message heard by the engine (bridge/core/voice.py)


def prompt_blocks(
    text: str, files: Sequence[PromptFile], *, images: bool, cwd: str, audio: bool = False
) -> list[Any]:
    blocks: list[Any] = []
    if text.strip():
        blocks.append(TextContentBlock(type="text", text=text))
    for file in files:
        if file.kind == VOICE:
            if audio:
                data = base64.b64encode(file.path.read_bytes()).decode("ascii")
                blocks.append(AudioContentBlock(type="audio", data=data, mime_type=file.mime))
            continue
        if file.kind == "image" and images:
            data = base64.b64encode(file.path.read_bytes()).decode("ascii")
            blocks.append(ImageContentBlock(type="image", data=data, mime_type=file.mime))
            continue
        target = _inbox_path(Path(cwd), file)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file.path, target)
        blocks.append(
            ResourceContentBlock(
                type="resource_link",
                uri=target.as_uri(),
                name=file.name,
                mime_type=file.mime or None,
                size=target.stat().st_size,
            )
        )
    return blocks or [TextContentBlock(type="text", text="")]


def _inbox_path(cwd: Path, file: PromptFile) -> Path:
    folder = (cwd / INBOX / safe_name(file.message_id)).resolve()
    target = (folder / safe_name(file.name)).resolve()
    root = cwd.resolve()
    if target == root or not within(target, root):
        raise ValueError("an attachment would land outside the workspace")
    return target


async def run_prompt(
    process: AgentProcess,
    turn: AcpTurn,
    blocks: list[Any],
    *,
    exited: Callable[[AgentProcess, str], RuntimeExited],
    shutdown_timeout: float,
) -> bool:
    """Send `session/prompt` and end the turn by its answer, or by the process's death.
    Returns True, the turn left open, when the answer was a tail (`AcpTurn.suspect_tail`):
    the caller recovers.

    An error answer to a cancelled prompt counts as the `cancelled` stop reason (the spec
    asks agents not to do that, but some do)."""

    async def answer() -> Any:
        response = await process.prompt(turn.session_id, blocks)
        # Counted as the answer is read: an update read after it in the same batch (this
        # prompt's first chunk, after a tail) reaches the turn before this task resumes.
        turn.answered_after = turn.updates
        return response

    request = asyncio.ensure_future(answer())
    try:
        watched: list[asyncio.Future[Any]] = [request, process.exited]
        await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        request.cancel()
        raise
    if request.done() and _is_stale_tail(turn, request):
        return True
    if not request.done():
        # The process died first; the exit callback already ended the turn.
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await request
        turn.finish(exited(process, turn.session_id))
        return False
    try:
        response = request.result()
    except RequestError as exc:
        if turn.cancel_requested:
            turn.finish(TurnEnded(turn.session_id, StopReason.CANCELLED))
        else:
            turn.finish(RuntimeFailed(turn.session_id, reason=describe_error(exc)))
    except ConnectionError:
        # stdout closed: the exit code follows shortly (or we kill a lingering process).
        await process.wait_exit(shutdown_timeout)
        turn.finish(exited(process, turn.session_id))
    except ValidationError:
        turn.finish(RuntimeFailed(turn.session_id, reason="invalid session/prompt answer"))
    else:
        turn.finish(TurnEnded(turn.session_id, StopReason(response.stop_reason)))
    return False


async def absorb_tail(
    process: AgentProcess,
    turn: AcpTurn,
    *,
    exited: Callable[[AgentProcess, str], RuntimeExited],
) -> None:
    """A tail on a process that cannot be restarted: keep the turn open (its updates still
    count) until the user or the bridge cancels it, or the process dies; the core's stall
    rules apply."""
    released = asyncio.get_running_loop().create_future()
    turn.released = released
    if turn.cancel_requested:
        released.set_result(None)
    await asyncio.wait([released, process.exited], return_when=asyncio.FIRST_COMPLETED)
    if released.done():
        turn.finish(TurnEnded(turn.session_id, StopReason.CANCELLED))
    else:
        turn.finish(exited(process, turn.session_id))


def _is_stale_tail(turn: AcpTurn, request: asyncio.Future[Any]) -> bool:
    if not turn.suspect_tail or turn.answered_after or turn.cancel_requested:
        return False
    if request.cancelled() or request.exception() is not None:
        return False
    return bool(request.result().stop_reason == StopReason.END_TURN.value)
