"""ACP wire shapes → normalized turn events (progress, and the files and diffs an update
offers besides). Pure functions, no I/O.

The ACP adapter calls these from its client callbacks; keeping them pure lets the unit tests
pin every mapping without a subprocess.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    ElicitationBooleanPropertySchema,
    ElicitationMultiSelectPropertySchema,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    FileEditToolCallContent,
    PermissionOption,
    PlanUpdateItems,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from bridge.runtime.events import (
    DiffReported,
    FileOffered,
    MessageChunk,
    PermissionKind,
    PermissionRequested,
    PlanEntry,
    PlanUpdated,
    QuestionAsked,
    QuestionKind,
    QuestionOption,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEvent,
)
from bridge.runtime.events import PermissionOption as EventPermissionOption

# Every `sessionUpdate` kind the SDK 0.12.1 schema knows; anything else is "unknown".
KNOWN_UPDATE_KINDS = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "plan_update",
        "plan_removed",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
    }
)

# Kinds that describe the session rather than a turn's progress: never turn events.
SESSION_STATE_KINDS = frozenset(
    {
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
    }
)

QWEN_QUESTION_KIND = "user_question"
_DETAIL_KEYS = ("command", "cmd", "file_path", "filePath", "path", "url", "pattern", "query")
# Only a bound against absurd sizes: the approver must see the whole command (the card shows
# its head and says how long it is; the core posts the rest), never a silently cut one.
_DETAIL_MAX = 100_000


def update_kind(update: Any) -> str:
    """The wire `sessionUpdate` name of a typed update (or of a raw dict)."""
    if isinstance(update, Mapping):
        return str(update.get("sessionUpdate", ""))
    return str(getattr(update, "session_update", ""))


def turn_event(session_id: str, update: Any) -> TurnEvent | None:
    """The turn event for one `session/update`, or None when it is not turn progress."""
    if isinstance(update, AgentMessageChunk):
        text = _text_of(update.content)
        return MessageChunk(session_id, text) if text else None
    if isinstance(update, AgentThoughtChunk):
        text = _text_of(update.content)
        return ThoughtChunk(session_id, text) if text else None
    if isinstance(update, ToolCallStart):
        return ToolCallStarted(
            session_id,
            tool_call_id=update.tool_call_id,
            title=update.title,
            kind=update.kind,
            status=update.status,
        )
    if isinstance(update, ToolCallProgress):
        return ToolCallUpdated(
            session_id, tool_call_id=update.tool_call_id, title=update.title, status=update.status
        )
    if isinstance(update, AgentPlanUpdate):
        return PlanUpdated(session_id, entries=_plan_entries(update.entries))
    if isinstance(update, AgentPlanContentUpdate) and isinstance(update.plan, PlanUpdateItems):
        return PlanUpdated(session_id, entries=_plan_entries(update.plan.entries))
    return None


def _text_of(content: Any) -> str:
    # Images, audio and resources have no text to relay; the chat only shows text.
    return content.text if isinstance(content, TextContentBlock) else ""


def _plan_entries(entries: Sequence[Any]) -> tuple[PlanEntry, ...]:
    return tuple(
        PlanEntry(content=entry.content, status=entry.status, priority=entry.priority)
        for entry in entries
    )


# --- permission requests ----------------------------------------------------------------------


MAX_DIFF_CHARS: Final = 50_000  # one file's diff kept for /diff; longer ones are cut


def offer_events(session_id: str, update: Any) -> list[TurnEvent]:
    """What an update carries besides progress: files the agent's answer links (a
    `resource_link` in an agent message) and file changes its tools report (`diff`
    content), for the core to show with /diff and send with the answer."""
    if isinstance(update, AgentMessageChunk) and isinstance(update.content, ResourceContentBlock):
        link = update.content
        if link.uri.startswith("file://"):
            return [FileOffered(session_id, uri=link.uri, name=link.name)]
        return []
    if isinstance(update, ToolCallStart | ToolCallProgress):
        return [
            DiffReported(session_id, path=item.path, diff=_unified(item))
            for item in update.content or []
            if isinstance(item, FileEditToolCallContent)
        ]
    return []


def _unified(item: FileEditToolCallContent) -> str:
    old = (item.old_text or "").splitlines(keepends=True)
    new = item.new_text.splitlines(keepends=True)
    name = item.path
    lines = difflib.unified_diff(old, new, fromfile=f"a/{name}", tofile=f"b/{name}")
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text[:MAX_DIFF_CHARS]


def permission_options(options: Sequence[PermissionOption]) -> tuple[EventPermissionOption, ...]:
    return tuple(
        EventPermissionOption(option_id=o.option_id, name=o.name, kind=PermissionKind(o.kind))
        for o in options
    )


def permission_event(
    session_id: str,
    request_id: str,
    tool_call: ToolCallUpdate,
    options: Sequence[PermissionOption],
) -> PermissionRequested:
    return PermissionRequested(
        session_id,
        request_id=request_id,
        title=tool_call.title or tool_call.kind or "tool call",
        options=permission_options(options),
        tool_call_id=tool_call.tool_call_id,
        detail=permission_detail(tool_call),
    )


def permission_detail(tool_call: ToolCallUpdate) -> str | None:
    """What the approver needs to see: the command, the file, or the first text content;
    for a file write or edit, the file and then the text that will be written."""
    target = _permission_target(tool_call)
    written = _written_text(tool_call)
    if target and written and written.strip() != target.strip():
        return f"{target}\n\n{written}"[:_DETAIL_MAX]
    return target


def _written_text(tool_call: ToolCallUpdate) -> str | None:
    """The new text of a write or edit: an ACP diff's new text (Claude Code, Qwen Code), else
    the tool's own `content` / `new_string` argument."""
    for item in tool_call.content or ():
        if isinstance(item, FileEditToolCallContent):
            return item.new_text
    raw = tool_call.raw_input
    if isinstance(raw, Mapping):
        for key in ("content", "new_string", "newString"):
            value = raw.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return None


def _permission_target(tool_call: ToolCallUpdate) -> str | None:
    raw = tool_call.raw_input
    if isinstance(raw, Mapping):
        for key in _DETAIL_KEYS:
            value = raw.get(key)
            if isinstance(value, str) and value.strip():
                return value[:_DETAIL_MAX]
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return " ".join(value)[:_DETAIL_MAX]
    if tool_call.locations:
        return tool_call.locations[0].path[:_DETAIL_MAX]
    for item in tool_call.content or ():
        inner = getattr(item, "content", None)
        if isinstance(inner, TextContentBlock) and inner.text.strip():
            return inner.text[:_DETAIL_MAX]
        path = getattr(item, "path", None)
        if isinstance(path, str):
            return path[:_DETAIL_MAX]
    return None


# --- qwen questions ---------------------------------------------------------------------------


def is_qwen_question(tool_call: ToolCallUpdate, request_meta: Mapping[str, Any]) -> bool:
    """qwen-code marks its ask_user_question tool with `_meta.qwenInteractionKind`."""
    for meta in (tool_call.field_meta or {}, request_meta):
        kind = meta.get("qwenInteractionKind")
        if isinstance(kind, str) and kind.lower() == QWEN_QUESTION_KIND:
            return True
    return False


@dataclass(frozen=True)
class QwenQuestion:
    event: QuestionAsked
    submit_option_id: str | None  # the allow option that carries the answers
    decline_option_id: str | None  # qwen's "Cancel" option: a declined (not cancelled) answer


def qwen_question(
    session_id: str,
    request_id: str,
    tool_call: ToolCallUpdate,
    options: Sequence[PermissionOption],
    request_meta: Mapping[str, Any],
) -> QwenQuestion:
    questions = _qwen_questions(tool_call, request_meta)
    lines = [q.get("question") or q.get("header") or "" for q in questions]
    text = "\n".join(str(line) for line in lines if line) or tool_call.title or "?"
    choices: tuple[QuestionOption, ...] = ()
    if len(questions) == 1:
        choices = tuple(
            QuestionOption(value=str(o["label"]), label=str(o["label"]))
            for o in questions[0].get("options") or ()
            if isinstance(o, Mapping) and o.get("label")
        )
    submit = next((o.option_id for o in options if o.kind == "allow_once"), None)
    submit = submit or next((o.option_id for o in options if o.kind.startswith("allow")), None)
    decline = next((o.option_id for o in options if o.kind.startswith("reject")), None)
    event = QuestionAsked(
        session_id,
        request_id=request_id,
        kind=QuestionKind.QWEN,
        text=text,
        options=choices,
        answer_key="0",  # qwen keys answers by question index
    )
    return QwenQuestion(event=event, submit_option_id=submit, decline_option_id=decline)


def _qwen_questions(
    tool_call: ToolCallUpdate, request_meta: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    raw_input = tool_call.raw_input if isinstance(tool_call.raw_input, Mapping) else {}
    for source in (tool_call.field_meta or {}, request_meta):
        found = source.get("qwenQuestions")
        if isinstance(found, list):
            return [q for q in found if isinstance(q, Mapping)]
    found = raw_input.get("questions")
    return [q for q in found if isinstance(q, Mapping)] if isinstance(found, list) else []


def qwen_answer_response(option_id: str, answers: Mapping[str, str]) -> dict[str, Any]:
    """qwen reads the answers from a top-level `answers` field next to the outcome."""
    return {
        "outcome": {"outcome": "selected", "optionId": option_id},
        "answers": {str(key): str(value) for key, value in answers.items()},
    }


# --- elicitation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ElicitationQuestion:
    event: QuestionAsked
    types: Mapping[str, str]  # property name → JSON type, to convert the string answers


def elicitation_question(
    session_id: str, request_id: str, message: str, schema: ElicitationSchema
) -> ElicitationQuestion:
    properties = dict(schema.properties or {})
    required = list(schema.required or [])
    # Ask for the first required property (else the first one); the others keep defaults.
    key = next((name for name in required if name in properties), None)
    key = key or next(iter(properties), "answer")
    prop = properties.get(key)
    types = {name: str(getattr(p, "type", "string")) for name, p in properties.items()}
    event = QuestionAsked(
        session_id,
        request_id=request_id,
        kind=QuestionKind.ELICITATION,
        text=message,
        options=_property_options(prop),
        answer_key=key,
    )
    return ElicitationQuestion(event=event, types=types)


def _property_options(prop: Any) -> tuple[QuestionOption, ...]:
    if isinstance(prop, ElicitationStringPropertySchema):
        if prop.one_of:
            return tuple(QuestionOption(value=o.const, label=o.title) for o in prop.one_of)
        return tuple(QuestionOption(value=v, label=v) for v in prop.enum or ())
    if isinstance(prop, ElicitationBooleanPropertySchema):
        return (QuestionOption("true", "true"), QuestionOption("false", "false"))
    if isinstance(prop, ElicitationMultiSelectPropertySchema):
        items = prop.items
        titled = getattr(items, "any_of", None)
        if titled:
            return tuple(QuestionOption(value=o.const, label=o.title) for o in titled)
        return tuple(QuestionOption(value=v, label=v) for v in getattr(items, "enum", None) or ())
    return ()


def elicitation_content(
    answers: Mapping[str, str], types: Mapping[str, str]
) -> dict[str, str | int | float | bool | list[str]]:
    """String answers converted to the JSON type each schema property declares."""
    content: dict[str, str | int | float | bool | list[str]] = {}
    for key, value in answers.items():
        kind = types.get(key, "string")
        if kind == "boolean":
            content[key] = value.strip().lower() in {"true", "yes", "1", "y"}
        elif kind == "integer":
            content[key] = int(value)
        elif kind == "number":
            content[key] = float(value)
        elif kind == "array":
            content[key] = [part.strip() for part in value.split(",") if part.strip()]
        else:
            content[key] = value
    return content


__all__ = [
    "KNOWN_UPDATE_KINDS",
    "SESSION_STATE_KINDS",
    "ElicitationQuestion",
    "QwenQuestion",
    "elicitation_content",
    "elicitation_question",
    "is_qwen_question",
    "permission_detail",
    "permission_event",
    "permission_options",
    "qwen_answer_response",
    "qwen_question",
    "turn_event",
    "update_kind",
]
