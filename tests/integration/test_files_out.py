"""Files back to the chat over the real stack: `/send <path>` posts a workspace file (an
image as an image message, anything else as a file message, uploaded first), a file the
agent's answer links goes with the answer, a path outside the workspace (through `..` or a
symlink) is refused in one line, and `/diff` shows the last round's file changes on request
only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack

T = Translator("zh_CN")
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    work = tmp_path / "work"
    (work / "out").mkdir(parents=True)
    (work / "out" / "report.csv").write_text("a,b\n1,2\n")
    (work / "chart.png").write_bytes(PNG)
    (tmp_path / "secret.txt").write_text("not for the chat")
    (work / "leak").symlink_to(tmp_path / "secret.txt")
    async with running_stack(tmp_path / "bridge", settings={"bridge_workdir": work}) as running:
        yield running


def uploads(stack: Stack) -> list[str]:
    return [
        c.path.rsplit("/", 1)[-1]
        for c in stack.emu.calls("/open-apis/im/v1/", "POST")
        if c.path.endswith(("/images", "/files"))
    ]


async def test_send_posts_a_workspace_file_and_an_image_as_what_they_are(stack: Stack) -> None:
    await stack.say("/send out/report.csv")
    await stack.emu.wait_for(lambda: any(m.msg_type == "file" for m in stack.bot()))
    await stack.say("/send chart.png")
    await stack.emu.wait_for(lambda: any(m.msg_type == "image" for m in stack.bot()))
    await stack.settled()
    assert [m.msg_type for m in stack.bot()] == ["file", "image"]
    assert uploads(stack) == ["files", "images"]
    (file_call,) = [c for c in stack.emu.calls("/open-apis/im/v1/files", "POST")]
    assert file_call.body["file_name"] == "report.csv"
    assert file_call.body["file_type"] == "stream"
    assert file_call.body["file"].data == b"a,b\n1,2\n"


@pytest.mark.parametrize("path", ["../secret.txt", "leak", "/etc/passwd"])
async def test_send_refuses_what_is_outside_the_workspace(stack: Stack, path: str) -> None:
    await stack.say(f"/send {path}")
    line = await stack.wait_text(lambda t: "不在当前工作区里" in t)
    assert line == T("send.outside", name=Path(path).name if path != "leak" else "secret.txt")
    await stack.settled()
    assert uploads(stack) == []


async def test_send_says_a_missing_file_and_its_usage(stack: Stack) -> None:
    await stack.say("/send nope.txt")
    await stack.wait_text(lambda t: t == T("send.missing", name="nope.txt"))
    await stack.say("/send")
    await stack.wait_text(lambda t: t == T("command.send_usage"))


async def test_a_file_the_answer_links_goes_with_it_before_the_answer(stack: Stack) -> None:
    await stack.say("link out/report.csv\nsay here is the report")
    await stack.wait_text(lambda t: t == "here is the report")
    await stack.settled()
    assert [m.msg_type for m in stack.bot()] == ["file", "text"]


async def test_diff_shows_the_last_rounds_changes_only_when_asked(stack: Stack) -> None:
    await stack.say(r"edit app.py x = 1\n => x = 2\n")
    await stack.settled()
    # The tool's progress line and the end: no diff pushed unasked.
    assert stack.texts() == [T("progress.tool", title="Edit app.py"), T("presence.ended_empty")]
    await stack.say("/diff")
    shown = await stack.wait_text(lambda t: "```diff" in t)
    assert "-x = 1\n+x = 2" in shown
    assert "app.py" in shown
    await stack.say("say nothing changed")
    await stack.wait_text(lambda t: t == "nothing changed")
    await stack.settled()
    await stack.say("/diff")
    await stack.wait_text(lambda t: t == T("command.diff_none"))


async def test_a_file_the_answer_marks_with_a_file_link_goes_with_it(stack: Stack) -> None:
    work = stack.demo.service.settings.agent.bridge_workdir.resolve()
    report = (work / "out" / "report.csv").as_uri()
    await stack.say(f"md The numbers: [report.csv]({report}) and **more**.")
    await stack.emu.wait_for(lambda: any(m.msg_type == "interactive" for m in stack.bot()))
    await stack.settled()
    assert [m.msg_type for m in stack.bot()] == ["file", "interactive"]
    # In the answer the link stays words with its address; no link to a local file.
    assert report in stack.texts()[1]
    assert "](file:" not in stack.texts()[1]
