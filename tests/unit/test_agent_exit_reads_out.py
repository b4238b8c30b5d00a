"""An agent's exit is told only once what it wrote before it died was handed on
(`spawn_agent`'s watch): the operating system may report the exit before the last of its
stdout is read, and a turn ended by the exit drops the updates that come after."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bridge.clock import LoopClock
from bridge.runtime.acp import process
from bridge.runtime.acp.process import AgentProcess, spawn_agent


class _Stdin:
    def write(self, data: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Died:
    """A process that has already exited (code 7), its stdout still to be read."""

    pid = 4242
    returncode = 7

    def __init__(self) -> None:
        self.stdin = _Stdin()
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self.stderr.feed_eof()

    def write_and_close(self, indexes: range) -> None:
        self.stdout.feed_data(b"".join(map(_update, indexes)))
        self.stdout.feed_eof()

    async def ended(self) -> int:
        return 7

    async def wait(self) -> int:
        return 7

    def kill(self) -> None:
        pass

    def signal_group(self, sig: signal.Signals) -> None:
        pass


def _update(index: int) -> bytes:
    text = {"type": "text", "text": f"c{index} "}
    update = {"sessionUpdate": "agent_message_chunk", "content": text}
    message = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s", "update": update},
    }
    return json.dumps(message).encode() + b"\n"


async def _spawned(died: _Died, handled: list[str], told: list[int], *, slow: bool) -> AgentProcess:
    async def handler(method: str, params: Any, is_notification: bool) -> None:
        if slow:  # a notification that awaits on its way
            for _ in range(3):
                await asyncio.sleep(0)
        handled.append(params["update"]["content"]["text"])

    async def start(argv: Sequence[str], cwd: Path, env: Any) -> _Died:
        return died

    return await spawn_agent(
        ["agent"],
        slot=0,
        generation=1,
        cwd=Path("."),
        env=None,
        handler=handler,
        on_exit=lambda agent: told.append(len(handled)),
        now=LoopClock().now,
        batch_window=0.0,
        start=start,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("slow", [False, True])
async def test_the_exit_is_told_after_the_last_updates_were_handled(slow: bool) -> None:
    died, handled, told = _Died(), [], []
    agent = await _spawned(died, handled, told, slow=slow)
    # The exit is known at once; the last lines come a few turns of the loop later.
    for _ in range(5):
        await asyncio.sleep(0)
    died.write_and_close(range(5))
    async with asyncio.timeout(5):
        assert await asyncio.shield(agent.exited) == 7
    assert handled == [f"c{i} " for i in range(5)]
    assert told == [5]


async def test_an_exit_whose_stdout_never_ends_is_told_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process, "EXIT_READ_SECONDS", 0.05)
    died, handled, told = _Died(), [], []
    agent = await _spawned(died, handled, told, slow=False)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(5):
        assert await asyncio.shield(agent.exited) == 7
    assert 0.05 <= loop.time() - started < 1.0
    assert told == [0]


class _Orphaned(_Died):
    """An agent that exited while a child of its still holds its pipes: they close (and its
    last lines are read) only once the bridge ends its process group."""

    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()

    def signal_group(self, sig: signal.Signals) -> None:
        self.write_and_close(range(5))
        asyncio.get_running_loop().call_soon(self.released.set)

    async def wait(self) -> int:
        await self.released.wait()
        return 7


async def test_an_exit_whose_pipes_a_child_holds_is_told_after_the_last_updates() -> None:
    died, handled, told = _Orphaned(), [], []
    agent = await _spawned(died, handled, told, slow=True)
    async with asyncio.timeout(5):
        assert await asyncio.shield(agent.exited) == 7
    assert handled == [f"c{i} " for i in range(5)]
