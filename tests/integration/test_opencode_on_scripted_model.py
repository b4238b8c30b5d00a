"""OpenCode's own behaviour through the bridge, offline against the scripted model's
OpenAI-compatible API (the six things every agent shows are in
test_agents_on_scripted_model.py):

- its mode (build / plan) is a session config option, not an ACP session mode;
- a long streamed answer stopped mid-stream, then two messages, each answered in order by
  the same process, about as fast as on a warm agent;
- it makes no connection but to its model on loopback (a syscall trace: the network
  namespace alone says only that nothing could have got out).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import statistics
import time
from pathlib import Path

import pytest

from bridge.devtools.fake_model.script import long_text
from bridge.i18n import Translator
from tests.integration.model_agents import OPENCODE, PORT, require
from tests.integration.stack import running_stack
from tests.integration.test_agents_on_scripted_model import (
    SETTINGS,
    STOPPED,
    WITHIN,
    Run,
    run_agent,
)
from tests.integration.test_gemini_on_scripted_model import streaming

pytestmark = [pytest.mark.real_agent, pytest.mark.timeout(240)]

T = Translator("zh_CN")
# The next answer after /stop against a plain answer on the warm agent (issue 36: 1.5×; the
# median of three). Both take 0.2–1.2 s here, so a loaded 2-core machine's jitter gets half a
# second more.
AFTER_STOP_FACTOR = 1.5
JITTER_SECONDS = 0.5


@pytest.fixture(autouse=True)
def opencode_present() -> None:
    require(OPENCODE)


async def test_its_mode_is_a_config_option_and_its_model_is_the_scripted_one(
    tmp_path: Path,
) -> None:
    stacked, record = await run_agent(OPENCODE, tmp_path)
    async with stacked as stack:
        run = Run(stack, record, tmp_path / "bridge")
        # No ACP session modes: build / plan come as the config option `mode`.
        assert await run.said("/mode") == T("command.mode_unsupported")
        listed = await run.said("/config")
        assert "mode — Session Mode: build" in listed.splitlines(), listed
        assert "model — Model: scripted/scripted" in listed.splitlines(), listed
        models = "scripted/scripted — Scripted/Scripted"
        assert await run.said("/model") == T(
            "command.model_list", current="scripted/scripted", models=models
        )
        assert await run.said("ECHO asked") == "echo: asked"


async def test_stop_mid_stream_then_two_messages_are_answered_in_order_by_the_same_process(
    tmp_path: Path,
) -> None:
    stacked, record = await run_agent(OPENCODE, tmp_path)
    async with stacked as stack:
        run = Run(stack, record, tmp_path / "bridge")
        assert await run.said("ECHO started") == "echo: started"  # the agent is up: warm
        warm = statistics.median([await timed(run, f"ECHO w{n}", f"echo: w{n}") for n in range(3)])
        served = [p.pid for p in stack.demo.service.runtime.running_processes()]
        await stack.say("DRIP 600")  # about a minute of streaming
        await streaming(stack)
        await stack.say("/stop")
        await stack.wait_text(lambda shown: shown == STOPPED, within=WITHIN)
        await stack.settled(within=WITHIN)
        assert long_text(600).splitlines()[-1] not in "\n".join(stack.texts())
        count = len(stack.texts())
        first = await timed(run, "ECHO one", "echo: one")
        second = await timed(run, "ECHO two", "echo: two")
        print(f"opencode: warm answer {warm:.2f} s; after /stop {first:.2f} s, then {second:.2f} s")
        assert stack.texts()[count:] == ["echo: one", "echo: two"]
        assert [p.pid for p in stack.demo.service.runtime.running_processes()] == served
        limit = AFTER_STOP_FACTOR * warm + JITTER_SECONDS
        assert first < limit, f"{first:.2f} s after /stop, {warm:.2f} s warm"


async def timed(run: Run, text: str, answer: str) -> float:
    """Seconds from sending `text` to the bot showing `answer` (its next text)."""
    started = time.monotonic()
    shown = await run.said(text)
    took = time.monotonic() - started
    assert shown == answer
    return took


# A connect() to anything but the model (127.0.0.1:PORT) or its own HTTP API on loopback;
# a DNS lookup is a connect() to port 53.
_CONNECT = re.compile(r"connect\(\d+, \{sa_family=AF_INET6?, sin6?_port=htons\((\d+)\), (.*?)\}")


async def test_it_connects_to_nothing_but_loopback(tmp_path: Path) -> None:
    if shutil.which("strace") is None:
        reason = "no strace: run scripts/install-agent-tools.sh"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {reason}")
        pytest.skip(reason)
    trace = tmp_path / "opencode.strace"
    record = tmp_path / "model-requests.jsonl"
    argv = shlex.split(OPENCODE.command(tmp_path / "agent-home", record))
    at = argv.index("--") + 1
    argv[at:at] = ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace)]
    stacked = running_stack(tmp_path / "bridge", agent_command=shlex.join(argv), settings=SETTINGS)
    async with stacked as stack:
        run = Run(stack, record, tmp_path / "bridge")
        assert await run.said("ECHO traced") == "echo: traced"
        target = tmp_path / "bridge" / "traced.txt"
        await stack.say(f"WRITE {target} traced")  # its tools too: the write asks first
        await run.wait_card()
    connects = _CONNECT.findall(trace.read_text())
    assert (str(PORT), 'sin_addr=inet_addr("127.0.0.1")') in connects  # the trace works
    elsewhere = [c for c in connects if "127.0.0.1" not in c[1] and "::1" not in c[1]]
    assert elsewhere == [], elsewhere
