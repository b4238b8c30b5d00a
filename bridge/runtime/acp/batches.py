"""Agent stdout read in batches: the SDK connection's transport, with runs merged.

The SDK's own NDJSON transport reads each line with a `readuntil` of its own and hands it to
the connection, which validates it and runs a task for it. This transport reads the same
lines in bulk (`CappedLines`: the ceiling and the surrogate repair too) and parses them as
the SDK would (`decoded`), but holds the streaming updates for up to `window` seconds, so a
run of one session's chunks reaches the connection as one merged notification (`merge.py`).

Anything else (a request from the agent, a response, any other notification) is let through
at once, with the held updates of its session before it (a request names its session; a
response answers a request of the bridge's that did): no request or answer ever waits for
the window, and none overtakes an update of its session. One of no known session lets
everything held go first. Another session's held updates need not wait: sessions never
share a turn, and 200 turns ending one by one would otherwise cut every other turn's window
short. A session's first update after a quiet window goes on at once too (the first sign
of life of a turn, or of a tool's result, is never held); what follows it within the window
waits. The window grows when many sessions stream through one process (`window_for`).

`window=0` merges nothing: each message goes on as it is read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any

import orjson
from acp.task import MessageSender, TaskSupervisor

from bridge.runtime.acp.lines import CappedLines
from bridge.runtime.acp.merge import MergeKey, Merger, merge_key, update_session

logger = logging.getLogger(__name__)

# Long enough that a streaming turn's chunks merge by the dozen (they come 30-80 a second),
# short against what a user notices: a card is refreshed at most twice a second anyway.
DEFAULT_WINDOW_SECONDS = 0.2
# With many turns streaming at once, Feishu's per-API budget (40 changes a second after its
# margin) refreshes each one's card or line only every N/40 seconds: holding their updates
# longer then costs nothing a user can see, and saves CPU per update (bench/stream_bench.py:
# at 200 turns, 0.5 s instead of 0.2 s is a tenth less; 1 s gains nothing more).
BUSY_SESSIONS = 40  # sessions streaming through one agent process from which the hold grows
MAX_WINDOW_SECONDS = 0.5


def window_for(sessions: int, base: float) -> float:
    """How long updates are held while `sessions` stream through one process: `base` up to
    BUSY_SESSIONS, then in proportion, at most MAX_WINDOW_SECONDS (never less than base)."""
    if base <= 0:
        return base
    return max(base, min(MAX_WINDOW_SECONDS, base * sessions / BUSY_SESSIONS))


class BatchedTransport:
    """The SDK's `Transport` (send, receive, close) over an agent's stdin and stdout."""

    def __init__(
        self,
        lines: CappedLines,
        writer: asyncio.StreamWriter,
        *,
        window: float = DEFAULT_WINDOW_SECONDS,
        label: str = "agent",
    ) -> None:
        self._lines = lines
        self._loop = asyncio.get_running_loop()  # made by the spawning coroutine
        self._window = window
        self.hold = window  # the window now, grown with the sessions streaming (window_for)
        self._tasks = TaskSupervisor(source=f"{label} transport")
        self._sender = MessageSender(writer, self._tasks)
        self._held = Merger()  # what waits for the window, merged as it comes
        self._holding: set[str] = set()  # sessions with updates held
        self._recent: dict[str, float] = {}  # sessions let through within the window: when
        self._ready: deque[Any] = deque()
        self._asked: dict[int | str, str] = {}  # the bridge's requests of a session: by id
        self._flush_at: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: BaseException | None = None
        self.lines_read = 0  # messages parsed off stdout
        self.messages_out = 0  # messages handed to the connection, merged ones counted once
        self._reader = self._tasks.create(self._read(), name=f"{label} stdout")

    async def send(self, message: dict[str, Any]) -> None:
        asked = _session_asked(message)
        if asked is not None:
            self._asked[message["id"]] = asked
        await self._sender.send(message)

    async def receive(self) -> Any:
        """The next message, or None at the end of the stream (what the SDK's transport
        returns; a read error is raised once everything before it was received)."""
        while not self._ready:
            if self._ended:
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                return None
            self._waiter = self._loop.create_future()
            await self._waiter
        self.messages_out += 1
        return self._ready.popleft()

    async def close(self) -> None:
        self._cancel_flush()
        self._reader.cancel()
        await self._sender.close()
        await self._tasks.shutdown()

    # -- the reading side ---------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            while lines := await self._lines.batch():
                for line in lines:
                    if not line or line.isspace():
                        continue
                    try:
                        key, message = decoded(line)
                    except Exception:
                        # As the SDK's own transport does: logged and skipped.
                        logger.exception("Error parsing JSON-RPC message")
                        continue
                    self._take(key, message)
        except Exception as exc:
            self._error = exc
        finally:
            self._flush()
            self._ended = True
            self._wake()

    def _take(self, key: MergeKey | None, message: Any) -> None:
        self.lines_read += 1
        if self._window <= 0:
            self._ready.append(message)
            self._wake()
            return
        session = key[0] if key is not None else update_session(message)
        if session is None:  # a request, a response: never held, nothing passes it
            owner = self._owner(message)
            if owner is None:  # of no session, or of one not known: everything goes first
                self._held.add(key, message)
                self._flush()
                return
            # Of one session (the answer to its prompt, a permission it asks): that
            # session's held updates go first; the others' need not wait for it.
            self._ready.extend(self._held.take_session(owner))
            self._holding.discard(owner)
            self._ready.append(message)
            self._wake()
            return
        loop = self._loop
        if session not in self._holding and session not in self._recent:
            # The first word after a quiet spell goes on at once (a sign of life is never
            # late); other sessions' held updates may stay behind it, as in `merge`.
            self._recent[session] = loop.time()
            self._ready.append(message)
            self._wake()
            return
        self._held.add(key, message)
        self._holding.add(session)
        if self._flush_at is None:
            self._flush_at = loop.call_later(self.hold, self._flush)

    def _owner(self, message: Any) -> str | None:
        """The session a request from the agent or a response to the bridge belongs to,
        when it names one (a request) or answers a request that did (a response)."""
        if type(message) is not dict or "id" not in message:
            return None
        if "method" in message:
            return _named_session(message)
        request_id = message["id"]
        if type(request_id) not in (int, str):
            return None
        return self._asked.pop(request_id, None)

    def _flush(self) -> None:
        self._cancel_flush()
        now = self._loop.time()
        self._recent = {s: at for s, at in self._recent.items() if now - at < self.hold}
        self._recent.update(dict.fromkeys(self._holding, now))
        self._holding.clear()
        self.hold = window_for(len(self._recent), self._window)
        if self._held:
            self._ready.extend(self._held.take())
            self._wake()

    def _cancel_flush(self) -> None:
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _session_asked(message: dict[str, Any]) -> str | None:
    """The session a request the bridge sends is about (`session/prompt`, `load`, …)."""
    return _named_session(message) if "id" in message and "method" in message else None


def _named_session(message: dict[str, Any]) -> str | None:
    """The `sessionId` a request's params name, if any."""
    params = message.get("params")
    session = params.get("sessionId") if type(params) is dict else None
    return session if type(session) is str else None


def decoded(line: bytes) -> tuple[MergeKey | None, Any]:
    """A JSON line decoded as the SDK's `json.loads` decodes it, with its `merge_key`.

    orjson decodes at a quarter of the cost, and a streaming update that may merge holds
    only strings, where the two agree. Everything else is decoded again by `json` (orjson
    makes an integer past 64 bits a float; what it refuses, like NaN, `json` may take)."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None, json.loads(line)
    key = merge_key(message)
    return (key, message) if key is not None else (None, json.loads(line))
