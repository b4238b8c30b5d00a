"""ACP wire shapes → turn events (pure mappings), and the bounded stderr tail."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from acp.exceptions import RequestError
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommandsUpdate,
    CurrentModeUpdate,
    ElicitationSchema,
    ImageContentBlock,
    PermissionOption,
    SessionNotification,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
)

from bridge.runtime.acp.client import BridgeClient, build_handler, unknown_update_kind
from bridge.runtime.acp.normalize import (
    KNOWN_UPDATE_KINDS,
    SESSION_STATE_KINDS,
    elicitation_content,
    elicitation_question,
    is_qwen_question,
    permission_detail,
    permission_event,
    qwen_answer_response,
    qwen_question,
    turn_event,
    update_kind,
)
from bridge.runtime.acp.process import StderrTail
from bridge.runtime.events import (
    MessageChunk,
    PermissionKind,
    PlanEntry,
    PlanUpdated,
    QuestionKind,
    QuestionOption,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdated,
)

SID = "sess-1"


def update(raw: dict[str, Any]) -> Any:
    """A typed update, parsed exactly as the SDK parses a `session/update` notification."""
    return SessionNotification.model_validate({"sessionId": SID, "update": raw}).update


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


# --- session/update -------------------------------------------------------------------------


def test_message_and_thought_chunks() -> None:
    message = update({"sessionUpdate": "agent_message_chunk", "content": text("hi")})
    thought = update({"sessionUpdate": "agent_thought_chunk", "content": text("hmm")})
    assert isinstance(message, AgentMessageChunk)
    assert isinstance(thought, AgentThoughtChunk)
    assert turn_event(SID, message) == MessageChunk(SID, "hi")
    assert turn_event(SID, thought) == ThoughtChunk(SID, "hmm")


def test_chunks_without_text_are_not_events() -> None:
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    chunk = update({"sessionUpdate": "agent_message_chunk", "content": image})
    assert isinstance(chunk.content, ImageContentBlock)
    assert turn_event(SID, chunk) is None
    assert (
        turn_event(SID, update({"sessionUpdate": "agent_message_chunk", "content": text("")}))
        is None
    )


def test_tool_call_and_its_updates() -> None:
    start = update(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "t1",
            "title": "Run tests",
            "kind": "execute",
            "status": "pending",
        }
    )
    progress = update({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "failed"})
    assert isinstance(start, ToolCallStart)
    assert isinstance(progress, ToolCallProgress)
    assert turn_event(SID, start) == ToolCallStarted(SID, "t1", "Run tests", "execute", "pending")
    assert turn_event(SID, progress) == ToolCallUpdated(SID, "t1", None, "failed")


def test_plan() -> None:
    plan = update(
        {
            "sessionUpdate": "plan",
            "entries": [
                {"content": "read", "priority": "high", "status": "completed"},
                {"content": "write", "priority": "low", "status": "pending"},
            ],
        }
    )
    assert isinstance(plan, AgentPlanUpdate)
    assert turn_event(SID, plan) == PlanUpdated(
        SID, (PlanEntry("read", "completed", "high"), PlanEntry("write", "pending", "low"))
    )


@pytest.mark.parametrize(
    "raw",
    [
        {"sessionUpdate": "available_commands_update", "availableCommands": []},
        {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
        {"sessionUpdate": "session_info_update", "title": "A title"},
        {"sessionUpdate": "user_message_chunk", "content": text("echoed prompt")},
    ],
)
def test_session_state_and_user_echo_are_not_turn_events(raw: dict[str, Any]) -> None:
    typed = update(raw)
    assert turn_event(SID, typed) is None


def test_kind_sets() -> None:
    typed = update({"sessionUpdate": "current_mode_update", "currentModeId": "ask"})
    assert isinstance(typed, CurrentModeUpdate)
    assert update_kind(typed) == "current_mode_update"
    assert update_kind({"sessionUpdate": "x"}) == "x"
    assert SESSION_STATE_KINDS <= KNOWN_UPDATE_KINDS
    assert isinstance(
        update({"sessionUpdate": "available_commands_update", "availableCommands": []}),
        AvailableCommandsUpdate,
    )
    assert isinstance(
        update({"sessionUpdate": "user_message_chunk", "content": text("x")}), UserMessageChunk
    )


def test_unknown_update_kind_of_a_raw_message() -> None:
    def message(kind: str) -> dict[str, Any]:
        params = {"sessionId": SID, "update": {"sessionUpdate": kind}}
        return {"jsonrpc": "2.0", "method": "session/update", "params": params}

    assert unknown_update_kind(message("galaxy_brain")) == "galaxy_brain"
    assert unknown_update_kind(message("agent_message_chunk")) is None
    assert unknown_update_kind({"jsonrpc": "2.0", "id": 1, "result": {}}) is None


# --- permissions ------------------------------------------------------------------------------

OPTIONS = [
    PermissionOption(option_id="a1", name="Allow", kind="allow_once"),
    PermissionOption(option_id="a2", name="Always", kind="allow_always"),
    PermissionOption(option_id="r1", name="Reject", kind="reject_once"),
    PermissionOption(option_id="r2", name="Never", kind="reject_always"),
]


def test_permission_event_maps_every_option_kind() -> None:
    tool_call = ToolCallUpdate(tool_call_id="t9", title="Edit main.py", raw_input={"path": "a.py"})
    event = permission_event(SID, "req-1", tool_call, OPTIONS)
    assert event.request_id == "req-1"
    assert event.title == "Edit main.py"
    assert event.tool_call_id == "t9"
    assert event.detail == "a.py"
    assert [o.kind for o in event.options] == [
        PermissionKind.ALLOW_ONCE,
        PermissionKind.ALLOW_ALWAYS,
        PermissionKind.REJECT_ONCE,
        PermissionKind.REJECT_ALWAYS,
    ]
    assert [o.name for o in event.options] == ["Allow", "Always", "Reject", "Never"]


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"raw_input": {"command": "ls -la"}}, "ls -la"),
        ({"raw_input": {"command": ["git", "push"]}}, "git push"),
        ({"locations": [{"path": "/src/x.py"}]}, "/src/x.py"),
        ({"content": [{"type": "content", "content": text("about to run")}]}, "about to run"),
        ({"raw_input": "opaque"}, None),
        # A write shows the file, then what will be in it (Claude Code's Write, Qwen's
        # write_file); an edit its new text; an ACP diff wins over the raw arguments.
        ({"raw_input": {"file_path": "/w/a.txt", "content": "hi\n"}}, "/w/a.txt\n\nhi\n"),
        ({"raw_input": {"file_path": "/w/a.py", "new_string": "x = 2"}}, "/w/a.py\n\nx = 2"),
        (
            {
                "raw_input": {"file_path": "/w/a.txt", "content": "raw"},
                "content": [{"type": "diff", "path": "/w/a.txt", "newText": "new"}],
            },
            "/w/a.txt\n\nnew",
        ),
        ({"raw_input": {"command": "ls", "content": "ls"}}, "ls"),
    ],
)
def test_permission_detail(fields: dict[str, Any], detail: str | None) -> None:
    tool_call = ToolCallUpdate.model_validate({"toolCallId": "t", **fields})
    assert permission_detail(tool_call) == detail


def test_permission_title_falls_back() -> None:
    event = permission_event(SID, "r", ToolCallUpdate(tool_call_id="t", kind="delete"), OPTIONS)
    assert event.title == "delete"
    assert event.detail is None


# --- qwen questions ---------------------------------------------------------------------------

QWEN_META = {
    "toolName": "ask_user_question",
    "qwenInteractionKind": "user_question",
    "qwenQuestions": [
        {"question": "Which transport?", "header": "Transport", "options": [{"label": "SSE"}]}
    ],
}
QWEN_OPTIONS = [
    PermissionOption(option_id="proceed_once", name="Submit", kind="allow_once"),
    PermissionOption(option_id="cancel", name="Cancel", kind="reject_once"),
]


def test_qwen_question_is_recognised_from_tool_call_or_request_meta() -> None:
    marked = ToolCallUpdate(tool_call_id="q", field_meta=QWEN_META)
    plain = ToolCallUpdate(tool_call_id="q", title="Run ls")
    assert is_qwen_question(marked, {})
    assert is_qwen_question(plain, {"qwenInteractionKind": "USER_QUESTION"})
    assert not is_qwen_question(plain, {})
    assert not is_qwen_question(plain, {"qwenInteractionKind": "peer_message"})


def test_qwen_question_event() -> None:
    tool_call = ToolCallUpdate(tool_call_id="q", title="Ask user 1 question", field_meta=QWEN_META)
    question = qwen_question(SID, "req-q", tool_call, QWEN_OPTIONS, {})
    assert question.event.kind is QuestionKind.QWEN
    assert question.event.text == "Which transport?"
    assert question.event.options == (QuestionOption("SSE", "SSE"),)
    assert question.event.answer_key == "0"
    assert question.submit_option_id == "proceed_once"
    assert question.decline_option_id == "cancel"


def test_qwen_questions_from_raw_input_and_several_questions() -> None:
    questions = [{"question": "First?"}, {"question": "Second?", "options": [{"label": "x"}]}]
    tool_call = ToolCallUpdate(
        tool_call_id="q",
        raw_input={"questions": questions},
        field_meta={"qwenInteractionKind": "user_question"},
    )
    event = qwen_question(SID, "r", tool_call, QWEN_OPTIONS, {}).event
    assert event.text == "First?\nSecond?"
    assert event.options == ()  # options only make sense for a single question


def test_qwen_answer_response_shape() -> None:
    assert qwen_answer_response("proceed_once", {"0": "SSE"}) == {
        "outcome": {"outcome": "selected", "optionId": "proceed_once"},
        "answers": {"0": "SSE"},
    }


# --- elicitation ------------------------------------------------------------------------------


def schema(properties: dict[str, Any], required: list[str] | None = None) -> ElicitationSchema:
    return ElicitationSchema.model_validate(
        {"type": "object", "properties": properties, "required": required}
    )


def test_elicitation_with_one_of_options() -> None:
    one_of = [{"const": "r", "title": "Red"}, {"const": "b", "title": "Blue"}]
    question = elicitation_question(
        SID,
        "req-e",
        "Pick a color",
        schema(
            {"note": {"type": "string"}, "color": {"type": "string", "oneOf": one_of}}, ["color"]
        ),
    )
    event = question.event
    assert event.kind is QuestionKind.ELICITATION
    assert event.text == "Pick a color"
    assert event.answer_key == "color"  # the required property, not the first one
    assert event.options == (QuestionOption("r", "Red"), QuestionOption("b", "Blue"))


@pytest.mark.parametrize(
    ("prop", "options"),
    [
        ({"type": "string", "enum": ["a", "b"]}, ("a", "b")),
        ({"type": "boolean"}, ("true", "false")),
        ({"type": "string"}, ()),
        ({"type": "integer", "minimum": 1}, ()),
        ({"type": "array", "items": {"type": "string", "enum": ["x", "y"]}}, ("x", "y")),
    ],
)
def test_elicitation_property_options(prop: dict[str, Any], options: tuple[str, ...]) -> None:
    event = elicitation_question(SID, "r", "?", schema({"field": prop})).event
    assert event.answer_key == "field"
    assert tuple(o.value for o in event.options) == options


def test_elicitation_content_follows_the_schema_types() -> None:
    types = {"ok": "boolean", "count": "integer", "ratio": "number", "tags": "array", "s": "string"}
    answers = {"ok": "Yes", "count": "3", "ratio": "0.5", "tags": "a, b", "s": "free text"}
    assert elicitation_content(answers, types) == {
        "ok": True,
        "count": 3,
        "ratio": 0.5,
        "tags": ["a", "b"],
        "s": "free text",
    }


# --- stderr tail ------------------------------------------------------------------------------


def test_stderr_tail_splits_bounds_and_truncates() -> None:
    tail = StderrTail(label="agent", max_lines=3, max_line_chars=10, clock=lambda: 0.0)
    tail.feed(b"one\ntw")
    tail.feed(b"o\nthree\n" + b"x" * 50 + b"\nfive")
    tail.flush()
    assert list(tail.lines) == ["three", "x" * 10, "five"]
    assert tail.total_lines == 5
    assert tail.tail(2) == ["x" * 10, "five"]


def test_stderr_tail_never_keeps_an_endless_line() -> None:
    tail = StderrTail(label="agent", max_line_chars=10, clock=lambda: 0.0)
    tail.feed(b"y" * 1000)  # no newline at all
    assert list(tail.lines) == ["y" * 10]


def test_stderr_logging_is_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    tail = StderrTail(label="agent", log_lines_per_second=2, clock=lambda: now[0])
    with caplog.at_level(logging.DEBUG, logger="bridge.runtime.agent_stderr"):
        tail.feed(b"a\nb\nc\nd\n")
        now[0] = 1.5
        tail.feed(b"e\n")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["agent: a", "agent: b", "agent: 2 stderr lines not logged", "agent: e"]
    assert len(tail.lines) == 5  # the tail keeps every line, only the log is limited


# --- methods outside ACP ------------------------------------------------------------------------


async def test_an_agents_own_methods_are_ignored_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """Qwen Code sends `qwen/notify/session/prompt-suggestion` after every turn and asks
    `craft/drainMidTurnQueue` after tool runs (found with the real agent): neither is ACP. A
    notification is dropped, a request answered "method not found"; nothing is logged as an
    error (the SDK's router logged each one with a traceback)."""
    caplog.set_level(logging.DEBUG)
    handle = build_handler(BridgeClient(host=None, generation=0))  # type: ignore[arg-type]
    params = {"sessionId": SID, "suggestion": "run the tests"}
    assert await handle("qwen/notify/session/prompt-suggestion", params, True) is None
    with pytest.raises(RequestError) as refused:
        await handle("craft/drainMidTurnQueue", {"sessionId": SID}, False)
    assert refused.value.code == -32601
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "run the tests" not in caplog.text  # what the agent sent is never logged
