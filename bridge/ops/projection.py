"""Versioned runtime-state snapshots of every conversation, and their SSE fan-out.

Every frame (a conversation's new snapshot, a session's end, the agent processes' new view,
a fault) bumps a per-process monotonic `revision` under a `projection_epoch` that is new at
each start, so an observer can drop stale or duplicate frames (and notice a restart). Its
SSE id is `<epoch>:<revision>`.

The stream (`open` then `next`):

- *Subscribe, then snapshot.* A subscription is registered before its first frames are
  chosen, so a frame published meanwhile is queued, never lost; queued frames the start
  already covers (revision ≤ `seen`) are skipped, never sent twice.
- *Replay.* The last `ring_size` frames are kept. A reconnect whose `Last-Event-ID` is of this
  epoch and still in the ring gets exactly the frames it missed and no snapshot; any other
  (too old, another epoch, malformed) gets a fresh `snapshot` frame.
- *Eviction.* Subscriber queues are bounded: one that overflows is ended with a
  `client_evicted` frame (no id, so the client's last id stays the last frame it read) and
  may reconnect with `Last-Event-ID`. A slow reader never slows the bridge down.
- *Terminal frames.* `session_closed` / `session_died` end one conversation's agent session
  (the stream goes on); `end` ends every stream at shutdown.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bridge.runtime.port import AgentRuntime

# Frames that end one subscriber's stream.
STREAM_TERMINALS: Final = frozenset({"end", "client_evicted"})
# A conversation's agent session ended: closed on purpose, or lost with its agent.
SESSION_CLOSED: Final = "session_closed"
SESSION_DIED: Final = "session_died"
# Faults read from conversations' snapshots: a turn that ended this way is a system problem.
FAULT_OUTCOMES: Final = frozenset({"failed", "interrupted", "timed_out"})
FAULT_STATES: Final = frozenset({"recovering", "stale"})
DISPLAY_NAME: Final = "display_name"


@dataclass(frozen=True)
class Frame:
    event: str
    data: dict[str, Any]
    revision: int | None = None  # None: not in the ring (a snapshot or a stream terminal)
    id: str | None = None  # the SSE id; None leaves the client's last id as it was


@dataclass(eq=False)  # identity, so subscriptions can live in a set
class Subscription:
    queue: asyncio.Queue[Frame]
    client_id: str | None = None  # the observer's X-Bridge-Client-Id, when it sent one
    seen: int = 0  # frames up to this revision were sent (or covered by the snapshot)
    ended: bool = False  # its terminal frame is queued; nothing more is offered


@dataclass
class Projection:
    epoch: str  # a new id at each start (the bridge's `Ids`): observers see the restart
    clock: Callable[[], float]  # the wall clock: a fault's time, a conversation's ages
    instance_id: str = ""  # BRIDGE_INSTANCE_ID: which of several instances this view is of
    queue_size: int = 256
    ring_size: int = 1024
    fault_limit: int = 50
    revision: int = 0
    _states: dict[str, dict[str, Any]] = field(default_factory=dict)
    _raw: dict[str, dict[str, Any]] = field(default_factory=dict)  # as published, no name
    _names: dict[str, str] = field(default_factory=dict)
    _processes: list[dict[str, Any]] = field(default_factory=list)  # every app's, in order
    _app_processes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _faults: deque[dict[str, Any]] = field(default_factory=deque)
    _ring: deque[Frame] = field(default_factory=deque)
    _subscribers: set[Subscription] = field(default_factory=set)

    # -- what is published --------------------------------------------------------------------

    def publish(self, conversation_key: str, snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
        """Store a conversation's snapshot; unchanged snapshots are not re-published."""
        self._raw[conversation_key] = dict(snapshot)
        shown = dict(snapshot)
        name = self._names.get(conversation_key)
        if name:
            shown[DISPLAY_NAME] = name
        current = self._states.get(conversation_key)
        if current is not None and current["snapshot"] == shown:
            return None
        before = current["snapshot"] if current is not None else {}
        frame = self._emit("runtime_state", {"conversation": conversation_key, "snapshot": shown})
        self._states[conversation_key] = frame.data
        self._note_faults(conversation_key, before, shown)
        return frame.data

    def set_display_name(self, conversation_key: str, name: str | None) -> None:
        """The operator's name for a conversation (None or "" clears it); shown in its
        snapshot from now on, re-published at once when it has one."""
        if name:
            self._names[conversation_key] = name
        else:
            self._names.pop(conversation_key, None)
        raw = self._raw.get(conversation_key)
        if raw is not None:
            self.publish(conversation_key, raw)

    def display_name(self, conversation_key: str) -> str | None:
        return self._names.get(conversation_key)

    def display_names(self) -> dict[str, str]:
        return dict(self._names)

    def session_ended(
        self, kind: str, conversation_key: str, session_id: str, reason: str
    ) -> dict[str, Any]:
        """A conversation's agent session is over: `session_closed` (on purpose: /new, a
        move, the operator) or `session_died` (lost with its agent); a death is a fault."""
        if kind not in (SESSION_CLOSED, SESSION_DIED):
            raise ValueError(f"not a session terminal: {kind}")
        data = {"conversation": conversation_key, "session_id": session_id, "reason": reason}
        frame = self._emit(kind, data)
        if kind == SESSION_DIED:
            self.fault(SESSION_DIED, conversation_key, reason)
        return frame.data

    def processes(self, view: Sequence[Mapping[str, Any]], app: str = "") -> dict[str, Any] | None:
        """An app's agent processes (`ProcessWatch`; each row then names the `app`), with
        every other app's as they were; published when it changed. A process seen alive and
        now gone (or replaced) is a fault."""
        self._app_processes[app] = [{**p, "app": app} if app else dict(p) for p in view]
        shown = [dict(p) for rows in self._app_processes.values() for p in rows]
        if shown == self._processes:
            return None
        now_by_slot = {_slot_key(p): p for p in shown}
        for before in self._processes:
            if not before.get("alive"):
                continue
            after = now_by_slot.get(_slot_key(before))
            if after is None or after.get("pid") != before.get("pid") or not after.get("alive"):
                code = (
                    after.get("returncode") if after and after.get("pid") == before["pid"] else None
                )
                detail = f"{before.get('agent', '')} pid {before.get('pid')}"
                detail += "" if code is None else f" code {code}"
                self.fault("agent_exit", None, detail, app=before.get("app"))
        self._processes = shown
        return self._emit("runtime_processes", {"processes": shown}).data

    def fault(
        self, kind: str, conversation_key: str | None, detail: str = "", *, app: str | None = None
    ) -> dict[str, Any]:
        """Record a fault (kinds and ids only, never message text) and publish it. `app`:
        whose process it was (a conversation's fault is of its conversation's app)."""
        entry = {
            "at": self.clock(),
            "conversation": conversation_key,
            "kind": kind,
            "detail": detail[:160],
            **({"app": app} if app else {}),
        }
        self._faults.append(entry)
        while len(self._faults) > self.fault_limit:
            self._faults.popleft()
        return self._emit("fault", {"fault": entry}).data

    def _note_faults(self, key: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
        state = after.get("state")
        if state in FAULT_STATES and before.get("state") != state:
            self.fault(str(state), key, f"turn {after.get('turn_id') or ''}".strip())
        last, earlier = after.get("last_terminal"), before.get("last_terminal")
        if isinstance(last, Mapping) and last != earlier and last.get("outcome") in FAULT_OUTCOMES:
            ending = last.get("ending") or ""
            self.fault(f"turn_{last['outcome']}", key, f"turn {last.get('turn_id')} {ending}")

    def _emit(self, event: str, data: Mapping[str, Any]) -> Frame:
        self.revision += 1
        body = {"projection_epoch": self.epoch, "revision": self.revision, **data}
        frame = Frame(event, body, self.revision, f"{self.epoch}:{self.revision}")
        self._ring.append(frame)
        while len(self._ring) > self.ring_size:
            self._ring.popleft()
        for sub in list(self._subscribers):
            self._offer(sub, frame)
        return frame

    # -- what is read --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        return {
            "instance_id": self.instance_id,
            "projection_epoch": self.epoch,
            "revision": self.revision,
            "conversations": {
                key: {"revision": frame["revision"], **frame["snapshot"], **_ages(frame, now)}
                for key, frame in sorted(self._states.items())
            },
            "processes": [dict(p) for p in self._processes],
            "faults": list(self._faults),
        }

    def get(self, conversation_key: str) -> dict[str, Any] | None:
        frame = self._states.get(conversation_key)
        return None if frame is None else dict(frame["snapshot"])

    def conversation_keys(self) -> list[str]:
        return sorted(self._states)

    # -- the stream ----------------------------------------------------------------------------

    def subscribe(self, client_id: str | None = None) -> Subscription:
        """Register first (see `open`): from here on every frame is queued for it."""
        sub = Subscription(asyncio.Queue(maxsize=self.queue_size), client_id=client_id)
        self._subscribers.add(sub)
        return sub

    def open(self, sub: Subscription, last_event_id: str | None = None) -> list[Frame]:
        """The subscriber's first frames: the ones it missed when `last_event_id` is of this
        epoch and still in the ring (none when it is the latest), else a snapshot frame.
        Frames queued before this call are covered by them and skipped by `next`."""
        after = self._replayable(last_event_id)
        sub.seen = self.revision
        if after is not None:
            return [f for f in self._ring if f.revision is not None and f.revision > after]
        return [Frame("snapshot", self.snapshot(), None, f"{self.epoch}:{self.revision}")]

    def _replayable(self, last_event_id: str | None) -> int | None:
        if not last_event_id:
            return None
        epoch, _, revision = last_event_id.strip().rpartition(":")
        if epoch != self.epoch or not revision.isdigit():
            return None
        after = int(revision)
        if after > self.revision:
            return None  # from the future: not ours to trust
        oldest = self._ring[0].revision if self._ring else self.revision + 1
        if oldest is None or after + 1 < oldest:
            return None  # frames it missed have left the ring
        return after

    async def next(self, sub: Subscription) -> Frame:
        """The subscriber's next frame, skipping what `open` already covered."""
        while True:
            frame = await sub.queue.get()
            if frame.revision is not None:
                if frame.revision <= sub.seen:
                    continue
                sub.seen = frame.revision
            return frame

    def subscribers(self) -> list[str | None]:
        """Who is watching (their client ids, None for anonymous), for `/status`."""
        return sorted((s.client_id for s in self._subscribers), key=lambda c: c or "")

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    def close(self) -> None:
        """Send every subscriber an explicit terminal frame (shutdown)."""
        for sub in list(self._subscribers):
            self._end(sub, Frame("end", {"projection_epoch": self.epoch}))
        self._subscribers.clear()

    def _offer(self, sub: Subscription, frame: Frame) -> None:
        if sub.ended:
            return
        try:
            sub.queue.put_nowait(frame)
        except asyncio.QueueFull:
            # Too far behind: ended, not silently thinned. It reconnects with its last id.
            evicted = {
                "projection_epoch": self.epoch,
                "reason": "queue_full",
                "queue_size": self.queue_size,
            }
            self._end(sub, Frame("client_evicted", evicted), flush=True)

    def _end(self, sub: Subscription, frame: Frame, *, flush: bool = False) -> None:
        """Queue the subscriber's terminal frame. `flush`: the frames still queued go too, so
        what it read stays gap-free and a reconnect with its last id replays the rest;
        otherwise only the oldest go, as needed to make room."""
        while sub.queue.full() or (flush and not sub.queue.empty()):
            sub.queue.get_nowait()
        sub.queue.put_nowait(frame)
        sub.ended = True
        self._subscribers.discard(sub)


def _slot_key(process: Mapping[str, Any]) -> tuple[Any, ...]:
    return (process.get("app"), process.get("agent"), process.get("workspace"), process.get("slot"))


def _ages(frame: Mapping[str, Any], now: float) -> dict[str, float | None]:
    """Ages derived when read, from the stored timestamps, so they never go stale."""
    snap = frame["snapshot"]
    if "started_at" not in snap:
        return {}
    started, last = snap.get("started_at"), snap.get("last_activity_at")
    return {
        "elapsed": None if started is None else now - started,
        "silent_for": None if last is None else now - last,
    }


# The agent processes as the operator sees them: one row per process slot, whichever agent
# profile and workspace it serves, read from the runtime's `snapshot()` (never a stderr line).
_FIELDS = (
    "slot",
    "pid",
    "state",
    "alive",
    "started_at",
    "restarts",
    "returncode",
    "sessions",
    "running_turns",
)


def process_view(runtime: Mapping[str, Any], agent: str, workspace: str) -> list[dict[str, Any]]:
    """Flatten the runtime's view: with several routes each route's agents, else the one
    runtime's, named after the default `agent` profile and `workspace`. Slots never started
    are left out (capacity, not processes)."""
    routes = runtime.get("routes")
    groups = routes if routes else [{"agent": agent, "workspace": workspace, **runtime}]
    return [
        {
            "agent": group.get("agent", agent),
            "workspace": group.get("workspace", workspace),
            "command": group.get("command"),
            **{name: row.get(name) for name in _FIELDS},
        }
        for group in groups
        for row in group.get("agents", [])
        if row.get("state") != "not_started"
    ]


class ProcessWatch:
    """Pushes the agent processes' view onto the projection when it changed (never polled):
    told by the runtime when a process starts or exits, a session opens or is let go, and a
    turn begins or ends (not at each of a turn's updates: a streamed answer's every chunk
    recomputed the view). `runtime` is set once it is built; `app`: whose agents they are
    (with several apps, each its own)."""

    def __init__(self, projection: Projection, agent: str, workspace: str, app: str = "") -> None:
        self._projection = projection
        self._agent = agent
        self._workspace = workspace
        self._app = app
        self.runtime: AgentRuntime | None = None

    def changed(self) -> None:
        if self.runtime is not None:
            view = process_view(self.runtime.snapshot(), self._agent, self._workspace)
            self._projection.processes(view, self._app)
