"""A permission request completed from the tool call it names (runtime/acp/sessions.py)."""

from __future__ import annotations

from acp.schema import (
    FileEditToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from bridge.runtime.acp.normalize import permission_detail
from bridge.runtime.acp.sessions import AcpTurn

PATH = "/work/notes.txt"


def turn() -> AcpTurn:
    return AcpTurn(session_id="s1", sink=lambda event: None)


def test_a_request_that_names_an_announced_call_shows_what_the_call_will_write() -> None:
    """Codex (found with the real agent): the `tool_call` carries the diff; the permission
    request that follows names the call with a title and a location only."""
    t = turn()
    diff = FileEditToolCallContent(type="diff", path=PATH, old_text=None, new_text="hello\n")
    t.note_tool_call(
        ToolCallStart(
            session_update="tool_call",
            tool_call_id="call_1",
            title="Editing files",
            kind="edit",
            content=[diff],
        )
    )
    asked = ToolCallUpdate(
        tool_call_id="call_1",
        title="Edit files",
        kind="edit",
        locations=[ToolCallLocation(path=PATH)],
    )
    assert permission_detail(asked) == PATH  # the request alone: only where
    assert permission_detail(t.completed(asked)) == f"{PATH}\n\nhello\n"


def test_the_requests_own_content_wins_and_later_updates_count() -> None:
    t = turn()
    t.note_tool_call(
        ToolCallStart(
            session_update="tool_call",
            tool_call_id="c",
            title="Write",
            raw_input={"file_path": PATH, "content": "first"},
        )
    )
    t.note_tool_call(
        ToolCallProgress(
            session_update="tool_call_update",
            tool_call_id="c",
            raw_input={"file_path": PATH, "content": "second"},
        )
    )
    assert permission_detail(t.completed(ToolCallUpdate(tool_call_id="c"))) == (f"{PATH}\n\nsecond")
    own = ToolCallUpdate(tool_call_id="c", raw_input={"file_path": PATH, "content": "own"})
    assert permission_detail(t.completed(own)) == f"{PATH}\n\nown"
    other = ToolCallUpdate(tool_call_id="unknown", raw_input={"command": "ls"})
    assert t.completed(other) is other
