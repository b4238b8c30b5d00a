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
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pytest
import pytest_asyncio
from tenacity import wait_none

from bridge.i18n import Translator
from bridge.runtime.acp_runtime import AcpRuntime
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
from bridge.runtime.process import AgentProcess
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

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


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
# One agent that answers, one that fails the prompt (gemini's refused session/new takes the
# scripted agent's `presence.runtime_unavailable` path; 3 s more when added here).
E2E = [a for a in AGENTS if a.name in ("sdk-echo-agent", "claude-code-acp")]


def _netns_works() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


OFFLINE_PREFIX: tuple[str, ...] = ("unshare", "-rn") if _netns_works() else ()


def offline(agent: RealAgent) -> tuple[str, ...]:
    return (*OFFLINE_PREFIX, *agent.argv)


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


@pytest.fixture(autouse=True)
def offline_agent_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Agents inherit the environment: give them no credentials and no reason to go online."""
    home = tmp_path / "agent-home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps(
            {
                "privacy": {"usageStatisticsEnabled": False},  # else: play.googleapis.com
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                "telemetry": {"enabled": False},
            }
        )
    )
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    monkeypatch.setenv("DISABLE_AUTOUPDATER", "1")
    monkeypatch.setenv("DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("NO_UPDATE_NOTIFIER", "1")
    # Claude Code refuses to run as root (CI containers) unless told it is sandboxed; inside
    # `unshare -r` every user is root.
    monkeypatch.setenv("IS_SANDBOX", "1")


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


@pytest_asyncio.fixture
async def runtime_for() -> AsyncIterator[list[AcpRuntime]]:
    made: list[AcpRuntime] = []
    yield made
    for runtime in made:
        await asyncio.wait_for(runtime.close(), 15)


def test_the_missing_agents_are_named() -> None:
    """A summary line in `-ra` output: which agents ran here and which were absent."""
    if not AGENTS:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {none_found_reason()}")
        pytest.skip(none_found_reason())
    if MISSING:
        pytest.skip(f"ran {[a.name for a in AGENTS]}; absent: {'; '.join(MISSING)}")


# --- through AcpRuntime -----------------------------------------------------------------------


@pytest.mark.parametrize("name", agent_params(AGENTS))
async def test_real_agent_through_the_runtime(
    name: str | None, tmp_path: Path, runtime_for: list[AcpRuntime]
) -> None:
    agent = require(name)
    workdir = tmp_path / "work"
    workdir.mkdir()
    rt = AcpRuntime(
        offline(agent),
        workdir,
        restart_attempts=1,
        restart_wait=wait_none(),
        start_timeout=WITHIN,
        shutdown_timeout=0.5,  # the grace before SIGTERM when stdin EOF does not end the agent
    )
    runtime_for.append(rt)

    async with asyncio.timeout(WITHIN):
        await rt.start()  # initialize: every agent here gets this far offline
    (process,) = rt.running_processes()
    if agent.agent_name is not None:
        assert process.agent_info is not None
        assert process.agent_info.name == agent.agent_name
    assert process.capabilities is not None

    opened = await open_or_refusal(rt)
    if isinstance(opened, RuntimeUnavailable):
        assert agent.expect in (Expect.SESSION_REFUSED, Expect.ANY_CLEAN_END), opened.reason
        assert agent.text in opened.reason
        assert "refused session/new" in opened.reason
        assert not opened.limit_reached
        assert rt.running_processes() == [process]  # a refusal does not kill the agent
        await ends_on_close(rt, process)
        return
    handle = opened
    assert agent.expect is not Expect.SESSION_REFUSED, "session/new worked; update the pin"
    assert handle.session_id
    assert handle.loaded is False

    events: list[TurnEvent] = []
    async with asyncio.timeout(WITHIN):  # never a hang: the prompt comes back, one way or other
        await rt.prompt(handle.session_id, PROMPT, events.append)
    kinds = [type(e).__name__ for e in events]
    assert isinstance(events[0], PromptSent), kinds
    assert all(e.session_id == handle.session_id for e in events), kinds
    terminals = [e for e in events if isinstance(e, TERMINAL)]
    assert terminals == [events[-1]], kinds  # exactly one terminal, and last
    text = "".join(e.text for e in events if isinstance(e, MessageChunk))

    if agent.expect is Expect.REPLY:
        assert events[-1] == TurnEnded(handle.session_id, StopReason.END_TURN), kinds
        assert text == agent.text
        assert all(isinstance(e, PromptSent | MessageChunk | TurnEnded) for e in events), kinds
    elif agent.expect is Expect.PROMPT_FAILS:
        assert isinstance(events[-1], RuntimeFailed), kinds
        assert agent.text in events[-1].reason
        assert kinds == ["PromptSent", "RuntimeFailed"]
    else:
        assert isinstance(events[-1], TurnEnded | RuntimeFailed), kinds
    # The agent lives on after the turn, whatever its outcome, and ends when we close.
    assert rt.running_processes() == [process]
    await ends_on_close(rt, process)


async def open_or_refusal(rt: AcpRuntime) -> SessionHandle | RuntimeUnavailable:
    try:
        async with asyncio.timeout(WITHIN):
            return await rt.open_session("real-agent-chat")
    except RuntimeUnavailable as refused:
        return refused


async def ends_on_close(rt: AcpRuntime, process: AgentProcess) -> None:
    """claude-code-acp ignores EOF on stdin once it has a session; close() must still end it."""
    async with asyncio.timeout(5):
        await rt.close()
    assert not process.alive
    assert rt.running_processes() == []


# --- through the whole bridge -----------------------------------------------------------------


@pytest.mark.parametrize("name", agent_params(E2E))
async def test_real_agent_end_to_end(name: str | None, tmp_path: Path) -> None:
    """What a Feishu user sees: the agent's reply, or a fault line that ends the turn."""
    agent = require(name)
    fault = {
        Expect.PROMPT_FAILS: t("presence.unrecoverable"),
        Expect.SESSION_REFUSED: t("presence.runtime_unavailable"),
    }.get(agent.expect)
    hint = t("presence.running_hint")
    # A short hint delay: a slow agent start shows the hint, which must still get its end.
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
