"""Scheduled prompts: when one may run, and the interval arithmetic of /every.

Pure: the caller passes `now` (wall-clock times, /at, are the engine's: schedules/times.py).
The gate reads the one truth source, the conversation's execution state, in the seed's
order: an open stream or a prompt in flight is busy; a person being waited on is busy until
the wait's timeout, past which the wait is stale and the run is allowed; the grace window
and a landing stop are busy; a runtime the bridge cannot vouch for is busy. "The agent
process is alive" is never a reason either way.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum

from bridge.core import presence
from bridge.core.presence import Timings
from bridge.core.snapshot import phase as lifecycle_phase
from bridge.core.state import WAITING_USER_STATES, Conversation, ExecState

EXCERPT = 40  # characters of a prompt shown in a header or a list line


class Gate(StrEnum):
    """Whether a due schedule may run now, and if not, why (recorded as the skip reason)."""

    IDLE = "idle"  # may run
    STALE_WAIT = "stale_wait"  # a person was waited on past the timeout: may run
    RUNNING = "running"  # a prompt is in flight or the stream is open (also: silent agent)
    WAITING_ON_USER = "waiting_on_user"  # an approval or a question within its timeout
    FINISHING = "finishing"  # the grace window, or the end still going out
    CANCELLING = "cancelling"  # a stop has not landed yet
    UNSYNCED = "unsynced"  # the agent is restarting, its session reloading
    CLOSED = "closed"

    @property
    def allows(self) -> bool:
        return self in (Gate.IDLE, Gate.STALE_WAIT)


def gate(conv: Conversation, now: float, timings: Timings) -> Gate:
    """May a scheduled prompt be injected into this conversation at `now`?"""
    if conv.state in WAITING_USER_STATES:
        due = presence.deadlines(conv, timings)
        timeout = due.get(presence.APPROVAL_TIMEOUT, due.get(presence.REPLY_TIMEOUT))
        if timeout is not None and now >= timeout:
            return Gate.STALE_WAIT
        return Gate.WAITING_ON_USER
    phase = lifecycle_phase(conv)
    match phase:
        case "idle":
            # Idle with a queue would start the queue's head first; never jump it.
            return Gate.IDLE if not conv.queue else Gate.RUNNING
        case "executing":
            return Gate.RUNNING
        case "finishing":
            return Gate.FINISHING
        case "cancelling":
            return Gate.CANCELLING
        case "unsynced":
            return Gate.UNSYNCED
    assert conv.state is ExecState.CLOSED, phase
    return Gate.CLOSED


def excerpt(prompt: str, limit: int = EXCERPT) -> str:
    """The prompt's first line, cut at `limit` characters (data, shown back as written)."""
    line = " ".join(prompt.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- intervals and times ----------------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_INTERVAL = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|min|m|h|d)$")
CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_TIME_OF_DAY = re.compile(r"\d{1,2}:\d{2}(:\d{2})?([+-]\d{2}:?\d{2}|Z)?")  # of an ISO time
MAX_INTERVAL = 366 * 86400.0


def parse_interval(text: str) -> float | None:
    """`90s`, `30m`, `2h`, `1d`, `1.5h` (and `500ms`, for tests) → seconds; else None."""
    found = _INTERVAL.match(text.strip().lower())
    if found is None:
        return None
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    return seconds if 0 < seconds <= MAX_INTERVAL else None


def format_interval(seconds: float) -> str:
    """The shortest exact spelling: 1d, 2h, 30m, 90s (what /schedules shows)."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and math.isclose(seconds % size, 0.0, abs_tol=1e-9):
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms"


def next_after(due_at: float, every: float, now: float) -> float:
    """The first occurrence of the grid `due_at + k·every` strictly after `now`: however
    many occurrences passed (a busy hour, a bridge that was down), one run covers them."""
    if due_at > now:
        return due_at
    return due_at + (math.floor((now - due_at) / every) + 1) * every


def following(slot: float, every: float, ran_at: float) -> float:
    """The occurrence after a run of `slot` made at `ran_at` (`slot <= ran_at`): the first
    of the grid `slot + k·every` at least half a period after the run.

    A late run (the chat was busy, Feishu down, the bridge stopped) covers every occurrence
    that passed meanwhile, and also takes the place of the next one if that would come less
    than half a period after it: back-to-back runs of the same prompt (`/every 3s` caught
    up 1 s before its next slot) tell the agent nothing new. One exactly half a period after
    is kept, so two runs are never less than half a period apart; a run on time (or a few ms
    late) keeps the next occurrence, a whole period away."""
    upcoming = next_after(slot, every, ran_at)
    return upcoming + every if upcoming - ran_at < every / 2 else upcoming


def split_request(arg: str) -> tuple[str, str]:
    """`<when> <prompt>` → (when, prompt); an ISO date-time with a space keeps its time."""
    head, _, rest = arg.strip().partition(" ")
    rest = rest.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", head):
        clock, _, after = rest.partition(" ")
        if _TIME_OF_DAY.fullmatch(clock):
            return f"{head}T{clock}", after.strip()
    return head, rest
