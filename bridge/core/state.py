"""The execution state of one conversation: the single truth source for presence and /status.

Everything here is an immutable value; `machine.step` returns a new `Conversation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from bridge.core.text import NOTHING_WRITTEN, Params, Written
from bridge.runtime.events import (
    PermissionOption,
    PlanEntry,
    QuestionKind,
    QuestionOption,
    StopReason,
    Usage,
)


class ExecState(StrEnum):
    IDLE = "idle"
    WAITING_RESPONSE = "waiting_response"  # prompt sent, nothing back yet
    STREAMING = "streaming"  # updates flowing
    WAITING_APPROVAL = "waiting_approval"
    WAITING_REPLY = "waiting_reply"
    FINISHING = "finishing"  # turn returned: grace window, or waiting for a cancel to land
    CANCELLING = "cancelling"  # the user stopped the turn; waiting for the agent to confirm
    RECOVERING = "recovering"  # runtime died mid-turn; restarting / reloading
    STALE = "stale"  # no sign of life past the stale window (not killed)
    CLOSED = "closed"


# The assistant is moving: the only states where a running hint or heartbeat may be shown.
RUNNING_STATES = frozenset({ExecState.WAITING_RESPONSE, ExecState.STREAMING})
WAITING_USER_STATES = frozenset({ExecState.WAITING_APPROVAL, ExecState.WAITING_REPLY})

# How many message ids a conversation remembers to drop a redelivered one (the receiver
# dedups first; this bounds the damage if a redelivery slips past it).
RECENT_IDS = 64


class Outcome(StrEnum):
    """The one terminal outcome of a turn (first terminal wins)."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"


class Reaction(StrEnum):
    """What the reaction on a user's message says of the round it belongs to: taken in
    (the ack), waiting for the user, or how it ended."""

    RECEIVED = "received"
    WAITING = "waiting"
    DONE = "done"
    STOPPED = "stopped"
    FAULT = "fault"

    @property
    def final(self) -> bool:
        return self in (Reaction.DONE, Reaction.STOPPED, Reaction.FAULT)


class ActivityKind(StrEnum):
    THINKING = "thinking"
    WRITING = "writing"
    TOOL = "tool"
    PLANNING = "planning"


@dataclass(frozen=True)
class Activity:
    """What the agent was last seen doing; `title` is the tool call's title."""

    kind: ActivityKind
    title: str | None = None


@dataclass(frozen=True)
class Attachment:
    """An image or file a user sent, as Feishu names it (fetched when its turn starts)."""

    message_id: str  # the message it came with: the resource API asks for both
    kind: str  # image, file, audio, media; voice, voice_off (core/voice.py)
    key: str
    resource_type: str  # image or file
    name: str = ""


@dataclass(frozen=True)
class QueuedMessage:
    message_id: str
    sender: str
    text: str
    queued_at: float
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class PendingApproval:
    request_id: str
    card_key: str
    title: str
    options: tuple[PermissionOption, ...]
    asked_at: float
    detail: str | None = None
    reminder_sent: bool = False
    urged: bool = False  # those who may answer it were urged (加急, or @-mentioned) once
    message_id: str | None = None  # the card's message, once Feishu took it (`Posted`)
    # When Feishu took the card: the user is waited on from then, not from `asked_at` (a
    # card waiting for its turn, behind the call budget or an outage, is not yet seen).
    shown_at: float | None = None


@dataclass(frozen=True)
class PendingQuestion:
    request_id: str
    card_key: str
    kind: QuestionKind
    text: str
    options: tuple[QuestionOption, ...]
    answer_key: str
    asked_at: float
    reminder_sent: bool = False
    urged: bool = False  # as on PendingApproval
    message_id: str | None = None  # the card's message, once Feishu took it (`Posted`)
    shown_at: float | None = None  # when Feishu took the card: the wait counts from then


@dataclass(frozen=True)
class ProgressLine:
    """A throttled progress line waiting for its slot."""

    key: str
    params: Params


@dataclass(frozen=True)
class Progress:
    """Progress lines (and commentary) of a turn share slots at least
    `Timings.progress_interval` apart: what was shown last, and what waits for the next."""

    last_at: float | None = None  # when the last one was shown
    last: ProgressLine | None = None  # dedupes a repeated tool title / plan line
    pending: ProgressLine | None = None  # the latest line wins the next slot
    commentary_held: bool = False  # the turn's `text` holds commentary for the next slot


NO_PROGRESS = Progress()


@dataclass(frozen=True)
class ToolLine:
    """A tool call as the status card lists it."""

    tool_call_id: str
    title: str
    status: str  # pending | in_progress | completed | failed


class CardStage(StrEnum):
    """Where a turn's live status card is (card style only)."""

    NONE = "none"  # not posted (yet): a turn that answers at once never gets one
    SHOWN = "shown"  # posted; from now on it carries the turn's progress
    FAILED = "failed"  # Feishu refused every card form: lines again, for this turn


@dataclass(frozen=True)
class LiveCard:
    """Card style: the live status card of a turn (see core/status_card.py)."""

    stage: CardStage = CardStage.NONE
    text: str = ""  # agent text already moved into the card (commentary)
    # Where each continuation page starts in the answer (`answer_of`): page 1 on. A page
    # before the last is closed; the last is the one being written.
    pages: tuple[int, ...] = ()
    # The fence line of a code block each continuation page begins inside ("" if none):
    # its card opens the block again.
    fences: tuple[str, ...] = ()
    spill: int | None = None  # past the last card: from here on the answer goes as messages
    spilled: int = 0  # how far those messages have gone (from `spill`, a page's worth at a time)
    spill_fence: str = ""  # the code block open where those messages go on, if any
    weigh_at: int = 0  # the page being written is weighed again once this long
    text_since: float | None = None  # when the answer began to stream (card style)

    @property
    def start(self) -> int:
        """Where the page being written starts in the answer."""
        return self.pages[-1] if self.pages else 0

    tools: tuple[ToolLine, ...] = ()  # the last few tool calls, newest last
    plan: tuple[PlanEntry, ...] = ()


NO_CARD = LiveCard()


class Urgency(StrEnum):
    """How a card left unanswered reaches those who may answer it (once, at `Timings.urge`)."""

    OFF = "off"  # only the reminder line
    APP = "app"  # Feishu's in-app urgent notification (加急) on the card
    # The app lacks the scope im:message.urgent: the reminder line @-mentions them instead.
    MENTION = "mention"


class PresenceStyle(StrEnum):
    MESSAGES = "messages"  # lines in the chat (the default)
    CARD = "card"  # one live status card per turn


class Prompt(StrEnum):
    """Where the turn's prompt is on the agent's side."""

    NOT_SENT = "not_sent"  # the agent is starting (or a voice is being heard)
    RUNNING = "running"  # on the wire: the agent owes an answer to it
    # The agent owes nothing more: the prompt returned, failed, died with its process
    # (until a restart resumes it), or never went out. The next turn may start.
    DONE = "done"


@dataclass(frozen=True)
class StopRequest:
    """A /stop the agent was asked to carry out (it ends the round when it confirms)."""

    requested_at: float
    said: bool = False  # the "still stopping" line went out


@dataclass(frozen=True)
class TurnEnd:
    """How a turn ended: fixed by its first terminal, whatever comes after it."""

    outcome: Outcome
    ending: Ending
    detail: str
    ended_at: float
    # A non-final stop reason whose end line waits out the grace window (a follow-up
    # message closes it sooner); None once the turn's one end signal went out.
    held: StopReason | None = None

    @property
    def posted(self) -> bool:
        return self.held is None


@dataclass(frozen=True)
class Turn:
    """One agent turn answering one user message; `turn_id` is that message's id.

    Its phases are values, None until the turn enters them: `stop` once a /stop went to
    the agent, `recovering_since` while the agent restarts under it (cleared when a restart
    resumes it), `end` from its first terminal on. `Conversation.state` says which phase
    the round is in now."""

    turn_id: str
    message_id: str
    requester: str
    started_at: float
    last_activity_at: float  # last sign of life from the runtime (drives STALE)
    last_posted_at: float  # last line shown for this turn (heartbeat counts silence from it)
    # The agent's side.
    session_id: str | None = None  # adopted from PromptSent; events of other sessions drop
    prompt_sent_at: float | None = None  # when the runtime took the prompt
    prompt: Prompt = Prompt.NOT_SENT
    # What the user sees of it while it runs.
    activity: Activity | None = None
    # The user saw the turn under way (a hint, progress, its words, its card, a waiting
    # line): from now on heartbeats keep it company, never a first hint.
    announced: bool = False
    progress: Progress = NO_PROGRESS
    text: Written = NOTHING_WRITTEN  # agent message text not yet relayed
    released: int = 0  # messages of a long answer posted while it streams (lines style)
    seq: int = 0  # numbers the turn's posts for idempotency keys
    card: LiveCard = NO_CARD
    files: tuple[str, ...] = ()  # files the agent's answer links (file:// URIs), to send
    # Other user messages that became part of this round (images and files held for its
    # text, the typed reply to its question): their reactions follow it too.
    joined: tuple[str, ...] = ()
    reaction: Reaction = Reaction.RECEIVED  # what its messages' reactions say (the ack)
    # Phases.
    recovering_since: float | None = None  # the agent died under it; a restart may resume it
    stop: StopRequest | None = None  # /stop sent to the agent; its answer ends the turn
    end: TurnEnd | None = None  # set by the first terminal; the turn is over from then on
    # What happened to it before, that a later step decides by.
    rejected: bool = False  # the user refused a step: an agent may end the round for it
    reopened: bool = False  # its session could not be reloaded: asked once for a new one
    begun_here: bool = False  # the store's record of it was begun by this process

    @property
    def terminal(self) -> bool:
        return self.end is not None


class Ending(StrEnum):
    """Why a turn ended, beside its outcome: for operators, in
    snapshots, traces, metrics and /turns/{id}."""

    COMPLETED = "completed"  # the agent answered and ended its turn
    REFUSED = "refused"  # the user refused a step and the agent ended the round for it
    USER_STOP = "user_stop"  # /stop (confirmed by the agent, or forced when it never did)
    APPROVAL_TIMEOUT = "approval_timeout"
    REPLY_TIMEOUT = "reply_timeout"
    DEADLINE = "deadline"  # the bridge's own limits: silence, a recovery that never came back
    AGENT_EXIT = "agent_exit"  # the agent process died
    AGENT_ERROR = "agent_error"  # the agent answered the prompt with an error, or cancelled
    BRIDGE_SHUTDOWN = "bridge_shutdown"  # the bridge stopped or restarted mid-turn
    RECALL = "recall"  # the user recalled the message being answered
    FEISHU_REFUSED = "feishu_refused"  # Feishu refused the card the round needed
    VOICE = "voice"  # the voice message could not be made words (nothing went to the agent)
    CLOSED = "closed"  # the conversation was closed


@dataclass(frozen=True)
class LastTerminal:
    turn_id: str
    outcome: Outcome
    ended_at: float
    ending: Ending | None = None


@dataclass(frozen=True)
class Options:
    """Per-deployment behaviour the machine needs (built from Settings by the caller)."""

    received_text: bool = False
    approvers: frozenset[str] = frozenset()  # may answer any approval / question card
    # False: a requester may not approve their own agent's request (four eyes); only
    # `approvers` may. Questions and /stop stay the requester's.
    requester_may_approve: bool = True
    presence_style: PresenceStyle = PresenceStyle.MESSAGES
    usage_footer: bool = False  # a line of context use under each turn's last message
    # The ack reaction follows its round (waiting, done, stopped, fault); False: the ack only.
    state_reactions: bool = False
    urgency: Urgency = Urgency.OFF


@dataclass(frozen=True)
class Conversation:
    state: ExecState = ExecState.IDLE
    key: str = ""  # `<chat>` or `<chat>:<thread>`: where its posts go
    # A group chat (a message said so, or it is a topic thread): its pause lines name whose
    # turn it is. A chat never changes its type.
    group: bool = False
    session_id: str | None = None  # the agent session bound to this conversation
    turn: Turn | None = None
    approvals: tuple[PendingApproval, ...] = ()
    question: PendingQuestion | None = None
    queue: tuple[QueuedMessage, ...] = ()
    last_terminal: LastTerminal | None = None
    # Message ids already taken (turns, queue, answers), newest last; bounded by RECENT_IDS.
    recent_message_ids: tuple[str, ...] = ()
    # Bot-menu clicks answered lately (their ids), newest last; bounded by RECENT_IDS. A
    # click has no message: what answers it is a new message in the chat, not a reply.
    menu_clicks: tuple[str, ...] = ()
    options: Options = field(default_factory=Options)
    agent_commands: tuple[str, ...] = ()  # the agent's own slash commands (without "/")
    agent_name: str = ""  # whose commands they are
    usage: Usage | None = None  # context use the agent last reported
    # The file changes the agent's tools reported in the last round, for /diff: (path, diff).
    diffs: tuple[tuple[str, str], ...] = ()
    # Images and files sent without text, by sender: they join that sender's next text.
    held: tuple[tuple[str, Attachment], ...] = ()
    # Timers the executor holds for us, as (name, at); kept in step with the state.
    timers: tuple[tuple[str, float], ...] = ()
