"""ACP agents written by others, driven through `AcpRuntime` and through the whole bridge.

The agents come from `scripts/fetch-real-agents.sh` (into `.cache/real-agents/`, or
`REAL_AGENTS_DIR`), or from PATH. Every one runs offline and without credentials: HOME is a
fresh folder, API keys are removed, telemetry and update checks are turned off, and where
`unshare -rn` works the agent runs in a network namespace of its own (no network at all).
What each one can do then was checked by hand and is pinned here:

* the SDK's `echo_agent.py` / `agent.py` answer a prompt (an echo);
* `claude-code-acp` opens a session and fails the prompt at once ("Authentication required");
* `gemini --acp` initializes and refuses `session/new` ("Gemini API key is missing").

(`gemini` given a key hangs retrying the network on a prompt, so it is never given one.)
Absent agents are skipped, unless `CI` is set and none is present at all: then it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import pytest
import pytest_asyncio
from acp.schema import AgentCapabilities, Implementation
from tenacity import wait_none

from bridge.clock import LoopClock
from bridge.i18n import Translator
from bridge.runtime.acp.runtime import AcpRuntime
from bridge.runtime.events import (
    MessageChunk,
    PromptSent,
    RuntimeExited,
    RuntimeFailed,
    StopReason,
    TurnEnded,
    TurnEvent,
)
from bridge.runtime.port import RuntimeUnavailable, SessionHandle
from tests.integration.model_agents import netns_works
from tests.integration.stack import running_stack

pytestmark = pytest.mark.real_agent

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("REAL_AGENTS_DIR") or REPO / ".cache" / "real-agents")
FETCH = "bash scripts/fetch-real-agents.sh"
PROMPT = "hello bridge"
WITHIN = 30.0  # seconds for any one step; the slowest agent here needs about 4
TERMINAL = (TurnEnded, RuntimeFailed, RuntimeExited)
t = Translator("zh_CN")  # the stack's locale


class Expect(Enum):
    REPLY = "reply"  # the prompt is answered with `reply`
    PROMPT_FAILS = "prompt fails"  # a session opens; the prompt ends with RuntimeFailed
    SESSION_REFUSED = "session refused"  # initialize works; session/new is refused
    ANY_CLEAN_END = "any clean end"  # an agent of unknown version from PATH


@dataclass(frozen=True)
class RealAgent:
    name: str
    argv: tuple[str, ...]
    expect: Expect
    text: str = ""  # the reply, or a piece of the failure reason
    agent_name: str | None = None  # agentInfo.name from initialize (None: not sent)


def _cached(relative: str) -> str | None:
    path = CACHE / relative
    return str(path) if path.is_file() else None


def _on_path(*names: str) -> str | None:
    return next((found for name in names if (found := shutil.which(name))), None)


def discover() -> tuple[list[RealAgent], list[str]]:
    """The real agents present here (pinned ones from the cache first, then PATH), and a note
    for each known agent that is absent."""
    found: list[RealAgent] = []
    missing: list[str] = []

    for script, name, reply, info in (
        ("echo_agent.py", "sdk-echo-agent", PROMPT, None),
        ("agent.py", "sdk-example-agent", f"Client sent:{PROMPT}", "example-agent"),
    ):
        if path := _cached(f"sdk-examples/{script}"):
            found.append(RealAgent(name, (sys.executable, path), Expect.REPLY, reply, info))
        else:
            missing.append(f"{name}: not in {CACHE / 'sdk-examples'}")

    if path := _cached("npm/node_modules/.bin/claude-code-acp"):
        found.append(
            RealAgent(
                "claude-code-acp",
                (path,),
                Expect.PROMPT_FAILS,
                "Authentication required",
                "@zed-industries/claude-code-acp",
            )
        )
    elif path := _on_path("claude-code-acp", "claude-agent-acp"):
        found.append(RealAgent("claude-acp-on-path", (path,), Expect.ANY_CLEAN_END))
    else:
        missing.append(f"claude-code-acp: not in {CACHE / 'npm'} nor on PATH")

    if path := _cached("npm/node_modules/.bin/gemini"):
        found.append(
            RealAgent(
                "gemini-cli",
                (path, "--acp"),
                Expect.SESSION_REFUSED,
                "API key is missing",
                "gemini-cli",
            )
        )
    elif path := _on_path("gemini"):
        found.append(RealAgent("gemini-on-path", (path, "--acp"), Expect.ANY_CLEAN_END))
    else:
        missing.append(f"gemini-cli: not in {CACHE / 'npm'} nor on PATH")

    if path := _on_path("codex-acp"):  # not fetched (over 200 MB); used when installed
        found.append(RealAgent("codex-acp-on-path", (path,), Expect.ANY_CLEAN_END))
    return found, missing


AGENTS, MISSING = discover()
BY_NAME = {agent.name: agent for agent in AGENTS}
# End to end: one agent that answers, one whose prompt fails. (gemini's refused session/new
# ends in `presence.runtime_unavailable`, as the scripted agent's start failures do in
# test_faults_and_restart; it passes here too, for 3 s more.)
E2E = [a for a in AGENTS if a.name in ("sdk-echo-agent", "claude-code-acp")]


OFFLINE_PREFIX: tuple[str, ...] = ("unshare", "-rn") if netns_works() else ()
# The runtime starts every agent in its own process group (pgid == pid), so what an agent
# leaves running after close() can be seen here. gemini relaunches itself as a child.
LINUX = sys.platform.startswith("linux")


def offline(agent: RealAgent) -> tuple[str, ...]:
    return (*OFFLINE_PREFIX, *agent.argv)


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group (zombies do not count: some containers' PID 1
    never reaps the orphans it inherits)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(stat.parent.name))
    return members


def end_leftovers(pid: int) -> bool:
    """Kills what is left of the agent's process group; True when anything was left."""
    if not LINUX or not group_members(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return True


def none_found_reason() -> str:
    return f"no real ACP agent here ({'; '.join(MISSING)}); fetch them with `{FETCH}`"


CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_GCA",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
)


def offline_environment(mp: pytest.MonkeyPatch, home: Path) -> None:
    """Agents inherit the environment: give them no credentials and no reason to go online."""
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps(
            {
                "privacy": {"usageStatisticsEnabled": False},  # else: play.googleapis.com
                # the current names (the old disableAutoUpdate / disableUpdateNag are
                # migrated, and the file rewritten, at every start)
                "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
                "telemetry": {"enabled": False},
            }
        )
    )
    for name in CREDENTIALS:
        mp.delenv(name, raising=False)
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        mp.delenv(name, raising=False)
    mp.setenv("HOME", str(home))
    mp.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    mp.setenv("CODEX_HOME", str(home / ".codex"))
    mp.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    mp.setenv("DISABLE_AUTOUPDATER", "1")
    mp.setenv("DISABLE_TELEMETRY", "1")
    mp.setenv("NO_UPDATE_NOTIFIER", "1")
    # Claude Code refuses to run as root (CI containers) unless told it is sandboxed; inside
    # `unshare -r` every user is root.
    mp.setenv("IS_SANDBOX", "1")


def agent_params(agents: list[RealAgent]) -> list[object]:
    if not agents:
        return [pytest.param(None, id="none-found")]
    return [pytest.param(agent.name, id=agent.name) for agent in agents]


def require(name: str | None) -> RealAgent:
    if name is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {none_found_reason()}")
        pytest.skip(none_found_reason())
    return BY_NAME[name]


def test_the_missing_agents_are_named() -> None:
    """A summary line in `-ra` output: which agents ran here and which were absent."""
    if not AGENTS:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {none_found_reason()}")
        pytest.skip(none_found_reason())
    if MISSING:
        pytest.skip(f"ran {[a.name for a in AGENTS]}; absent: {'; '.join(MISSING)}")


# --- through AcpRuntime -----------------------------------------------------------------------


@dataclass
class Drive:
    """What one agent did when driven through AcpRuntime: initialize, session/new, a prompt."""

    step: str = "initialize"  # the step under way; "done" at the end
    agent_info: Implementation | None = None
    capabilities: AgentCapabilities | None = None
    refusal: RuntimeUnavailable | None = None  # session/new refused
    session: SessionHandle | None = None
    events: list[TurnEvent] = field(default_factory=list)
    alive_after_turn: bool = False
    ended_on_close: bool = False
    left_processes: bool = False  # something of the agent's process group outlived close()
    seconds: float = 0.0
    error: BaseException | None = None  # anything unexpected; TimeoutError means a hang

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]

    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, MessageChunk))


async def drive(agent: RealAgent, workdir: Path) -> Drive:
    done = Drive()
    started = time.monotonic()
    rt = AcpRuntime(
        offline(agent),
        workdir,
        clock=LoopClock(),
        restart_attempts=1,
        restart_wait=wait_none(),
        start_timeout=WITHIN,
        shutdown_timeout=0.5,  # the grace before SIGTERM when stdin EOF does not end the agent
    )
    pid: int | None = None
    try:
        async with asyncio.timeout(WITHIN):
            await rt.start()
        (process,) = rt.running_processes()
        pid = process.pid
        done.agent_info, done.capabilities = process.agent_info, process.capabilities
        done.step = "session/new"
        try:
            async with asyncio.timeout(WITHIN):
                done.session = await rt.open_session("real-agent-chat")
        except RuntimeUnavailable as refused:
            done.refusal = refused
        if done.session is not None:
            done.step = "session/prompt"
            async with asyncio.timeout(WITHIN):  # never a hang: it comes back, one way or other
                await rt.prompt(done.session.session_id, PROMPT, done.events.append)
        done.alive_after_turn = rt.running_processes() == [process]
        # claude-code-acp ignores EOF on stdin once it has a session; close() must end it.
        done.step = "close"
        async with asyncio.timeout(5):
            await rt.close()
        done.ended_on_close = not process.alive and rt.running_processes() == []
        done.step = "done"
    except Exception as exc:
        done.error = exc
    finally:
        done.seconds = time.monotonic() - started
        with contextlib.suppress(Exception):
            await asyncio.wait_for(rt.close(), 10)
        if pid is not None:
            await asyncio.sleep(0.2)  # a child may take a moment to follow its parent
            done.left_processes = end_leftovers(pid)
    return done


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def drives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Drive]:
    """Every agent driven at once (their start-ups are most of the time), each on its own."""
    folder = tmp_path_factory.mktemp("real-agents")
    with pytest.MonkeyPatch.context() as mp:
        offline_environment(mp, folder / "agent-home")
        workdirs = {agent.name: folder / agent.name for agent in AGENTS}
        for workdir in workdirs.values():
            workdir.mkdir()
        results = await asyncio.gather(*(drive(a, workdirs[a.name]) for a in AGENTS))
    return {agent.name: result for agent, result in zip(AGENTS, results, strict=True)}


@pytest.mark.parametrize("name", agent_params(AGENTS))
def test_real_agent_through_the_runtime(name: str | None, drives: dict[str, Drive]) -> None:
    agent = require(name)
    done = drives[agent.name]
    stuck = "hung" if isinstance(done.error, TimeoutError) else "failed"
    where = f"{agent.name} {stuck} at {done.step} after {done.seconds:.1f}s"
    assert done.error is None, f"{where}: {done.error!r}"
    assert done.step == "done"
    assert done.capabilities is not None  # initialize worked: every agent here gets this far
    if agent.agent_name is not None:
        assert done.agent_info is not None
        assert done.agent_info.name == agent.agent_name
    assert done.ended_on_close, "the agent outlived AcpRuntime.close()"
    assert not done.left_processes, "the agent left processes running after close()"

    if done.refusal is not None:
        assert agent.expect in (Expect.SESSION_REFUSED, Expect.ANY_CLEAN_END), done.refusal
        assert agent.text in done.refusal.reason
        assert "refused session/new" in done.refusal.reason
        assert not done.refusal.limit_reached
        assert done.alive_after_turn  # a refusal does not kill the agent
        return
    assert agent.expect is not Expect.SESSION_REFUSED, "session/new worked; update the pin"
    session = done.session
    assert session is not None
    assert session.session_id
    assert session.loaded is False

    events, kinds = done.events, done.kinds()
    assert isinstance(events[0], PromptSent), kinds
    assert all(e.session_id == session.session_id for e in events), kinds
    terminals = [e for e in events if isinstance(e, TERMINAL)]
    assert terminals == [events[-1]], kinds  # exactly one terminal, and last
    if agent.expect is Expect.REPLY:
        assert events[-1] == TurnEnded(session.session_id, StopReason.END_TURN), kinds
        assert done.text() == agent.text
        assert all(isinstance(e, PromptSent | MessageChunk | TurnEnded) for e in events), kinds
    elif agent.expect is Expect.PROMPT_FAILS:
        assert kinds == ["PromptSent", "RuntimeFailed"]
        assert isinstance(events[-1], RuntimeFailed)
        assert agent.text in events[-1].reason
    else:
        assert isinstance(events[-1], TurnEnded | RuntimeFailed), kinds
    assert done.alive_after_turn  # the agent lives on after the turn, whatever its outcome


# --- through the whole bridge -----------------------------------------------------------------


@pytest.mark.parametrize("name", agent_params(E2E))
async def test_real_agent_end_to_end(
    name: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a Feishu user sees: the agent's reply, or a fault line that ends the turn."""
    agent = require(name)
    offline_environment(monkeypatch, tmp_path / "agent-home")
    fault = {
        Expect.PROMPT_FAILS: t("presence.unrecoverable"),
        Expect.SESSION_REFUSED: t("presence.runtime_unavailable"),
    }.get(agent.expect)
    hint = t("presence.running_hint")
    # A short hint delay: should the agent be slow to answer, the hint shows and the end follows.
    settings = {"bridge_first_hint_seconds": 0.5}
    command = shlex.join(offline(agent))
    async with running_stack(tmp_path / "bridge", agent_command=command, settings=settings) as st:
        sent = await st.say("hello")
        expected = agent.text.replace(PROMPT, "hello") if fault is None else fault
        await st.wait_text(lambda shown: shown == expected, within=WITHIN)
        await st.settled()
        shown = st.texts()
        assert shown[-1] == expected, shown
        assert shown[:-1] in ([], [hint]), shown  # at most one hint, and only before the end
        assert st.reactions(sent.message_id) == ["OnIt"]
        turns = st.demo.service.engine.conversations.values()
        assert all(a.conv.state.value == "idle" and a.conv.turn is None for a in turns)


# --- steering a real agent (modes, its own commands, /status) --------------------------------

CLAUDE_MODES = (
    "default — Default\nacceptEdits — Accept Edits\nplan — Plan Mode\ndontAsk — Don't Ask\n"
    "bypassPermissions — Bypass Permissions"
)


async def test_claude_code_acp_modes_commands_and_status_from_the_chat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """claude-code-acp offline: its session modes listed and switched, its own slash
    commands in /help and passed through, and /status naming the agent and its mode. (Its
    models need an account: offline it offers none, and /model says so.)"""
    agent = BY_NAME.get("claude-code-acp")
    if agent is None:
        if os.environ.get("CI"):
            pytest.fail(
                "CI is set but claude-code-acp is not fetched (scripts/fetch-real-agents.sh)"
            )
        pytest.skip("claude-code-acp is not in .cache/real-agents")
    offline_environment(monkeypatch, tmp_path / "agent-home")
    command = shlex.join(offline(agent))
    async with running_stack(tmp_path / "bridge", agent_command=command) as st:

        async def ask(text: str) -> str:
            count = len(st.texts())
            await st.say(text)
            await st.wait_texts(count + 1, within=WITHIN)
            return st.texts()[count]

        assert await ask("/mode") == t("command.mode_list", current="default", modes=CLAUDE_MODES)
        assert await ask("/mode plan") == t("command.mode_set", mode="plan")
        assert await ask("/mode") == t("command.mode_list", current="plan", modes=CLAUDE_MODES)
        assert await ask("/model") == t("command.model_unsupported")
        assert await ask("hello") == t("presence.unrecoverable")  # no account: the prompt fails
        await st.settled()
        status = (await ask("/status")).splitlines()
        # The agent is named after the program, not the `unshare -rn` wrapped around it.
        assert status[1].startswith("助手：claude-code-acp · 目录：")
        assert status[2] == "模式：plan · 模型：未知"
        help_text = await ask("/help")
        assert "助手 claude-code-acp 自己的命令（原样交给助手）：" in help_text
        assert "/compact" in help_text.splitlines()[-1]
        # Its own command goes to it as a prompt (and fails like any prompt offline).
        assert await ask("/compact") == t("presence.unrecoverable")
