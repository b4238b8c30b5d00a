"""What the conversation core consumes: runtime turn events plus chat and clock inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from bridge.core.effects import CardView
from bridge.core.state import Attachment
from bridge.runtime.events import ConfigOption, SessionFacts, SessionModes, TurnEvent


@dataclass(frozen=True)
class UserMessage:
    """A user's text message (already journaled, deduplicated and filtered by the receiver)."""

    message_id: str
    sender: str
    text: str
    attachments: tuple[Attachment, ...] = ()  # images and files it carries (text may be "")
    in_group: bool = False  # it came from a group chat


@dataclass(frozen=True)
class UnsupportedMessage:
    """A message no turn takes: an image, a file, a sticker, or a text that was only an
    @-mention."""

    message_id: str
    sender: str
    in_group: bool = False  # it came from a group chat


@dataclass(frozen=True)
class AttachmentFailed:
    """An image or file of the turn could not be brought to the agent: over the size limit
    (`limit_mb`), or Feishu would not hand it over. The turn goes on without it."""

    turn_id: str
    name: str
    too_large: bool
    limit_mb: int = 0


@dataclass(frozen=True)
class VoiceHeard:
    """The turn's voice message made words (`text`, the prompt), or why not: `failure` is
    too_long (past `limit_seconds`), refused (the app lacks the scope), failed, silent,
    undecodable or unfetched. A failure ends the turn with one line; the agent gets nothing."""

    turn_id: str
    text: str = ""
    failure: str = ""
    limit_seconds: int = 0


@dataclass(frozen=True)
class FileSent:
    """How posting a file went: `sent`, or why not — `outside` the workspace, `missing`,
    `too_large` (`limit_mb`), `failed` (Feishu refused it)."""

    reply_to: str
    name: str
    result: str
    limit_mb: int = 0


@dataclass(frozen=True)
class MessageRecalled:
    """The user took a message back in Feishu: dropped if it waits in the queue, its round
    stopped if it started the running one; an answered message changes nothing."""

    message_id: str


@dataclass(frozen=True)
class AccessRefused:
    """A message from a sender or chat outside the allow-lists (one refusal per message).
    `menu`: a bot-menu click (`message_id` is its event's id), refused in the same words."""

    message_id: str
    menu: bool = False


@dataclass(frozen=True)
class PostGivenUp:
    """A post Feishu never took within its idempotency window (an outage of an hour): the
    conversation is told, in reply to the message that post was about."""

    reply_to: str
    idempotency_key: str


@dataclass(frozen=True)
class Posted:
    """Feishu took a post: an approval or question card (`idempotency_key` is its card
    key), as `message_ids`. The core keeps which message the card is, to close it, and
    counts the user's wait (reminder, timeout) from the step's `now`: fed the moment
    Feishu answers."""

    idempotency_key: str
    turn_id: str | None
    message_ids: tuple[str, ...]


@dataclass(frozen=True)
class UrgeRefused:
    """Feishu refused the urgent notification of `Urge` for lack of the scope
    im:message.urgent: those who may answer these requests are @-mentioned instead (once), and
    the conversation mentions from now on."""

    turn_id: str
    request_ids: tuple[str, ...]


@dataclass(frozen=True)
class UrgentUnavailable:
    """The app lacks the scope im:message.urgent (found at start-up, or by a refusal in
    another conversation): cards left unanswered are urged by @-mention from now on."""


class CommandName(StrEnum):
    NEW = "new"
    STOP = "stop"
    STATUS = "status"
    HELP = "help"
    MODE = "mode"
    MODEL = "model"
    CONFIG = "config"
    PROJECT = "project"
    AGENT = "agent"
    CD = "cd"
    SESSIONS = "sessions"
    RESUME = "resume"
    SEND = "send"
    DIFF = "diff"
    EVERY = "every"
    AT = "at"
    SCHEDULES = "schedules"
    UNSCHEDULE = "unschedule"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Command:
    name: CommandName
    message_id: str
    sender: str
    raw: str = ""  # the command word as typed, e.g. "/foo" (shown back for unknown commands)
    arg: str = ""  # what follows the word, e.g. "plan" in "/mode plan"
    in_group: bool = False  # it came from a group chat
    # A click in the bot's menu (`message_id` is its event's id): no message to react to or
    # to reply to, nothing journaled; `raw` is the menu item's event_key. UNKNOWN: a key
    # that names no command the menu drives.
    menu: bool = False


@dataclass(frozen=True)
class ApprovalClicked:
    """A button on an approval card. The core decides who may click: the turn's requester or
    anyone in `Options.approvers`; others get a `RefuseClick`."""

    request_id: str
    option_id: str
    operator_open_id: str


@dataclass(frozen=True)
class QuestionAnswered:
    """A button on a question card (a typed reply arrives as a `UserMessage`); the core files
    the choice under the question's answer key."""

    request_id: str
    choice: str
    operator_open_id: str


@dataclass(frozen=True)
class SessionOpened:
    """The turn runner holds a session for the turn; the core answers `SendPrompt`, or
    nothing when the turn ended meanwhile (e.g. /stop while the agent was starting)."""

    turn_id: str
    session_id: str
    # The conversation's session could not be resumed (the agent lost it, or the
    # conversation moved to another instance): this round starts a fresh one.
    fresh: bool = False


@dataclass(frozen=True)
class SessionNotReloaded:
    """The turn's prompt could not go out: the agent (restarted since) refused to reload
    `session_id`, and nothing reached it. The core asks once for a session opened anew
    (`OpenSession`), or ends the turn as the prompt failing."""

    turn_id: str
    session_id: str
    reason: str


@dataclass(frozen=True)
class ScheduleDue:
    """A schedule's occurrence came due (or is still due and the conversation just went
    idle). The core runs the gate (core/schedules.py): `AnnounceSchedule` when it may run,
    `ScheduleSkipped` with the reason when it may not."""

    schedule_id: int
    requester: str  # whose turn the run is: the schedule's creator
    prompt: str = field(repr=False)


@dataclass(frozen=True)
class ScheduledRun:
    """A schedule's header line is posted (`message_id`): the run is a turn answering it,
    on behalf of `requester`. Queued behind a round that began meanwhile, never a reply."""

    message_id: str
    schedule_id: int
    requester: str
    text: str = field(repr=False)


class ScheduleResult(StrEnum):
    """How /every, /at, /schedules or /unschedule went (the engine did the store's part)."""

    ADDED = "added"
    LISTED = "listed"
    EMPTY = "empty"
    REMOVED = "removed"
    NOT_FOUND = "not_found"
    NOT_YOURS = "not_yours"
    CONFIGURED = "configured"  # an operator's schedule: changed in the configuration only
    BAD_INTERVAL = "bad_interval"
    TOO_SHORT = "too_short"
    BAD_TIME = "bad_time"
    NO_PROMPT = "no_prompt"
    TOO_MANY = "too_many"
    UNSCHEDULE_USAGE = "unschedule_usage"


@dataclass(frozen=True)
class ScheduleAnswered:
    message_id: str
    result: ScheduleResult
    params: tuple[tuple[str, str | int], ...] = ()


ScheduleInput = ScheduleDue | ScheduledRun | ScheduleAnswered


@dataclass(frozen=True)
class TimerFired:
    """A timer set with `SetTimer` went off. The machine re-checks every deadline against
    `now`, so a late or stale firing is harmless."""

    name: str


@dataclass(frozen=True)
class Tick:
    """A periodic clock input; checks every deadline like `TimerFired`."""


@dataclass(frozen=True)
class RuntimeUnavailableAtStart:
    """`StartTurn` could not reach a runtime (cannot start, or the process limit is hit)."""

    turn_id: str
    reason: str
    limit_reached: bool = False


@dataclass(frozen=True)
class TurnBegun:
    """The store's record of the turn was begun by this process (not by an earlier one
    that died before its prompt): nothing of it can have been posted before."""

    turn_id: str


class NotStartedReason(StrEnum):
    SHUTTING_DOWN = "shutting_down"  # the bridge is stopping: the next start runs it
    NOT_OWNER = "not_owner"  # several instances: the one holding the lease runs it


@dataclass(frozen=True)
class TurnNotStarted:
    """The turn was never handed to the agent, and no fault: its message stays journaled
    for whoever runs the conversation next (this process after a restart, or the instance
    that holds its lease), which runs it then. Nothing is said here."""

    turn_id: str
    reason: NotStartedReason


@dataclass(frozen=True)
class StartFailed:
    """The bridge's own part failed before the turn's prompt could go out (its images or
    files could not be fetched at all): the round is given up, its user asked to resend."""

    turn_id: str
    reason: str


@dataclass(frozen=True)
class CardNotShown:
    """Feishu refused an approval or question card (and its plain fallback), or never took
    it within its de-duplication window (`given_up`: a longer outage): nobody can answer
    it, so the request must not wait on it."""

    turn_id: str
    request_id: str
    given_up: bool = False


@dataclass(frozen=True)
class ModesAnswered:
    """The agent's session modes for `/mode` (None: it offers none), and how switching to
    `choice` went (`error` is the agent's short reason)."""

    message_id: str
    modes: SessionModes | None
    choice: str = ""
    error: str | None = None


class SwitchResult(StrEnum):
    LISTED = "listed"  # no choice was given: `entries` is the list
    SWITCHED = "switched"  # the conversation moved; `detail` names where
    SAME = "same"  # it is there already
    UNKNOWN = "unknown"  # no such agent, workspace, folder or session
    OUTSIDE = "outside"  # a folder outside every workspace
    FRESH = "fresh"  # the earlier session could not be resumed: a new one was opened
    FAILED = "failed"  # the agent could not be reached; `detail` says why


@dataclass(frozen=True)
class SwitchAnswered:
    """How `/agent`, `/cd`, `/sessions` or `/resume` went. `entries` are the choices, one a
    line, already numbered or named (data: agent names, folders, session titles)."""

    message_id: str
    kind: str
    result: SwitchResult
    current: str = ""
    entries: tuple[str, ...] = ()
    choice: str = ""
    detail: str = ""


@dataclass(frozen=True)
class StatusAnswered:
    """What the runtime knows of the conversation's session, for `/status`."""

    message_id: str
    facts: SessionFacts


@dataclass(frozen=True)
class ConfigAnswered:
    """The agent's session config options for `/model` or `/config`, and how setting the
    model to `choice` went."""

    message_id: str
    kind: str  # "model" or "config"
    options: tuple[ConfigOption, ...]
    choice: str = ""
    error: str | None = None


@dataclass(frozen=True)
class AgentCommands:
    """The slash commands the conversation's agent offers (ACP `available_commands_update`),
    without the "/"; a typed one that is not the bridge's own goes to the agent."""

    names: tuple[str, ...]
    agent: str = ""  # the agent profile's name, shown above them in /help


@dataclass(frozen=True)
class StatusCardFailed:
    """Feishu refused the status card in every form: the turn goes on in lines, and a
    `view` that was never shown (an answer, an ended line) is posted as messages."""

    turn_id: str
    reply_to: str
    view: CardView
    final: bool


@dataclass(frozen=True)
class RuntimeRestarted:
    """The runtime is back after a `RuntimeExited(restarting=True)`.

    `reloaded`: the earlier session was reloaded (context kept); otherwise `session_id` is a
    fresh session. `turn_resumed`: the runtime reports the cut turn itself goes on.
    """

    session_id: str
    reloaded: bool
    turn_resumed: bool = False


@dataclass(frozen=True)
class RuntimeRestartFailed:
    reason: str


@dataclass(frozen=True)
class TurnInterruptedByRestart:
    """At start-up the journal holds a turn without a terminal: the bridge died under it."""

    turn_id: str
    message_id: str
    requester: str


@dataclass(frozen=True)
class MessageRecovered:
    """At start-up, a journaled message the last process took but never finished: it runs
    now (or queues), and its user is told it was picked up again. No second ack."""

    message: UserMessage | Command | UnsupportedMessage


@dataclass(frozen=True)
class ConversationClosed:
    """The chat is gone (bot removed, chat disbanded): nobody is left to tell."""

    reason: str = ""


@dataclass(frozen=True)
class SessionCloseRequested:
    """An operator ends the conversation's agent session (the operator API), like /new but
    without a chat line; only between rounds (the API refuses it while a turn runs)."""


CoreEvent = (
    TurnEvent
    | UserMessage
    | UnsupportedMessage
    | AccessRefused
    | PostGivenUp
    | Posted
    | MessageRecalled
    | FileSent
    | AttachmentFailed
    | VoiceHeard
    | MessageRecovered
    | Command
    | SessionOpened
    | SessionNotReloaded
    | ApprovalClicked
    | QuestionAnswered
    | TimerFired
    | Tick
    | ScheduleDue
    | ScheduledRun
    | ScheduleAnswered
    | RuntimeUnavailableAtStart
    | StartFailed
    | TurnBegun
    | TurnNotStarted
    | CardNotShown
    | UrgeRefused
    | UrgentUnavailable
    | StatusCardFailed
    | ModesAnswered
    | ConfigAnswered
    | SwitchAnswered
    | StatusAnswered
    | AgentCommands
    | RuntimeRestarted
    | RuntimeRestartFailed
    | TurnInterruptedByRestart
    | ConversationClosed
    | SessionCloseRequested
)
