"""Steering the agent from the chat over the real stack: `/agent` between two agent
profiles (real subprocesses, told apart by name), `/cd` between workspaces and into folders
(symlinks and `..` never leave them), `/sessions` and `/resume` (`session/resume` when the
agent offers it, a truthful line when it cannot), `/status` with what the session runs on,
and the usage footer. Choices outlive a bridge restart."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.demo import scripted_agent_command
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack
from tests.integration.test_faults_and_restart import _crash_and_restart

T = Translator("zh_CN")


def agents(*extra: str) -> str:
    base = scripted_agent_command()
    flags = " ".join(shlex.quote(f) for f in extra)
    return f"alpha={base} --name alpha {flags};beta={base} --name beta {flags}"


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    app, docs = tmp_path / "ws" / "app", tmp_path / "ws" / "docs"
    (app / "src").mkdir(parents=True)
    docs.mkdir(parents=True)
    (app / "escape").symlink_to(tmp_path / "bridge")  # a link out of the workspace
    return {"app": app.resolve(), "docs": docs.resolve()}


@pytest.fixture
async def stack(tmp_path: Path, roots: dict[str, Path]) -> AsyncIterator[Stack]:
    settings = {
        "bridge_agents": agents(),
        "bridge_workspaces": ";".join(f"{name}={path}" for name, path in roots.items()),
    }
    async with running_stack(tmp_path / "bridge", settings=settings) as running:
        yield running


async def ask(stack: Stack, command: str, startswith: str) -> str:
    count = len(stack.texts())
    await stack.say(command)
    await stack.wait_texts(count + 1)
    text = stack.texts()[count]
    assert text.startswith(startswith), text
    return text


async def test_agent_lists_switches_refuses_an_unknown_name_and_survives_a_restart(
    stack: Stack,
) -> None:
    listed = "alpha — python\nbeta — python"
    assert await ask(stack, "/agent", "当前助手") == T(
        "command.agent_listed", current="alpha", entries=listed
    )
    await ask(stack, "whoami", "alpha: ")
    assert await ask(stack, "/agent beta", "已切换") == T("command.agent_switched", detail="beta")
    await ask(stack, "whoami", "beta: ")
    assert await ask(stack, "/agent gamma", "没有助手") == T(
        "command.agent_unknown", choice="gamma", entries=listed
    )
    assert await ask(stack, "/agent beta", "当前已经") == T("command.agent_same", detail="beta")
    await stack.settled()
    await _crash_and_restart(stack)
    await ask(stack, "whoami", "beta: ")


async def test_cd_moves_by_name_and_by_path_and_never_leaves_the_workspaces(
    stack: Stack, roots: dict[str, Path]
) -> None:
    app, docs = roots["app"], roots["docs"]
    entries = f"app — {app}\ndocs — {docs}"
    assert await ask(stack, "/cd", "当前目录") == T(
        "command.cd_listed", current=str(app), entries=entries
    )
    await ask(stack, "cwd", f"cwd: {app} (process: {app})")
    assert await ask(stack, "/cd docs", "已切换") == T("command.cd_switched", detail=str(docs))
    # The agent of that workspace runs there, and the session's folder is the one chosen.
    await ask(stack, "cwd", f"cwd: {docs} (process: {docs})")
    await ask(stack, "/cd ../app/src", "已切换")
    await ask(stack, "cwd", f"cwd: {app / 'src'} (process: {app})")
    for outside in ("../escape", "../../..", "/etc"):
        assert await ask(stack, f"/cd {outside}", outside) == T(
            "command.cd_outside", choice=outside, entries=entries
        )
    assert await ask(stack, "/cd nowhere", "找不到目录") == T(
        "command.cd_unknown", choice="nowhere", entries=entries
    )
    await ask(stack, "cwd", f"cwd: {app / 'src'}")  # still where it was


async def test_a_switch_during_a_round_is_refused_with_a_line(stack: Stack) -> None:
    await stack.say("hang")
    await stack.emu.wait_for(lambda: stack.demo.service.engine.conversations)
    await ask(stack, "/agent beta", T("command.switch_busy"))
    await ask(stack, "/cd docs", T("command.switch_busy"))
    await stack.say("/stop")
    await stack.wait_text(lambda t: t == T("presence.stopped"))
    await stack.settled()
    await ask(stack, "whoami", "alpha: ")


async def test_sessions_lists_this_chats_sessions_and_resume_goes_back_to_one(
    stack: Stack,
) -> None:
    assert await ask(stack, "/sessions", "本会话") == T("command.resume_none")
    await ask(stack, "say first topic", "first topic")
    await ask(stack, "/new", T("command.new_session"))
    await ask(stack, "say second topic", "second topic")
    listed = await ask(stack, "/sessions", "本会话用过的会话")
    lines = listed.splitlines()[1:3]
    assert [line.split(" · ")[:3] for line in lines] == [
        ["1. say second topic", "alpha", "app"],
        ["2. say first topic", "alpha", "app"],
    ]
    assert await ask(stack, "/resume 2", "已回到") == T(
        "command.resume_switched", detail="say first topic"
    )
    # The first session, resumed with session/resume: it remembers its first prompt.
    await ask(stack, "whoami", "alpha: resumed=1 title=say first topic")
    await ask(stack, "history", "history: 3 prompts")
    assert await ask(stack, "/resume 7", "没有编号") == T("command.resume_unknown", choice="7")
    # Most recent first: the resumed session is number 1 now, and the current one.
    listed = await ask(stack, "/sessions", "本会话用过的会话")
    assert listed.splitlines()[1].startswith("1. say first topic · alpha")
    await ask(stack, "/resume 1", "当前就在会话")


@pytest.mark.parametrize("listing", [True, False], ids=["session-list", "no-session-list"])
async def test_sessions_takes_the_agents_own_titles_from_session_list(
    tmp_path: Path, listing: bool
) -> None:
    settings = {"bridge_agents": agents() if listing else agents("--no-list")}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        await ask(stack, "say first topic", "first topic")
        await ask(stack, "rename Fix the login page", "renamed")  # not told to the bridge
        listed = await ask(stack, "/sessions", "本会话用过的会话")
        title = "Fix the login page" if listing else "say first topic"
        assert listed.splitlines()[1].startswith(f"1. {title} · alpha")


async def test_resume_on_an_agent_that_cannot_says_a_new_session_started(
    tmp_path: Path,
) -> None:
    settings = {"bridge_agents": agents("--no-load")}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        await ask(stack, "say first topic", "first topic")
        await ask(stack, "/new", T("command.new_session"))
        await ask(stack, "say second topic", "second topic")
        assert await ask(stack, "/resume 2", "助手没能恢复") == T(
            "command.resume_fresh", detail="say first topic"
        )
        await ask(stack, "history", "history: 1 prompts")


async def test_status_names_agent_folder_mode_model_title_and_context(
    stack: Stack, roots: dict[str, Path]
) -> None:
    before = await ask(stack, "/status", T("status.idle"))
    assert before.splitlines()[1:] == [
        f"助手：alpha · 目录：{roots['app']}",
        "模式：未知 · 模型：未知",
        "会话：还没有，下一条消息时开始",
        "上下文：未知",
    ]
    await ask(stack, "say hello there", "hello there")
    await ask(stack, "/mode plan", "已切换到模式")
    status = await ask(stack, "/status", T("status.idle"))
    used = len("say hello there") + len("hello there")
    assert status.splitlines()[1:] == [
        f"助手：alpha · 目录：{roots['app']}",
        "模式：plan · 模型：swift",
        "会话：say hello there",
        f"上下文：{used} / 200k（0%），累计费用 0.01 USD",
    ]


async def test_the_usage_footer_ends_each_turn_when_configured(tmp_path: Path) -> None:
    settings = {"bridge_usage_footer": True}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        await stack.say("say hi")
        answer = await stack.wait_text(lambda t: t.startswith("hi"))
        assert answer == "hi\n\n上下文 8 / 200k（0%）· 累计费用 0.01 USD"
        await stack.say("stop max_tokens")
        end = await stack.wait_text(lambda t: t.startswith(T("presence.max_tokens")))
        assert end.endswith("· 累计费用 0.02 USD")
