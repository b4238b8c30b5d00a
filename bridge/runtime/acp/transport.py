"""The agent's stdout as the ACP SDK's transport: read in bulk, each line capped and made
UTF-8-safe, decoded, and a session's streaming updates held and merged.

The SDK's own NDJSON transport reads each line with a `readuntil` of its own and hands it to
the connection, which validates it and runs a task for it. A streaming agent writes tens of
short lines a second per turn; that costs a coroutine resumption, a buffer search and a copy
per line. Here `CappedLines.batch` takes everything the pipe holds (up to `READ_BYTES`) and
splits it in one pass: the reader is resumed once per batch. `BatchedTransport` parses the
lines as the SDK would (`decoded`), but holds the streaming updates for up to `window`
seconds, so a run of one session's chunks reaches the connection as one merged notification
(`Merger`).

**One line has a ceiling.** A line has no size bound on the wire, so one hostile or broken
agent line of a gigabyte would be held in the bridge's memory. A line over the cap is
skipped as it streams by (never held whole), counted and logged by size only; the next
lines still come. One lost update is the cost; the turn goes on, and the stall rules speak
if what was lost was the end.

**Agent text is made encodable here.** Every line passes here, so a line that would decode
to a lone surrogate (`"\\ud800"`) is re-encoded with U+FFFD (`bridge.utf8`), before any of it
reaches the journal, a trace or a Feishu call. The search for one runs over a whole read at
once (nearly always finding nothing).

**What is held, and for how long.** Anything but a streaming update (a request from the
agent, a response, any other notification) is let through at once, with the held updates of
its session before it (a request names its session; a response answers a request of the
bridge's that did, or the session/new that made it): no request or answer ever waits for
the window, and none overtakes an update of its session. One of no known session lets
everything held go first. Another session's held updates need not wait: sessions never
share a turn, and 200 turns starting or ending one by one would otherwise cut every other
turn's window short. A session's first update after a quiet window goes on at once too (the
first sign of life of a turn, or of a tool's result, is never held); what follows it within
the window waits. The window grows when many sessions stream through one process
(`window_for`). `window=0` merges nothing: each message goes on as it is read.

**What merges, at the JSON level** (pure, no I/O). The SDK validates each update into its
models and the core steps once per update. Merging what the bridge would only concatenate
or overwrite anyway (text chunks, thought chunks, a tool call's repeated status) before any
of that makes both happen per batch. The merged message is still an ordinary notification:
the SDK validates it at the edge as before. Why the result is what per-chunk processing
shows:

* `agent_message_chunk` / `agent_thought_chunk` with plain text content (and the same
  `messageId`, if any): the core appends each text, so one chunk of the joined text ends
  the same. An empty text is nothing to the core either way.
* `tool_call_update` of one tool call carrying only `status` and `title`: the core keeps
  the last non-empty title and status (`status_card.note_tool`, the activity), so the
  last non-empty of each is what a merged update must carry. A titled update never joins a
  run that has no title yet: per chunk, the call would be listed from that update on, and
  a status said before it would not count.

Only a message the SDK would accept as it stands merges (every other shape, a malformed
one included, passes through untouched, to be refused or read as today). A run belongs to
one session; another session's updates may sit between its parts (one agent process
serves many sessions, and its stream interleaves them), because sessions never share a
turn. Anything that is not a session update (a request from the agent, a response, another
notification, a line that is not an object) is a barrier for every session, and any other
update of a session ends that session's run: the order within a session, and of every
request and response against all updates, is the stream's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, get_args

import orjson
from acp.meta import CLIENT_METHODS
from acp.schema import ToolCallStatus
from acp.task import MessageSender, TaskSupervisor

from bridge.utf8 import may_hold_surrogate, repaired_json_line

logger = logging.getLogger(__name__)


# --- stdout's lines, in batches -----------------------------------------------------------

# Far above a real agent's largest frame (a big diff or file read is a few MB) and far
# below what would hurt the bridge; a line being read is held up to this, no more.
MAX_LINE_BYTES: Final = 8 * 1024 * 1024
# The most taken off the pipe at once (a few thousand streaming updates).
READ_BYTES: Final = 256 * 1024


class CappedLines:
    """The lines of an agent's stdout (a StreamReader), in batches."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        *,
        label: str,
        cap: int = MAX_LINE_BYTES,
        on_oversize: Callable[[int], None] = lambda size: None,
    ) -> None:
        self._reader = reader
        self._label = label
        self._cap = cap
        self._on_oversize = on_oversize
        self._head: list[bytes] = []  # the start of a line not ended yet, in pieces
        self._head_size = 0
        self._skipping: int | None = None  # bytes of an oversize line dropped so far
        self._ended = False

    async def batch(self) -> list[bytes]:
        """The lines read since the last batch (without their newlines), at least one:
        waits for it. At the end of the stream, the last line if it had no newline, then
        `[]` for good. A read error is raised as it comes."""
        while not self._ended:
            data = await self._reader.read(READ_BYTES)
            if not data:
                self._ended = True
                return self._last()
            lines = self._split(data)
            if lines:
                return lines
        return []

    def _split(self, data: bytes) -> list[bytes]:
        if self._skipping is not None:
            end = data.find(b"\n")
            if end < 0:
                self._skipping += len(data)
                return []
            self._dropped(self._skipping + end + 1)
            self._skipping = None
            data = data[end + 1 :]
        lines = data.split(b"\n")
        tail = lines.pop()  # a line's start, or b"" when the data ends with a newline
        out: list[bytes] = []
        if lines and self._head:  # the line begun in earlier reads ends here
            pieces, size = self._take_head()
            out.extend(self._whole(size + len(lines[0]), [*pieces, lines[0]]))
            del lines[0]
        self._keep_head(tail)
        repair = may_hold_surrogate(data)  # every line left lies within this read
        for line in lines:
            if len(line) > self._cap:
                self._dropped(len(line) + 1)
            else:
                out.append(repaired_json_line(line) if repair else line)
        return out

    def _whole(self, size: int, pieces: list[bytes]) -> list[bytes]:
        """A line read in pieces, joined (and repaired), or nothing when over the cap."""
        if size > self._cap:
            self._dropped(size + 1)
            return []
        return [repaired_json_line(b"".join(pieces))]

    def _keep_head(self, tail: bytes) -> None:
        if not tail:
            return
        if self._head_size + len(tail) > self._cap:
            self._skipping = self._take_head()[1] + len(tail)
            return
        self._head.append(tail)
        self._head_size += len(tail)

    def _last(self) -> list[bytes]:
        if self._skipping is not None:
            self._dropped(self._skipping)
            self._skipping = None
            return []
        pieces, size = self._take_head()
        return self._whole(size, pieces) if pieces else []

    def _take_head(self) -> tuple[list[bytes], int]:
        """The pieces of the line begun and their size; none held after."""
        pieces, size = self._head, self._head_size
        self._head, self._head_size = [], 0
        return pieces, size

    def _dropped(self, size: int) -> None:
        logger.warning("%s: dropped a stdout line of %d bytes (over the cap)", self._label, size)
        self._on_oversize(size)


# --- runs of one session's updates, merged ------------------------------------------------

UPDATE_METHOD: Final = CLIENT_METHODS["session_update"]
CHUNK_KINDS: Final = frozenset({"agent_message_chunk", "agent_thought_chunk"})
TOOL_UPDATE: Final = "tool_call_update"
_STATUSES: Final = frozenset(get_args(ToolCallStatus))
_TOOL_KEYS: Final = frozenset({"sessionUpdate", "toolCallId", "status", "title"})

# (session id, update kind, message id or tool call id): parts of one run share it.
MergeKey = tuple[str, str, str | None]


def merge_key(message: Any) -> MergeKey | None:
    """The run `message` may join, or None when it must stay as it is.

    Every line an agent writes passes here, so the shape is checked by size and lookups (a
    dict of n entries holding n named keys has exactly those keys) rather than by set
    comparisons."""
    if type(message) is not dict or len(message) != 3:
        return None
    try:
        if message["jsonrpc"] != "2.0" or message["method"] != UPDATE_METHOD:
            return None
        params = message["params"]
        if type(params) is not dict or len(params) != 2:
            return None
        session_id, update = params["sessionId"], params["update"]
    except KeyError:
        return None
    if type(session_id) is not str or type(update) is not dict:
        return None
    kind = update.get("sessionUpdate")
    if kind in CHUNK_KINDS:
        return _chunk_key(session_id, kind, update)
    if kind == TOOL_UPDATE:
        return _tool_key(session_id, update)
    return None


def _chunk_key(session_id: str, kind: str, update: dict[str, Any]) -> MergeKey | None:
    content = update.get("content")
    if type(content) is not dict or len(content) != 2:
        return None
    if content.get("type") != "text" or type(content.get("text")) is not str:
        return None
    size = len(update)
    if size == 2:  # sessionUpdate and content
        return (session_id, kind, None)
    message_id = update.get("messageId")
    if size != 3 or type(message_id) is not str:
        return None
    return (session_id, kind, message_id)


def _tool_key(session_id: str, update: dict[str, Any]) -> MergeKey | None:
    if not update.keys() <= _TOOL_KEYS:
        return None
    tool_call_id = update.get("toolCallId")
    if type(tool_call_id) is not str:
        return None
    if "status" in update and update["status"] not in _STATUSES:
        return None
    if "title" in update and type(update["title"]) is not str:
        return None
    return (session_id, TOOL_UPDATE, tool_call_id)


def update_session(message: Any) -> str | None:
    """The session of a `session/update` notification (of any shape the SDK might take),
    or None for everything else."""
    if type(message) is not dict or "id" in message or message.get("method") != UPDATE_METHOD:
        return None
    params = message.get("params")
    session_id = params.get("sessionId") if type(params) is dict else None
    return session_id if type(session_id) is str else None


@dataclass
class _Run:
    key: MergeKey
    at: int  # its place in the output
    first: dict[str, Any]
    titled: bool  # some part has a non-empty title
    parts: list[dict[str, Any]] = field(default_factory=list)  # updates after the first

    def accepts(self, key: MergeKey, update: dict[str, Any]) -> bool:
        return key == self.key and (self.titled or not update.get("title"))

    def merged(self) -> dict[str, Any]:
        first = self.first["params"]["update"]
        if self.key[1] == TOOL_UPDATE:
            update = dict(first)
            for part in self.parts:
                for name in ("status", "title"):
                    if part.get(name):
                        update[name] = part[name]
        else:
            texts = [first["content"]["text"]]
            texts += [part["content"]["text"] for part in self.parts]
            update = {**first, "content": {"type": "text", "text": "".join(texts)}}
        params = {"sessionId": self.key[0], "update": update}
        return {"jsonrpc": "2.0", "method": UPDATE_METHOD, "params": params}


class Merger:
    """`merge`, one message at a time: `add` each as it is read, `take` the merged ones."""

    def __init__(self) -> None:
        self._out: list[Any] = []
        self._runs: list[_Run] = []
        self._open: dict[str, _Run] = {}  # each session's run that may still grow

    def __bool__(self) -> bool:
        return bool(self._out)

    def add(self, key: MergeKey | None, message: Any) -> None:
        """`message` with its `merge_key` (computed once, as it was read)."""
        if key is None:
            session_id = update_session(message)
            if session_id is None:
                self._open.clear()
            else:
                self._open.pop(session_id, None)
            self._out.append(message)
            return
        run = self._open.get(key[0])
        update = message["params"]["update"]
        if run is not None and run.accepts(key, update):
            run.parts.append(update)
            return
        run = _Run(key, len(self._out), message, titled=bool(update.get("title")))
        self._runs.append(run)
        self._open[key[0]] = run
        self._out.append(message)

    def take_session(self, session_id: str) -> list[Any]:
        """What was added for `session_id` since the last take, in order, runs merged; the
        other sessions' messages stay, in their order."""
        starts = {run.at: run for run in self._runs}
        mine: list[Any] = []
        rest: list[Any] = []
        runs: list[_Run] = []
        for at, message in enumerate(self._out):
            run = starts.get(at)
            owner = run.key[0] if run is not None else update_session(message)
            if owner == session_id:
                mine.append(run.merged() if run is not None and run.parts else message)
                continue
            if run is not None:
                run.at = len(rest)
                runs.append(run)
            rest.append(message)
        self._out, self._runs = rest, runs
        self._open.pop(session_id, None)
        return mine

    def take(self) -> list[Any]:
        """Everything added since the last `take`, in order, each run merged into its first
        place."""
        out = self._out
        for run in self._runs:
            if run.parts:
                out[run.at] = run.merged()
        self._out, self._runs = [], []
        self._open.clear()
        return out


def merge(messages: Iterable[tuple[MergeKey | None, Any]]) -> list[Any]:
    """The messages, in order, with each session's runs merged into their first place.

    Each message comes with its `merge_key` (computed once, as it was read)."""
    merger = Merger()
    for key, message in messages:
        merger.add(key, message)
    return merger.take()


def keyed(messages: Sequence[Any]) -> list[tuple[MergeKey | None, Any]]:
    return [(merge_key(message), message) for message in messages]


# --- the transport ------------------------------------------------------------------------

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


class StdinWriter(Protocol):
    """The agent's stdin, as the SDK's sender and `shutdown` use it (a `StreamWriter`)."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


class BatchedTransport:
    """The SDK's `Transport` (send, receive, close) over an agent's stdin and stdout."""

    def __init__(
        self,
        lines: CappedLines,
        writer: StdinWriter,
        *,
        now: Callable[[], float],
        window: float = DEFAULT_WINDOW_SECONDS,
        label: str = "agent",
    ) -> None:
        """`now`: the bridge's clock (`Clock.now`), on which a session's quiet spell is
        measured."""
        self._lines = lines
        self._loop = asyncio.get_running_loop()  # made by the spawning coroutine
        self._now = now
        self._window = window
        self.hold = window  # the window now, grown with the sessions streaming (window_for)
        self._tasks = TaskSupervisor(source=f"{label} transport")
        self._sender = MessageSender(writer, self._tasks)  # type: ignore[arg-type]
        self._held = Merger()  # what waits for the window, merged as it comes
        self._holding: set[str] = set()  # sessions with updates held
        self._recent: dict[str, float] = {}  # sessions let through within the window: when
        self._ready: deque[Any] = deque()
        # The bridge's requests of a session, by id: the session, or _NEW_SESSION for a
        # session/new (its answer names the session).
        self._asked: dict[int | str, str] = {}
        self._flush_at: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: BaseException | None = None
        # Set once the connection has taken every message read (the end of the stream).
        self.received: asyncio.Future[None] = self._loop.create_future()
        self.lines_read = 0  # messages parsed off stdout
        self.messages_out = 0  # messages handed to the connection, merged ones counted once
        self._reader = self._tasks.create(self._read(), name=f"{label} stdout")

    async def send(self, message: dict[str, Any]) -> None:
        # Read back only by an answer that takes its session's held updates: with no window
        # nothing is held, and nothing would take the entry.
        asked = _session_asked(message) if self._window > 0 else None
        if asked is not None:
            self._asked[message["id"]] = asked
        await self._sender.send(message)

    async def receive(self) -> Any:
        """The next message, or None at the end of the stream (what the SDK's transport
        returns; a read error is raised once everything before it was received)."""
        while not self._ready:
            if self._ended:
                if not self.received.done():
                    self.received.set_result(None)
                if self._error is not None:
                    error, self._error = self._error, None
                    raise error
                return None
            self._waiter = self._loop.create_future()
            await self._waiter
        self.messages_out += 1
        return self._ready.popleft()

    async def close(self) -> None:
        if not self.received.done():
            self.received.set_result(None)
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
        if session not in self._holding and session not in self._recent:
            # The first word after a quiet spell goes on at once (a sign of life is never
            # late); other sessions' held updates may stay behind it, as in `merge`.
            self._recent[session] = self._now()
            self._ready.append(message)
            self._wake()
            return
        self._held.add(key, message)
        self._holding.add(session)
        if self._flush_at is None:
            self._flush_at = self._loop.call_later(self.hold, self._flush)

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
        asked = self._asked.pop(request_id, None)
        if asked == _NEW_SESSION:
            # The answer to a session/new is the new session's: nothing held of another
            # session need go before it (while turns start one after another, a flush of
            # everything held at each would cut every streaming turn's window short).
            result = message.get("result")
            session = result.get("sessionId") if type(result) is dict else None
            return session if type(session) is str else None
        return asked

    def _flush(self) -> None:
        self._cancel_flush()
        now = self._now()
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


_NEW_SESSION = "session/new"  # the request whose answer names a session of its own


def _session_asked(message: dict[str, Any]) -> str | None:
    """The session a request the bridge sends is about (`session/prompt`, `load`, …), or
    _NEW_SESSION for the request that makes one."""
    if "id" not in message or "method" not in message:
        return None
    if message["method"] == _NEW_SESSION:
        return _NEW_SESSION
    return _named_session(message)


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
