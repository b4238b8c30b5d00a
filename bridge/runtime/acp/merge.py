"""Runs of one session's streaming updates, merged at the JSON level. Pure, no I/O.

A coding agent streams tens of `session/update` notifications a second per turn; the SDK
validates each one into its models and the core steps once per update. Merging what the
bridge would only concatenate or overwrite anyway (text chunks, thought chunks, a tool
call's repeated status) before any of that makes both happen per batch. The merged
message is still an ordinary notification: the SDK validates it at the edge as before.

What may merge, and why the result is what per-chunk processing shows:

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, get_args

from acp.meta import CLIENT_METHODS
from acp.schema import ToolCallStatus

UPDATE_METHOD: Final = CLIENT_METHODS["session_update"]
CHUNK_KINDS: Final = frozenset({"agent_message_chunk", "agent_thought_chunk"})
TOOL_UPDATE: Final = "tool_call_update"
_STATUSES: Final = frozenset(get_args(ToolCallStatus))
_MESSAGE_KEYS: Final = frozenset({"jsonrpc", "method", "params"})
_PARAMS_KEYS: Final = frozenset({"sessionId", "update"})
_CHUNK_KEYS: Final = frozenset({"sessionUpdate", "content", "messageId"})
_TOOL_KEYS: Final = frozenset({"sessionUpdate", "toolCallId", "status", "title"})

# (session id, update kind, message id or tool call id): parts of one run share it.
MergeKey = tuple[str, str, str | None]


def merge_key(message: Any) -> MergeKey | None:
    """The run `message` may join, or None when it must stay as it is."""
    if type(message) is not dict or message.keys() != _MESSAGE_KEYS:
        return None
    if message["jsonrpc"] != "2.0" or message["method"] != UPDATE_METHOD:
        return None
    params = message["params"]
    if type(params) is not dict or params.keys() != _PARAMS_KEYS:
        return None
    session_id, update = params["sessionId"], params["update"]
    if type(session_id) is not str or type(update) is not dict:
        return None
    kind = update.get("sessionUpdate")
    if kind in CHUNK_KINDS:
        return _chunk_key(session_id, kind, update)
    if kind == TOOL_UPDATE:
        return _tool_key(session_id, update)
    return None


def _chunk_key(session_id: str, kind: str, update: dict[str, Any]) -> MergeKey | None:
    if not update.keys() <= _CHUNK_KEYS:
        return None
    content = update.get("content")
    if type(content) is not dict or content.keys() != {"type", "text"}:
        return None
    if content["type"] != "text" or type(content["text"]) is not str:
        return None
    message_id = update.get("messageId")
    if "messageId" in update and type(message_id) is not str:
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

    def add(self, update: dict[str, Any]) -> None:
        self.parts.append(update)

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
            run.add(update)
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
