"""The scripted model's choice of turn (bridge/devtools/fake_model/script.py): the user's
last command decides, also when an agent sends two user messages as one."""

from __future__ import annotations

from bridge.devtools.fake_model.script import HELLO, Hang, Say, Write, plan, write_tool


def test_the_last_command_said_decides() -> None:
    # Qwen Code, restarted after a kill mid-round, sends the cut-off round's words and the
    # next message's as one user message: the next one is what is asked now.
    assert plan("HANG\n\nECHO again", tools=True) == Say("echo: again")
    assert plan("ECHO first then HANG", tools=True) == Hang()
    assert plan("ECHO a\nWRITE notes.txt hello\nsecond line", tools=True) == Write(
        "notes.txt", "hello"
    )


def test_without_tools_a_write_is_only_words() -> None:
    assert plan("WRITE notes.txt hello", tools=False) == Say(HELLO)
    assert plan("hello there", tools=True) == Say(HELLO)


def test_each_agents_write_tool_is_found_by_its_parameters() -> None:
    # Claude Code's `Write`, Qwen Code's `write_file`, OpenCode's `write`; an edit tool
    # (no `content`) is not a write tool.
    assert write_tool({"Write": {"file_path", "content"}}) == ("Write", "file_path")
    assert write_tool({"write_file": {"absolute_path", "content"}}) == (
        "write_file",
        "absolute_path",
    )
    tools = {"edit": {"filePath", "oldString", "newString"}, "write": {"content", "filePath"}}
    assert write_tool(tools) == ("write", "filePath")
