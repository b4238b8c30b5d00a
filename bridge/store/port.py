"""The `Store` port: everything the bridge must remember across a restart.

Three implementations share one contract (and one test suite, `tests/unit/store/`):
`SqliteStore` (the embedded default), `PostgresStore` (several instances; both SQL stores
share their statements, sql_store.py) and `MemoryStore` (a fake for unit tests of other
modules). Time is always passed in (`now`, seconds since the epoch), never read here.

Contract highlights:

- *Claims are first-wins.* `claim_event`, `journal_message`, `start_turn`, `save_approval` and
  `mark_sent` return True only for the call that created the record; a repeat returns False
  and changes nothing.
- *First terminal wins.* `finish_turn` and `resolve_approval` set the outcome only while none
  is set; a later call returns False and changes nothing.
- *Every write is one atomic step.* A caller never sees a half-applied call, and two
  coroutines racing on the same record get exactly one True.
- *Prompt text is data, never a log line.* `JournaledMessage.text` is kept out of `repr`;
  `trace` details must not contain prompt text (the caller's duty).
- Traces and approvals belong to a turn: writing one for an unknown turn raises `UnknownTurn`,
  and pruning a turn removes them with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType
from typing import Protocol, Self

from bridge.store.port_cluster import ClusterStore
from bridge.store.port_owed import OwedStore

DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0


class StoreError(Exception):
    """Base class of the errors a store raises on purpose."""


class StoreClosed(StoreError):
    """The store was used before `open()` or after `close()`."""


class StoreUnavailable(StoreError):
    """The database is away (a restart, a failover); the call may have taken effect."""


class UnknownTurn(StoreError, KeyError):
    """A trace entry or an approval names a turn the store does not know."""


class SchemaTooNew(StoreError):
    """The database was written by a newer bridge (its schema version is unknown here)."""


class MessageState(StrEnum):
    QUEUED = "queued"  # journaled, acknowledged, waiting for its turn
    RUNNING = "running"  # its turn is running
    DONE = "done"  # finished (answered, stopped, consumed as a reply, or given up)
    INTERRUPTED = "interrupted"  # its turn was cut (restart, unrecoverable fault)


# Allowed journal moves: source states for each target state. DONE is terminal.
MESSAGE_TRANSITIONS: dict[MessageState, frozenset[MessageState]] = {
    MessageState.QUEUED: frozenset(),
    MessageState.RUNNING: frozenset({MessageState.QUEUED, MessageState.INTERRUPTED}),
    MessageState.DONE: frozenset(
        {MessageState.QUEUED, MessageState.RUNNING, MessageState.INTERRUPTED}
    ),
    MessageState.INTERRUPTED: frozenset({MessageState.QUEUED, MessageState.RUNNING}),
}


class TurnOutcome(StrEnum):
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"


class ApprovalStatus(StrEnum):
    OPEN = "open"  # the card is live, nobody decided yet
    ALLOWED_ONCE = "allowed_once"
    ALLOWED_ALWAYS = "allowed_always"
    REJECTED = "rejected"
    EXPIRED = "expired"  # timed out, or found open after a restart
    CANCELLED = "cancelled"  # its turn ended first (stopped, failed)


@dataclass(frozen=True)
class JournaledMessage:
    seq: int  # arrival order, increasing across the whole store
    message_id: str
    conversation_key: str
    sender_open_id: str
    chat_id: str
    text: str = field(repr=False)  # the prompt: stored to rerun a turn, never logged
    state: MessageState
    received_at: float
    updated_at: float
    attachments: str = ""  # JSON list of the images and files it carries
    # Several instances: the lease fence under which an owner took it (acked it, queued or
    # ran it); 0 while no owner has. A later owner finds it as its predecessor's leftover.
    taken: int = 0


@dataclass(frozen=True)
class TurnRecord:
    turn_id: str
    conversation_key: str
    message_id: str  # informational: the journal may be pruned before the turn
    started_at: float
    outcome: TurnOutcome | None  # None while running
    finished_at: float | None
    prompted_at: float | None = None  # when its prompt went out (None: it never reached the agent)


# One timeline entry to write: (turn id, kind, detail, at).
TraceRecord = tuple[str, str, str, float]


@dataclass(frozen=True)
class TraceEntry:
    seq: int  # append order, increasing across the whole store
    turn_id: str
    kind: str
    detail: str  # never prompt text
    at: float


@dataclass(frozen=True)
class Approval:
    request_id: str
    turn_id: str
    conversation_key: str
    card_message_id: str
    requester_open_id: str
    created_at: float
    status: ApprovalStatus
    decided_by: str | None  # open id of the decider; None while open or when expired
    decided_at: float | None
    title: str = ""  # what was asked, for the card shown after a restart


@dataclass(frozen=True)
class SessionRecord:
    """A session a conversation has had (for /sessions and /resume)."""

    conversation_key: str
    session_id: str
    agent: str  # the agent profile's name
    folder: str  # the session's working folder
    title: str  # as the agent last told it ("" when it never did)
    started_at: float
    active_at: float  # the end of its last round (or when it was opened)


class ScheduleKind(StrEnum):
    EVERY = "every"  # repeats every `every_seconds`
    AT = "at"  # once, at `next_due_at`; removed after it runs


@dataclass(frozen=True)
class Schedule:
    """A prompt the bridge sends a conversation on a clock (/every, /at, BRIDGE_SCHEDULES).

    `next_due_at` is the next occurrence; while it lies in the past the schedule is *due*:
    it runs once at the conversation's next idle moment, however many occurrences passed
    meanwhile (they are never stacked)."""

    schedule_id: int  # the number users see (/schedules, /unschedule <n>)
    conversation_key: str
    chat_id: str
    creator_open_id: str  # whose turn a run is ("" for an operator's schedule)
    kind: ScheduleKind
    every_seconds: float | None  # EVERY only
    prompt: str = field(repr=False)  # a prompt: data, never logged
    next_due_at: float
    created_at: float
    anchor_message_id: str = ""  # the command's message: a topic thread's run replies there
    config_key: str = ""  # an operator's schedule (BRIDGE_SCHEDULES): its stable key
    last_run_at: float | None = None
    last_skip_at: float | None = None
    last_skip_reason: str = ""  # why it last could not run (running, waiting_on_user, …)


class AsyncLifecycle:
    """`async with store:` for any store: open on entry, close on exit."""

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Store(ClusterStore, OwedStore, Protocol):
    """Persistence port of the bridge. All methods need an open store (else `StoreClosed`)."""

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Open (creating or migrating the storage as needed). Idempotent."""

    async def close(self) -> None:
        """Release everything. Idempotent; a closed store can be opened again."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    # -- 1. inbound dedup --------------------------------------------------------------------

    async def claim_event(self, event_id: str, message_id: str | None, now: float) -> bool:
        """True the first time this event id AND this message id are seen; False for a
        redelivery (same event id) or a message delivered again under another event id."""

    # -- 2. inbound journal ------------------------------------------------------------------

    async def journal_message(
        self,
        conversation_key: str,
        message_id: str,
        sender_open_id: str,
        chat_id: str,
        text: str,
        now: float,
        attachments: str = "",
    ) -> bool:
        """Record a user message as QUEUED; False (and no change) if already journaled.
        `attachments`: the images and files it carries (JSON), so a restart can fetch them."""

    async def set_message_state(self, message_id: str, state: MessageState, now: float) -> bool:
        """Move a message along `MESSAGE_TRANSITIONS`; False if unknown or not allowed."""

    async def interrupt_running_messages(self, now: float) -> int:
        """Mark every RUNNING message INTERRUPTED (at start-up); returns how many."""

    async def message(self, message_id: str) -> JournaledMessage | None: ...

    async def pending_messages(self, conversation_key: str) -> list[JournaledMessage]:
        """Not-DONE messages of one conversation, in arrival order."""

    async def unfinished_messages(self) -> list[JournaledMessage]:
        """Not-DONE messages of every conversation, in arrival order (restart recovery)."""

    # -- a user's private chat with the bot --------------------------------------------------

    async def remember_p2p_chat(self, open_id: str, chat_id: str, now: float) -> None:
        """Keep which private chat the user writes to the bot from (the bot menu's clicks
        name no chat); a later one replaces it."""

    async def p2p_chat(self, open_id: str) -> str | None:
        """The user's private chat with the bot, if it was ever seen."""

    # -- 3. session bindings -----------------------------------------------------------------

    async def bind_session(self, conversation_key: str, session_id: str, now: float) -> None:
        """Bind (or rebind) a conversation to an agent session id."""

    async def session_for(self, conversation_key: str) -> str | None: ...

    async def unbind(self, conversation_key: str) -> bool:
        """Forget the binding (/new); False if there was none."""

    async def set_preference(
        self, conversation_key: str, name: str, value: str, now: float
    ) -> None:
        """Keep what the conversation chose of its agent ("mode", "config:<id>")."""

    async def preferences(self, conversation_key: str) -> dict[str, str]:
        """The conversation's choices, by name (empty when it made none)."""

    async def preference_everywhere(self, name: str) -> dict[str, str]:
        """One choice's value in every conversation that made it, by conversation key."""

    async def note_session(self, record: SessionRecord) -> None:
        """Record a session of the conversation, or its newer activity; an empty title
        keeps the one recorded, and `started_at` stays the first one's."""

    async def sessions_of(self, conversation_key: str, limit: int = 20) -> list[SessionRecord]:
        """The conversation's sessions, most recently active first."""

    # -- 4. turns ----------------------------------------------------------------------------

    async def start_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        """Record a running turn; False (and no change) if the id exists."""

    async def finish_turn(self, turn_id: str, outcome: TurnOutcome, now: float) -> bool:
        """First terminal wins: True only if the turn existed and had no outcome yet."""

    async def begin_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        """`start_turn`, and its message marked running (`set_message_state`), as one atomic
        step in one round trip; the result is `start_turn`'s (False: the turn existed)."""

    async def end_turn(
        self,
        turn_id: str,
        message_id: str,
        outcome: TurnOutcome,
        now: float,
        *,
        sent: tuple[str, Sequence[str]] | None = None,
    ) -> bool:
        """`finish_turn`, and the turn's message marked done, as one atomic step in one round
        trip; the result is `finish_turn`'s (the message is marked done either way). `sent`:
        an outbox mark (`mark_sent`'s key and message ids), the turn's end signal's, written
        in the same step (first mark wins, as in `mark_sent`)."""

    async def mark_prompted(self, turn_id: str, now: float) -> bool:
        """The turn's prompt goes out now (written before it is sent; a turn cut without it
        is run again, not reported cut). False if unknown or already marked."""

    async def turn(self, turn_id: str) -> TurnRecord | None: ...

    async def running_turns(self) -> list[TurnRecord]:
        """Turns without an outcome, in start order (restart recovery)."""

    # -- 5. trace timeline -------------------------------------------------------------------

    async def trace(self, turn_id: str, kind: str, detail: str, now: float) -> None:
        """Append to a turn's timeline; raises `UnknownTurn`. `detail` never holds prompt text."""

    async def trace_many(self, records: Sequence[TraceRecord]) -> None:
        """Append many timeline entries in one round trip, in order; entries of turns the
        store does not know are skipped (a timeline is detail, not worth an error)."""

    async def trace_for(self, turn_id: str) -> list[TraceEntry]:
        """The turn's timeline in append order (empty for an unknown turn)."""

    # -- 6. approvals ------------------------------------------------------------------------

    async def save_approval(
        self,
        request_id: str,
        turn_id: str,
        conversation_key: str,
        card_message_id: str,
        requester_open_id: str,
        now: float,
        title: str = "",
    ) -> bool:
        """Record an OPEN approval; False if the id exists; raises `UnknownTurn`."""

    async def resolve_approval(
        self, request_id: str, status: ApprovalStatus, decided_by: str | None, now: float
    ) -> bool:
        """First decision wins: True only if the approval existed and was OPEN.
        Raises ValueError for `status=OPEN`."""

    async def approval(self, request_id: str) -> Approval | None: ...

    async def open_approvals(self) -> list[Approval]:
        """OPEN approvals in creation order (to expire their cards after a restart)."""

    # -- 7. outbox marks ---------------------------------------------------------------------

    async def mark_sent(self, idempotency_key: str, message_ids: Sequence[str], now: float) -> bool:
        """Remember that a logical send is posted; first mark wins (False on a repeat)."""

    async def sent(self, idempotency_key: str) -> list[str] | None:
        """The message ids posted under this key, or None if it was never marked."""

    # -- 8. schedules -------------------------------------------------------------------------

    async def add_schedule(
        self,
        conversation_key: str,
        chat_id: str,
        creator_open_id: str,
        kind: ScheduleKind,
        every_seconds: float | None,
        prompt: str,
        next_due_at: float,
        now: float,
        *,
        anchor_message_id: str = "",
        config_key: str = "",
    ) -> Schedule | None:
        """Record a schedule and return it with its new number (numbers are never reused).
        With a `config_key` already recorded: None, and nothing changes (first wins)."""

    async def schedule(self, schedule_id: int) -> Schedule | None: ...

    async def schedules(self, conversation_key: str | None = None) -> list[Schedule]:
        """Every schedule (or one conversation's), by number."""

    async def remove_schedule(self, schedule_id: int) -> bool:
        """Forget a schedule; False if there was none."""

    async def note_schedule_run(
        self, schedule_id: int, slot: float, ran_at: float, next_due_at: float
    ) -> bool:
        """The occurrence due at `slot` ran at `ran_at`; the next is `next_due_at`. Only
        while `slot` is still the schedule's next occurrence: False (nothing written) if
        that occurrence was already recorded, or the schedule is unknown."""

    async def note_schedule_skip(self, schedule_id: int, reason: str, at: float) -> bool:
        """The schedule was due at `at` but the conversation was not idle (`reason`); it stays
        due. False if unknown."""

    # -- housekeeping ------------------------------------------------------------------------

    async def prune(self, now: float) -> int:
        """Drop what is older than the retention: seen events, DONE messages, finished turns
        (with their traces and approvals), decided approvals, outbox marks. Never touches
        bindings, schedules or anything unfinished. Returns the number of records removed, not
        counting the trace entries and approvals that went with their turn."""
