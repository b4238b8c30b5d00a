"""The whole product on loopback for integration tests: the Feishu emulator, the bridge in
webhook mode (real aiohttp server), and the scripted ACP agent as a real subprocess.

Timings are milliseconds; waits are event-driven (the emulator wakes `wait_for` on every
recorded change; the engine reports when it has performed everything it was given).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from bridge.clock import LoopClock
from bridge.config import Tuning
from bridge.demo import Demo, start_demo
from bridge.devtools.emulator import FeishuEmulator
from bridge.devtools.emulator.records import ChatMessage
from bridge.feishu.client import FeishuClient, RetryPolicy

FAST = {
    "bridge_first_hint_seconds": 10.0,  # tests of the hint itself set their own
    "bridge_heartbeat_seconds": 30.0,
    "bridge_stale_seconds": 60.0,
    "bridge_approval_timeout_seconds": 30.0,
    "bridge_finish_grace_seconds": 0.05,
    "bridge_locale": "zh_CN",
    # CI runs as root without bubblewrap; said explicitly, as an operator would have to (the
    # demo implies it for the scripted agent only, and tests give other agents too).
    "bridge_allow_root_without_sandbox": True,
    # Feishu's limits are real-time and these tests run in milliseconds: the call budget
    # (issue 33) would only slow them; test_call_budget.py sets the limits it tests.
    "bridge_feishu_app_calls_per_second": 100_000.0,
    # The single ack of before issue 45, which these tests assert on; test_state_reactions.py
    # turns the states on.
    "bridge_state_reactions": False,
    # Urging unanswered cards (加急, and its start-up probe) adds Feishu calls; the tests
    # that count calls predate it, and test_urgent.py turns it on.
    "bridge_urgent": False,
}
# What no operator sets, in-process (bridge/config/tuning.py); a test changes a field with
# `running_stack(tuning={...})`.
FAST_TUNING = Tuning(
    progress_interval_seconds=0.0,
    feishu_sends_per_minute=6_000_000.0,
    feishu_chat_calls_per_second=100_000.0,
)


@dataclass
class Stack:
    demo: Demo
    waits: list[float] = field(default_factory=list)  # backoffs the Feishu client asked for
    said: int = 0  # messages sent through `say`

    @property
    def emu(self) -> FeishuEmulator:
        return self.demo.emulator

    @property
    def ops_url(self) -> str:
        """The operator API (its own listener, not the Feishu port)."""
        return f"http://127.0.0.1:{self.demo.service.ops_port}"

    @property
    def feishu_url(self) -> str:
        """The Feishu listener (webhook and /healthz only)."""
        return f"http://127.0.0.1:{self.demo.service.port}"

    @property
    def chat(self) -> str:
        return self.emu.p2p_chat_id

    async def say(self, text: str, **kwargs: Any) -> Any:
        self.said += 1
        return await self.emu.send_user_message(text, **kwargs)

    def bot(self, chat_id: str | None = None) -> list[ChatMessage]:
        return self.emu.bot_messages(chat_id or self.chat)

    def texts(self, chat_id: str | None = None) -> list[str]:
        """What the user sees from the bot, in order: texts, and cards as `[card] <title>`."""
        shown = []
        for message in self.bot(chat_id):
            if message.msg_type == "interactive":
                data = message.data or {}
                header = data.get("header", {}).get("title", {})
                if not header:  # a rich answer: its markdown, as the user reads it
                    elements = data.get("body", {}).get("elements", [])
                    shown.append("\n\n".join(str(e.get("content", "")) for e in elements))
                    continue
                shown.append(f"[card] {header.get('content', '')}")
            else:
                shown.append(message.text or "")
        return shown

    async def wait_texts(
        self, count: int, chat_id: str | None = None, within: float = 15.0
    ) -> list[str]:
        await self.emu.wait_for(lambda: len(self.bot(chat_id)) >= count, timeout=within)
        return self.texts(chat_id)

    async def wait_text(
        self, predicate: Callable[[str], bool], within: float = 15.0, chat_id: str | None = None
    ) -> str:
        def found() -> str | None:
            return next((t for t in self.texts(chat_id) if predicate(t)), None)

        result: str = await self.emu.wait_for(found, timeout=within)
        return result

    async def settled(self, within: float = 15.0) -> None:
        """Until every conversation is idle with nothing queued (as the operator projection
        shows it) and everything decided has been performed. Woken by each published state
        change, never by a timer."""
        engine, projection = self.demo.service.engine, self.demo.service.projection
        watch = projection.subscribe("tests")
        try:
            async with asyncio.timeout(within):
                while True:
                    await engine.wait_idle()
                    states = projection.snapshot()["conversations"].values()
                    # Said something, no conversation yet: it is still being handed over.
                    if (states or not self.said) and all(
                        s["state"] == "idle" and not s["queue_length"] for s in states
                    ):
                        await engine.wait_idle()
                        return
                    frame = await watch.queue.get()
                    if frame.event == "client_evicted":  # fell behind a busy stack: again
                        watch = projection.subscribe("tests")
        except TimeoutError:
            raise AssertionError("conversations did not settle") from None
        finally:
            projection.unsubscribe(watch)

    async def runtime_state(self, chat_id: str | None = None) -> dict[str, Any]:
        """One conversation's snapshot from the operator API (`GET /runtime-states`)."""
        async with httpx.AsyncClient(trust_env=False) as http:
            response = await http.get(f"{self.ops_url}/runtime-states")
        response.raise_for_status()
        state: dict[str, Any] = response.json()["conversations"][chat_id or self.chat]
        return state

    def reactions(self, message_id: str) -> list[str]:
        return [r.emoji_type for r in self.emu.reactions(message_id)]


def unhurried_client(emu: FeishuEmulator, waits: list[float] | None = None) -> FeishuClient:
    """The bridge's Feishu client on the emulator, its retry waits recorded (in `waits`),
    not slept: tests run in ms."""

    async def no_sleep(seconds: float) -> None:
        if waits is not None:
            waits.append(seconds)

    return FeishuClient(
        emu.app_id,
        emu.app_secret,
        emu.url,
        clock=LoopClock().now,
        retry=RetryPolicy(base_delay=0.0, max_delay=0.0),
        sleep=no_sleep,
    )


@asynccontextmanager
async def running_stack(
    data_dir: Path,
    *,
    settings: dict[str, object] | None = None,
    emulator_options: dict[str, Any] | None = None,
    agent_command: str | None = None,
    tuning: dict[str, Any] | None = None,
    bots: int = 1,
) -> AsyncIterator[Stack]:
    """`bots=2`: the demo's two bots (Claude and Codex), each its own app, in one bridge."""
    waits: list[float] = []

    def client(emu: FeishuEmulator) -> FeishuClient:
        return unhurried_client(emu, waits)

    demo = await start_demo(
        data_dir=data_dir,
        feishu=client,
        emulator_options={"time_scale": 0.001, **(emulator_options or {})},
        settings={**FAST, **(settings or {})},
        agent_command=agent_command,
        tuning=replace(FAST_TUNING, **(tuning or {})),
        bots=bots,
    )
    try:
        yield Stack(demo, waits)
    finally:
        await demo.close()
