"""The agent process: what it inherits (its own API keys, never the bridge's Feishu
secrets), and that its death is noticed whatever it left behind."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import pytest

from bridge.clock import LoopClock
from bridge.runtime.acp.process import start_subprocess
from bridge.runtime.acp.runtime import AcpRuntime
from bridge.runtime.acp.transport import CappedLines
from bridge.runtime.events import RuntimeExited, TurnEvent
from bridge.runtime.port import RuntimeUnavailable


async def test_agent_never_sees_feishu_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEISHU_APP_SECRET", "app-secret-value")
    monkeypatch.setenv("FEISHU_ENCRYPT_KEY", "encrypt-key-value")
    monkeypatch.setenv("bridge_ops_token", "ops-token-value")  # pydantic reads any case
    monkeypatch.setenv("ANTHROPIC_API_KEY", "agent-own-key")
    dump = tmp_path / "env.json"
    # A stand-in "agent" that records its environment, then fails to start.
    script = f"import json, os; open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))"
    runtime = AcpRuntime(
        [sys.executable, "-c", script], tmp_path, clock=LoopClock(), restart_attempts=1
    )
    try:
        with pytest.raises(RuntimeUnavailable):
            await runtime.open_session("chat-1")
    finally:
        await runtime.close()
    seen = json.loads(dump.read_text())
    assert seen["ANTHROPIC_API_KEY"] == "agent-own-key"
    assert not [name for name in seen if name.upper().startswith(("FEISHU_", "BRIDGE_"))]


async def test_exit_is_noticed_even_when_a_child_of_the_agent_holds_its_pipes(
    tmp_path: Path,
) -> None:
    """An agent that started a helper process and then died: the helper inherits stdout and
    stderr, so the pipes stay open. The turn must still end as "runtime exited"."""
    agent = shlex.join([sys.executable, "-m", "bridge.devtools.scripted_agent"])
    argv = ["sh", "-c", f"sleep 60 & exec {agent}"]
    runtime = AcpRuntime(argv, tmp_path, clock=LoopClock(), restart_attempts=1)
    events: list[TurnEvent] = []
    try:
        session = await runtime.open_session("chat-1")
        async with asyncio.timeout(10):
            await runtime.prompt(session.session_id, "crash", events.append)
    finally:
        await runtime.close()
    assert isinstance(events[-1], RuntimeExited)
    assert [type(e).__name__ for e in events] == ["PromptSent", "RuntimeExited"]


async def test_stdout_written_in_many_small_writes_arrives_whole_and_in_order(
    tmp_path: Path,
) -> None:
    """The pipe rests between reads (STDOUT_PACE_SECONDS): what the agent wrote meanwhile
    waits in the pipe, and comes whole, in order, to its end, in fewer reads than writes."""
    script = (
        "import os, time\n"
        "for i in range(300):\n"
        "    os.write(1, b'%d\\n' % i)\n"
        "    if i % 30 == 0: time.sleep(0.002)\n"
    )
    process = await start_subprocess([sys.executable, "-c", script], tmp_path, None)
    lines = CappedLines(process.stdout, label="test")
    got: list[bytes] = []
    batches = 0
    async with asyncio.timeout(10):
        while batch := await lines.batch():
            got.extend(batch)
            batches += 1
        assert await process.wait() == 0
    assert got == [b"%d" % i for i in range(300)]
    assert batches < 300
