"""Normalized turn events: what any agent runtime reports to the conversation core.

Pure values (frozen dataclasses), no I/O; the core imports these and nothing else from
`bridge.runtime`. Every event names the agent session it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class StopReason(StrEnum):
    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    MAX_TURN_REQUESTS = "max_turn_requests"
    REFUSAL = "refusal"
    CANCELLED = "cancelled"


class PermissionKind(StrEnum):
    ALLOW_ONCE = "allow_once"
    ALLOW_ALWAYS = "allow_always"
    REJECT_ONCE = "reject_once"
    REJECT_ALWAYS = "reject_always"


class QuestionKind(StrEnum):
    ELICITATION = "elicitation"  # ACP `elicitation/create` (unstable)
    QWEN = "qwen"  # permission request with _meta.qwenInteractionKind == "user_question"


@dataclass(frozen=True)
class PermissionOption:
    option_id: str
    name: str
    kind: PermissionKind


@dataclass(frozen=True)
class QuestionOption:
    value: str
    label: str


@dataclass(frozen=True)
class PlanEntry:
    content: str
    status: str  # pending | in_progress | completed
    priority: str = "medium"


@dataclass(frozen=True)
class TurnEvent:
    session_id: str


@dataclass(frozen=True)
class PromptSent(TurnEvent):
    pass


@dataclass(frozen=True)
class MessageChunk(TurnEvent):
    text: str


@dataclass(frozen=True)
class AnswerRewound(TurnEvent):
    """The prompt goes again from its start, on a restarted agent (the first run's answer
    was a cancelled turn's leftover): what the first run wrote meanwhile is said again."""


@dataclass(frozen=True)
class ThoughtChunk(TurnEvent):
    text: str


@dataclass(frozen=True)
class ToolCallStarted(TurnEvent):
    tool_call_id: str
    title: str
    kind: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class ToolCallUpdated(TurnEvent):
    tool_call_id: str
    title: str | None = None
    status: str | None = None  # pending | in_progress | completed | failed


@dataclass(frozen=True)
class PlanUpdated(TurnEvent):
    entries: tuple[PlanEntry, ...]


@dataclass(frozen=True)
class PermissionRequested(TurnEvent):
    """The agent waits for an approval; answer with `AgentRuntime.answer_permission`."""

    request_id: str
    title: str
    options: tuple[PermissionOption, ...]
    tool_call_id: str | None = None
    detail: str | None = None  # e.g. the command or the file the tool call touches


@dataclass(frozen=True)
class QuestionAsked(TurnEvent):
    """The agent waits for a reply; answer with `AgentRuntime.answer_question`."""

    request_id: str
    kind: QuestionKind
    text: str
    options: tuple[QuestionOption, ...] = ()
    # The field an answer fills (elicitation schema property / qwen answers key).
    answer_key: str = "answer"


@dataclass(frozen=True)
class TurnEnded(TurnEvent):
    stop_reason: StopReason


@dataclass(frozen=True)
class RuntimeFailed(TurnEvent):
    """The prompt failed with an error from the agent (the process may still live)."""

    reason: str


@dataclass(frozen=True)
class RuntimeExited(TurnEvent):
    """The agent process ended; every turn on it is over. `session_id` may be ""."""

    returncode: int | None = None
    signal: int | None = None
    restarting: bool = True
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Usage:
    """Context use as the agent last reported it (ACP `usage_update`)."""

    used: int  # tokens in context
    size: int  # the context window
    cost: float | None = None  # cumulative for the session
    currency: str | None = None


@dataclass(frozen=True)
class UsageReported(TurnEvent):
    """The agent reported context use during a turn (for the usage footer)."""

    usage: Usage


@dataclass(frozen=True)
class FileOffered(TurnEvent):
    """The agent's answer links a file (an ACP resource link): sent to the chat with it."""

    uri: str
    name: str = ""


@dataclass(frozen=True)
class DiffReported(TurnEvent):
    """A tool call changed a file (ACP diff content), as a unified diff; shown on /diff."""

    path: str
    diff: str


@dataclass(frozen=True)
class SessionFacts:
    """What `/status` and `/sessions` show of a session: which agent in which folder, its
    mode, model, title and context use (None: not known or not offered)."""

    agent: str = ""
    folder: str = ""
    mode: str | None = None
    model: str | None = None
    title: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class ModeOption:
    mode_id: str
    name: str


@dataclass(frozen=True)
class SessionModes:
    """The session modes an agent offers (ACP `modes`), and the one it is in."""

    current: str | None
    available: tuple[ModeOption, ...]


@dataclass(frozen=True)
class ConfigOption:
    """One session config option an agent offers (ACP `configOptions`): a select's values, or
    a boolean's "true" / "false"."""

    config_id: str
    name: str
    category: str | None  # "model", "mode", "thought_level", …
    current: str
    values: tuple[ModeOption, ...] = ()  # (value, name) pairs of a select


def model_option(options: tuple[ConfigOption, ...]) -> ConfigOption | None:
    """The option that picks the model: ACP category `model` (or an option named so)."""
    return next(
        (o for o in options if o.category == "model"),
        next((o for o in options if o.config_id == "model"), None),
    )


def config_from_wire(raw: Any) -> tuple[ConfigOption, ...]:
    """`configOptions` as the agent sent them (JSON); malformed entries are skipped."""
    found: list[ConfigOption] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        category = item.get("category")
        kind, current = item.get("type"), item.get("currentValue")
        values: list[ModeOption] = []
        for entry in item.get("options") or []:
            group = entry.get("options") if isinstance(entry, dict) else None
            for option in group if isinstance(group, list) else [entry]:
                if isinstance(option, dict) and isinstance(option.get("value"), str):
                    values.append(ModeOption(option["value"], str(option.get("name", ""))))
        if kind == "boolean":
            current = "true" if current is True else "false"
        found.append(
            ConfigOption(
                item["id"],
                str(item.get("name", item["id"])),
                category if isinstance(category, str) else None,
                str(current or ""),
                tuple(values),
            )
        )
    return tuple(found)
