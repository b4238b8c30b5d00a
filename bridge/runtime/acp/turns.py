"""One prompt on one session: its events go to the engine's sink, and exactly one terminal
event ends it (the first wins; later ones are dropped)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acp.exceptions import RequestError
from acp.schema import ToolCallProgress, ToolCallStart, ToolCallUpdate
from pydantic import ValidationError

from bridge.runtime.acp.pool import describe_error
from bridge.runtime.acp.process import AgentProcess
from bridge.runtime.events import RuntimeExited, RuntimeFailed, StopReason, TurnEnded, TurnEvent
from bridge.runtime.port import EventSink

logger = logging.getLogger(__name__)


@dataclass
class AcpTurn:
    session_id: str
    sink: EventSink
    done: bool = False
    cancel_requested: bool = False
    updates: int = 0  # session updates relayed for this prompt
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
    request = asyncio.ensure_future(process.prompt(turn.session_id, blocks))
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
    if not turn.suspect_tail or turn.updates or turn.cancel_requested:
        return False
    if request.cancelled() or request.exception() is not None:
        return False
    return bool(request.result().stop_reason == StopReason.END_TURN.value)
