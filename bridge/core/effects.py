"""What the conversation core asks the executor to do. Frozen values, performed in order.

Every effect that posts carries a deterministic `idempotency_key` (from the turn id, a kind
and the turn's post counter) for the Feishu `uuid` field, so a retry, a redelivered event or a
replay after a restart never posts twice. The end signal of a turn always uses
`"{turn_id}:end"`, whichever form it takes: after a crash the replacement end line collides
with an end signal that already went out instead of adding a second one. Keys can exceed
Feishu's 50-character `uuid` limit; the Feishu client bounds them (`message_uuid`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from bridge.core.delivery import Line, Supersede, Terms
from bridge.core.state import Attachment, Ending, Outcome, Reaction, ToolLine
from bridge.core.text import Params, Text
from bridge.runtime.events import PermissionOption, PlanEntry, QuestionOption


@dataclass(frozen=True)
class StartTurn:
    """Take a turn slot, make the turn's prompt ready (its voice heard, its images and files
    fetched), then open its session as `OpenSession(turn_id, session_id)` would."""

    turn_id: str
    text: str
    session_id: str | None
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class OpenSession:
    """Addressed to the turn runner that fed `SessionNotReloaded`: open a session for the
    turn (`session_id` None: resume the conversation's bound one if the agent can, else a
    new one) and report `SessionOpened`, or why not (`RuntimeUnavailableAtStart`)."""

    turn_id: str
    session_id: str | None = None


@dataclass(frozen=True)
class SendPrompt:
    """Addressed to the turn runner that fed `SessionOpened`: prompt the agent with the
    turn's text now. Absent from the answer when the turn ended while its session opened."""

    turn_id: str
    session_id: str


@dataclass(frozen=True)
class CancelTurn:
    turn_id: str
    session_id: str | None


@dataclass(frozen=True)
class AbandonTurn:
    """The agent never confirmed a cancel: stop waiting for it, and restart its process if
    it is still running the prompt (the turn is already ended on our side)."""

    turn_id: str
    session_id: str


@dataclass(frozen=True)
class AnswerPermission:
    request_id: str
    option_id: str | None  # None answers `cancelled`


@dataclass(frozen=True)
class AnswerQuestion:
    request_id: str
    answers: Mapping[str, str] | None  # None declines


@dataclass(frozen=True)
class PostText:
    """A system / status line: a translation key and its params, never a sentence."""

    key: str
    params: Params
    reply_to: str
    idempotency_key: str
    final: bool = False  # this is the turn's end signal
    turn_id: str | None = None  # None: a line outside any turn (refusal, command answer)
    footer: Text | None = None  # a last line under it (the usage footer)
    # Open ids the line @-mentions, ahead of its text: the bridge's own markup, chosen by
    # the core (those who may answer a card), never anything the agent wrote.
    mentions: tuple[str, ...] = ()
    line: Line = field(default=Line.SYSTEM, compare=False)  # what the line is for
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core
    # Set by the core: its turn was begun in the store by this process, so nothing of it
    # went out before a restart and the outbox need not be read first.
    fresh: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class EditText:
    """Rewrite a line already posted (found by its idempotency key) to a new text, e.g. a
    queue line whose message was recalled; nothing when it was never posted."""

    posted_key: str
    key: str
    params: Params
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core


@dataclass(frozen=True)
class RelayAgentText:
    """The agent's own text (commentary between tool calls, or the final reply)."""

    text: str
    reply_to: str
    idempotency_key: str
    final: bool = False
    turn_id: str | None = None
    footer: Text | None = None  # a last line under it (the usage footer)
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core
    fresh: bool = field(default=False, compare=False)  # set by the core, as on PostText


class CardPhase(StrEnum):
    WORKING = "working"
    WAITING_APPROVAL = "waiting_approval"
    WAITING_REPLY = "waiting_reply"
    RECOVERING = "recovering"
    ENDED = "ended"


@dataclass(frozen=True)
class CardView:
    """What the live status card shows; the engine draws it (and may skip a view that a
    newer one replaced before it could be sent)."""

    phase: CardPhase
    elapsed: float  # seconds of work; frozen while the turn waits on a person
    tools: tuple[ToolLine, ...] = ()
    plan: tuple[PlanEntry, ...] = ()
    text: str = ""  # this card's page of the answer as written so far
    cut: bool = False  # the answer outgrew the cards: the rest follows as messages
    end_key: str | None = None  # the ended line (translation key) when phase is ENDED
    end_params: Params = field(default_factory=dict)
    footer: Text | None = None  # the usage footer, on the final view
    page: int = 0  # 0: the status card; 1 on: a continuation card, the answer only
    code: str = ""  # the fence line of the code block this page begins inside, if any
    closed: bool = False  # the status card's page is closed: the answer goes on below it


@dataclass(frozen=True)
class ShowStatusCard:
    """Post the turn's status card (the first time) or bring it up to `view`. `final`: the
    last view (streaming ends, the card is never touched again). `existing_only`: only
    update a card that was posted before (a restart finalizing cards of dead turns)."""

    turn_id: str
    reply_to: str
    card_key: str
    view: CardView
    final: bool = False
    existing_only: bool = False
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core


@dataclass(frozen=True)
class React:
    """The one ack reaction on a user's message; performed ahead of queued posts."""

    message_id: str
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core


@dataclass(frozen=True)
class SetReaction:
    """The reaction on a user's message now says `state` of its round: the one there is
    replaced (one at a time). Best-effort, behind everything its chat is shown: a round's
    end reaction follows its end signal."""

    message_id: str
    state: Reaction
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core


@dataclass(frozen=True)
class MarkMessageDone:
    """The journaled message needs nothing more (answered a question, was a command, or was
    not something a turn takes): a restart does not run it again."""

    message_id: str


@dataclass(frozen=True)
class PostApprovalCard:
    """Answered by `Posted` (under `idempotency_key`, the card key) once Feishu took it,
    or `CardNotShown`."""

    turn_id: str
    card_key: str  # names the card for a later UpdateApprovalCard
    request_id: str
    title: str
    detail: str | None
    options: tuple[PermissionOption, ...]
    requester: str
    reply_to: str
    idempotency_key: str
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core


@dataclass(frozen=True)
class Urge:
    """Feishu's in-app urgent notification (加急) on each card of `request_ids` (its message
    in `message_ids`, same order) to `open_ids`, who may answer them. Performed only for a
    request still pending when its turn comes; a refusal for the missing scope comes back as
    `UrgeRefused`."""

    turn_id: str
    request_ids: tuple[str, ...]
    message_ids: tuple[str, ...]
    open_ids: tuple[str, ...]
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core


class CardStatus(StrEnum):
    DECIDED = "decided"
    ANSWERED = "answered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"  # the round ended another way (/stop, fault, closed)
    WITHDRAWN = "withdrawn"  # the round began again on a restarted agent: asked anew if need be


@dataclass(frozen=True)
class UpdateApprovalCard:
    """Close an approval card: everything needed to draw it closed is carried here. `patch`
    False: the click's callback answer already replaced the card, only record the decision."""

    turn_id: str
    card_key: str
    request_id: str
    status: CardStatus
    title: str
    detail: str | None
    by: str | None = None  # open id of who decided
    option: PermissionOption | None = None  # the chosen option
    patch: bool = True
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core
    # Set by the core: the card's message, when Feishu confirmed it before the card closed
    # (else the executor finds it by the card's idempotency key, its post being done).
    message_id: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PostQuestion:
    turn_id: str
    card_key: str
    request_id: str
    text: str
    options: tuple[QuestionOption, ...]  # shown as buttons; a typed reply works too
    requester: str
    reply_to: str
    idempotency_key: str
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core


@dataclass(frozen=True)
class UpdateQuestionCard:
    turn_id: str
    card_key: str
    request_id: str
    status: CardStatus
    text: str
    by: str | None = None
    answers: Mapping[str, str] = field(default_factory=dict)
    patch: bool = True  # False: the callback answer already replaced the card
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core
    message_id: str | None = field(default=None, compare=False)  # as on UpdateApprovalCard


class Toast(StrEnum):
    INFO = "info"
    SUCCESS = "success"
    WARNING = "warning"


@dataclass(frozen=True)
class AnswerCallback:
    """Addressed to the card callback being answered: a toast (`key` is a translation key)
    and, when the click closed the card, the closed card to show in its place."""

    request_id: str
    operator_open_id: str
    toast: Toast
    key: str
    card: UpdateApprovalCard | UpdateQuestionCard | None = None
    params: Params = field(default_factory=dict)


@dataclass(frozen=True)
class SetTimer:
    name: str
    at: float  # same clock as `now`; setting a name again replaces it


@dataclass(frozen=True)
class ClearTimer:
    name: str


@dataclass(frozen=True)
class AskModes:
    """`/mode`: read the agent's session modes for the conversation (opening its session if
    it has none yet) and, with a `choice`, switch; answered by `ModesAnswered`."""

    message_id: str
    session_id: str | None
    choice: str = ""


@dataclass(frozen=True)
class AskConfig:
    """`/model` (kind "model", with a `choice`: set it) or `/config` (kind "config"): read the
    agent's session config options; answered by `ConfigAnswered`."""

    message_id: str
    session_id: str | None
    kind: str
    choice: str = ""


@dataclass(frozen=True)
class AskSwitch:
    """`/agent`, `/cd` and `/resume` (`kind`), `/sessions` (kind "resume", no `choice`):
    list what the conversation may move to, or move it (a new session with that agent, in
    that folder, or an earlier session); answered by `SwitchAnswered`."""

    message_id: str
    kind: str  # "project", "agent", "cd" or "resume"
    choice: str = ""


@dataclass(frozen=True)
class AskStatus:
    """`/status`: read what the runtime knows of the conversation's session (agent, folder,
    mode, model, title, context use); answered by `StatusAnswered`."""

    message_id: str
    session_id: str | None


@dataclass(frozen=True)
class SendFile:
    """Post a file of the workspace to the chat (`/send`, or one the agent's answer links),
    as a reply to `reply_to`; answered by `FileSent`."""

    reply_to: str
    path: str  # as asked: relative to the conversation's folder, or absolute
    idempotency_key: str
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core


@dataclass(frozen=True)
class ShowDiffs:
    """`/diff`: the last round's file changes, as code."""

    message_id: str
    diffs: tuple[tuple[str, str], ...]
    terms: Terms | None = field(default=None, compare=False, repr=False)  # set by the core

    @property
    def idempotency_key(self) -> str:
        return f"{self.message_id}:diff"


@dataclass(frozen=True)
class ManageSchedules:
    """/every, /at, /schedules, /unschedule: done by the engine against the store, answered
    with `ScheduleAnswered`. `manage_all`: the sender may remove anyone's schedule (an
    approver); others only their own."""

    message_id: str
    sender: str
    command: str  # the CommandName's value
    arg: str
    manage_all: bool = False


@dataclass(frozen=True)
class AnnounceSchedule:
    """A due schedule may run: record the run, post its one-line header (`key`, `params`)
    to the conversation, then report `ScheduledRun` with the header's message id."""

    schedule_id: int
    requester: str
    prompt: str = field(repr=False)
    key: str = "schedule.header"
    params: Mapping[str, str | int] = field(default_factory=dict)


@dataclass(frozen=True)
class ScheduleSkipped:
    """A due schedule may not run now (`reason`, a `Gate` value): recorded, and tried again
    at the conversation's next idle moment."""

    schedule_id: int
    reason: str


@dataclass(frozen=True)
class NewSession:
    """Drop the conversation's agent session; the next StartTurn opens a fresh one.
    `reason`: who asked (`new`: the /new command; `operator`: the operator API)."""

    reason: str = "new"


@dataclass(frozen=True)
class RecordTerminal:
    """Store / trace the turn's one terminal outcome; emitted right after its end signal."""

    turn_id: str
    outcome: Outcome
    ending: Ending
    detail: str = ""  # stop reason or fault reason, for operators (never shown to users)
    # Set by the core: when the turn began, if this process began it (else the store knows).
    started_at: float | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Dropped:
    """An input that changed nothing (late event after a terminal, other session, stale
    click); the executor logs it."""

    reason: str
    event: str  # the input's type name
    turn_id: str | None = None


Effect = (
    StartTurn
    | OpenSession
    | SendPrompt
    | React
    | SetReaction
    | MarkMessageDone
    | CancelTurn
    | AbandonTurn
    | AnswerPermission
    | AnswerQuestion
    | PostText
    | EditText
    | RelayAgentText
    | ShowStatusCard
    | PostApprovalCard
    | UpdateApprovalCard
    | Urge
    | PostQuestion
    | UpdateQuestionCard
    | AnswerCallback
    | SetTimer
    | ClearTimer
    | NewSession
    | ManageSchedules
    | AnnounceSchedule
    | ScheduleSkipped
    | AskModes
    | AskConfig
    | AskSwitch
    | AskStatus
    | SendFile
    | ShowDiffs
    | RecordTerminal
    | Supersede
    | Dropped
)
