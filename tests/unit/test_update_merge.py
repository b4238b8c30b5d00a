"""Issue 33: runs of one session's streaming updates are merged before the SDK validates
them, and what a user would see is exactly what per-chunk processing shows.

The property test runs any stream through both paths the way the bridge consumes it (the
SDK's validation of each notification, refused ones dropped as the SDK drops them, then
`turn_event`), folds the events into what the core keeps per session (the answer text, the
tool list by the card's rules, the activity) and compares the state at every request and
response, at every other event, and at the end."""

from __future__ import annotations

import copy
from typing import Any

from acp.schema import SessionNotification
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from bridge.runtime.acp.normalize import turn_event
from bridge.runtime.acp.transport import Merger, keyed, merge, merge_key, update_session
from bridge.runtime.events import (
    MessageChunk,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEvent,
)


def note(session: str, update: dict[str, Any], **outer: Any) -> dict[str, Any]:
    params = {"sessionId": session, "update": update}
    return {"jsonrpc": "2.0", "method": "session/update", "params": params, **outer}


def chunk(session: str, text: Any, kind: str = "agent_message_chunk", **extra: Any) -> Any:
    return note(
        session, {"sessionUpdate": kind, "content": {"type": "text", "text": text}, **extra}
    )


def tool_update(session: str, tool: str, **fields: Any) -> dict[str, Any]:
    return note(session, {"sessionUpdate": "tool_call_update", "toolCallId": tool, **fields})


REQUEST = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "session/request_permission",
    "params": {"sessionId": "a", "toolCall": {"toolCallId": "t1"}, "options": []},
}
RESPONSE = {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}


# --- the merger ---------------------------------------------------------------------------


def test_a_run_of_text_chunks_becomes_one_with_the_joined_text() -> None:
    merged = merge(keyed([chunk("a", "he"), chunk("a", "l"), chunk("a", "lo")]))
    assert merged == [chunk("a", "hello")]


def test_another_sessions_updates_between_do_not_break_a_run() -> None:
    stream = [chunk("a", "1"), chunk("b", "x"), chunk("a", "2"), chunk("b", "y")]
    assert merge(keyed(stream)) == [chunk("a", "12"), chunk("b", "xy")]


def test_a_request_or_a_response_is_never_merged_and_splits_every_run() -> None:
    stream = [chunk("a", "1"), chunk("b", "x"), REQUEST, chunk("a", "2"), RESPONSE, chunk("b", "y")]
    assert merge(keyed(stream)) == stream


def test_another_update_of_the_session_ends_its_run_only() -> None:
    plan = note("a", {"sessionUpdate": "plan", "entries": []})
    stream = [chunk("a", "1"), chunk("b", "x"), plan, chunk("a", "2"), chunk("b", "y")]
    assert merge(keyed(stream)) == [chunk("a", "1"), chunk("b", "xy"), plan, chunk("a", "2")]


def test_thoughts_and_answer_text_do_not_mix() -> None:
    stream = [chunk("a", "1"), chunk("a", "t", "agent_thought_chunk"), chunk("a", "2")]
    assert merge(keyed(stream)) == stream


def test_chunks_of_different_message_ids_stay_apart() -> None:
    stream = [chunk("a", "1", messageId="m1"), chunk("a", "2", messageId="m2")]
    assert merge(keyed(stream)) == stream
    same = [chunk("a", "1", messageId="m1"), chunk("a", "2", messageId="m1")]
    assert merge(keyed(same)) == [chunk("a", "12", messageId="m1")]


def test_repeated_tool_status_keeps_the_last_non_empty_title_and_status() -> None:
    stream = [
        tool_update("a", "t1", title="Read", status="in_progress"),
        tool_update("a", "t1", status="in_progress"),
        tool_update("a", "t1", title="", status="completed"),
    ]
    assert merge(keyed(stream)) == [tool_update("a", "t1", title="Read", status="completed")]


def test_a_titled_update_does_not_join_an_untitled_run() -> None:
    # Per chunk, the call is listed from its first title on, "pending" until told otherwise:
    # the in_progress said before it must not count.
    stream = [tool_update("a", "t1", status="in_progress"), tool_update("a", "t1", title="Run")]
    assert merge(keyed(stream)) == stream


def test_updates_of_another_tool_call_stay_apart() -> None:
    stream = [tool_update("a", "t1", status="completed"), tool_update("a", "t2", status="failed")]
    assert merge(keyed(stream)) == stream


MALFORMED = [
    chunk("a", 5),  # text not a string
    chunk("a", None),
    note("a", {"sessionUpdate": "agent_message_chunk"}),  # no content
    note("a", {"sessionUpdate": "agent_message_chunk", "content": "hi"}),
    note("a", {"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "text": "x"}}),
    chunk("a", "x", messageId=5),
    chunk("a", "x", messageId=None),
    chunk("a", "x", _meta={"k": 1}),  # anything beyond the plain shape: left alone
    tool_update("a", "t1", status="bogus"),
    tool_update("a", "t1", status=None),
    tool_update("a", "t1", title=3),
    tool_update("a", "t1", status="completed", content=[]),
    note("a", {"sessionUpdate": "tool_call_update", "toolCallId": 9}),
    note("a", {"sessionUpdate": "scripted_mystery", "text": "x"}),
    {**chunk("a", "x"), "id": 4},  # a request named session/update
    {**chunk("a", "x"), "jsonrpc": "1.0"},
    {k: v for k, v in chunk("a", "x").items() if k != "jsonrpc"},
    {"jsonrpc": "2.0", "method": "session/update", "params": {"update": {}}},
    {"jsonrpc": "2.0", "method": "session/update", "params": ["a"]},
    {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": 1, "update": {}}},
    {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "a", "update": []}},
    [1, 2],
    "text",
    None,
    7,
]


def test_malformed_messages_are_never_merged_and_pass_through_untouched() -> None:
    for bad in MALFORMED:
        assert merge_key(bad) is None, bad
    for bad in MALFORMED:
        before = copy.deepcopy(bad)
        stream = [chunk("a", "1"), bad, chunk("a", "2")]
        out = merge(keyed(stream))
        assert any(item is bad for item in out), bad  # the very object, not a copy
        assert bad == before  # and never changed
        text = "".join(
            m["params"]["update"]["content"]["text"] for m in out if m is not bad and merge_key(m)
        )
        assert text == "12"


def test_the_inputs_are_not_changed_by_merging() -> None:
    stream = [
        chunk("a", "1"),
        chunk("a", "2"),
        tool_update("a", "t", title="x"),
        tool_update("a", "t", status="failed"),
    ]
    before = copy.deepcopy(stream)
    merge(keyed(stream))
    assert stream == before


# --- the property: what a user sees is the same -------------------------------------------

SESSIONS = ("a", "b")
texts = st.text(max_size=6)


def _updates(session: str) -> st.SearchStrategy[Any]:
    tool = st.sampled_from(["t1", "t2"])
    status = st.sampled_from(["pending", "in_progress", "completed", "failed", "", "bogus"])
    title = st.sampled_from(["Read", "Run", "", 3])
    optional = st.fixed_dictionaries({}, optional={"status": status, "title": title})
    return st.one_of(
        texts.map(lambda t: chunk(session, t)),
        texts.map(lambda t: chunk(session, t, messageId="m1")),
        texts.map(lambda t: chunk(session, t, "agent_thought_chunk")),
        st.builds(lambda i, f: tool_update(session, i, **f), tool, optional),
        st.builds(
            lambda i, t: note(session, {"sessionUpdate": "tool_call", "toolCallId": i, "title": t}),
            tool,
            st.sampled_from(["Read", "Run"]),
        ),
        st.just(note(session, {"sessionUpdate": "plan", "entries": []})),
        st.sampled_from([chunk(session, 5), tool_update(session, "t1", status="bogus", title="X")]),
    )


messages = st.one_of(
    *(_updates(s) for s in SESSIONS),
    st.just(REQUEST),
    st.just(RESPONSE),
    st.just({"jsonrpc": "2.0", "method": "_x/notice", "params": {}}),
)


def visible(stream: list[Any]) -> list[Any]:
    """What the core would hold, per session, at every point where anything but a merged
    kind happens, and at the end (with the number of those events, to be sure)."""
    text = {s: "" for s in SESSIONS}
    tools: dict[str, list[tuple[str, str, str]]] = {s: [] for s in SESSIONS}
    activity: dict[str, str | None] = {s: None for s in SESSIONS}
    seen: list[Any] = []

    def state(s: str) -> Any:
        return (s, text[s], tuple(tools[s]), activity[s])

    for message in stream:
        session = message["params"].get("sessionId") if "params" in message else None
        if message.get("method") != "session/update" or "id" in message:
            seen.append(("barrier", *(state(s) for s in SESSIONS)))
            continue
        try:
            parsed = SessionNotification.model_validate(message["params"])
        except ValidationError:
            continue  # the SDK logs it and drops it
        event = turn_event(parsed.session_id, parsed.update)
        if event is None:
            continue
        _fold(event, text, tools, activity)
        if not isinstance(event, MessageChunk | ThoughtChunk | ToolCallUpdated):
            seen.append(("event", type(event).__name__, state(session)))
    seen.append(("end", *(state(s) for s in SESSIONS)))
    return seen


def _fold(event: TurnEvent, text: dict[str, str], tools: dict[str, Any], activity: Any) -> None:
    s = event.session_id
    if isinstance(event, MessageChunk):
        text[s] += event.text
        activity[s] = "writing"
    elif isinstance(event, ThoughtChunk):
        activity[s] = "thinking"
    elif isinstance(event, ToolCallStarted | ToolCallUpdated):
        # status_card.note_tool and the activity's title, as the core keeps them
        listed = tools[s]
        at = next((i for i, t in enumerate(listed) if t[0] == event.tool_call_id), None)
        if at is None:
            if event.title:
                listed.append((event.tool_call_id, event.title, event.status or "pending"))
        else:
            old = listed[at]
            listed[at] = (old[0], event.title or old[1], event.status or old[2])
        if event.title or isinstance(event, ToolCallStarted):
            activity[s] = f"tool:{event.title}"


@settings(max_examples=400, deadline=None)
@given(st.lists(messages, max_size=40))
def test_merged_processing_shows_what_per_chunk_processing_shows(stream: list[Any]) -> None:
    merged = merge(keyed(stream))
    assert visible(merged) == visible(stream)
    assert len(merged) <= len(stream)


@given(st.lists(st.one_of(*(_updates(s) for s in SESSIONS)), max_size=40))
def test_every_merged_message_is_one_the_sdk_accepts(stream: list[Any]) -> None:
    for message in merge(keyed(stream)):
        if any(message is original for original in stream):
            continue
        SessionNotification.model_validate(message["params"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(*(_updates(s) for s in SESSIONS)), max_size=40),
    st.sampled_from(SESSIONS),
)
def test_taking_one_sessions_updates_first_shows_what_merging_them_all_shows(
    stream: list[Any], first: str
) -> None:
    merger = Merger()
    for key, message in keyed(stream):
        merger.add(key, message)
    taken = merger.take_session(first)
    rest = merger.take()
    assert all(update_session(m) == first for m in taken)
    assert all(update_session(m) != first for m in rest)
    # Sessions never share a turn: what each one shows, in its own order, is unchanged.
    for session in SESSIONS:
        mine = [v for v in visible([*taken, *rest]) if v[0] == "event" and v[2][0] == session]
        theirs = [v for v in visible(stream) if v[0] == "event" and v[2][0] == session]
        assert mine == theirs
    assert visible([*taken, *rest])[-1] == visible(stream)[-1]  # the end state of all
