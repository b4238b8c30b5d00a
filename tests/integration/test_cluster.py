"""Several bridge instances on one PostgreSQL database (issue 12), over real sockets: the
Feishu emulator as a load balancer spreading pushes over the instances' webhooks, each
instance with its own scripted ACP agent subprocess, one throwaway PostgreSQL cluster.

Every assertion is on what the emulator recorded: the acks, the answers, their order per
chat, and that nothing came twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.config import Settings
from bridge.demo import DEMO_TIMINGS, scripted_agent_command
from bridge.devtools.emulator import FeishuEmulator
from bridge.devtools.emulator.records import ChatMessage
from bridge.i18n import Translator
from bridge.service import BridgeService, build_service
from tests.integration.stack import FAST, FAST_TUNING, unhurried_client
from tests.pg import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]  # fixtures of tests/pg.py, used here

T = Translator("zh_CN")
ENCRYPT_KEY = "cluster-encrypt-key"
TOKEN = "cluster-verification-token"
QUEUED = T("presence.queued", position=1)


def instance_settings(
    emu: FeishuEmulator, url: str, name: str, data_dir: Path, **extra: object
) -> Settings:
    values: dict[str, object] = {
        "feishu_app_id": emu.app_id,
        "feishu_app_secret": emu.app_secret,
        "feishu_domain": emu.url,
        "feishu_event_mode": "webhook",
        "feishu_encrypt_key": ENCRYPT_KEY,
        "feishu_verification_token": TOKEN,
        "bridge_host": "127.0.0.1",
        "bridge_port": 0,
        "bridge_ops_host": "127.0.0.1",
        "bridge_ops_port": 0,
        "bridge_allow_all": True,
        "bridge_data_dir": data_dir,
        "bridge_workdir": data_dir,
        "bridge_agent_command": scripted_agent_command(),
        "bridge_database_url": url,
        "bridge_instance_id": name,
        **DEMO_TIMINGS,
        **FAST,
        **extra,
    }
    return Settings(**values)  # type: ignore[arg-type]


@asynccontextmanager
async def emulator() -> AsyncIterator[FeishuEmulator]:
    emu = FeishuEmulator(
        encrypt_key=ENCRYPT_KEY,
        verification_token=TOKEN,
        time_scale=0.001,
        deadline_seconds=3.0,  # Feishu's own: three instances share two cores here
        card_deadline_seconds=3.0,
    )
    await emu.start()
    try:
        yield emu
    finally:
        await emu.close()


@asynccontextmanager
async def instances(
    emu: FeishuEmulator, url: str, tmp: Path, count: int, **extra: object
) -> AsyncIterator[list[BridgeService]]:
    services: list[BridgeService] = []
    try:
        for n in range(1, count + 1):
            data = tmp / f"i{n}"
            data.mkdir()
            settings = instance_settings(emu, url, f"i{n}", data, **extra)
            env = {"SCRIPTED_AGENT_STATE_DIR": str(tmp / "agent-state")}  # shared: load works
            client = unhurried_client(emu)
            service = build_service(settings, feishu=client, runtime_env=env, tuning=FAST_TUNING)
            await service.start()
            services.append(service)
        emu.spread_webhooks([webhook(s) for s in services], seed=12)
        yield services
    finally:
        for service in reversed(services):
            await service.stop()


def webhook(service: BridgeService) -> str:
    return f"http://127.0.0.1:{service.port}/feishu/events"


def answers(emu: FeishuEmulator) -> list[ChatMessage]:
    return [m for m in emu.bot_messages() if "echo: " in m.text]


def taken_ok(emu: FeishuEmulator, event_id: str) -> bool:
    return any(a.ok for a in emu.deliveries(event_id))


async def wait(emu: FeishuEmulator, done: Callable[[], Any], within: float = 60.0) -> None:
    await emu.wait_for(done, timeout=within)


async def reactions_settled(
    emu: FeishuEmulator, messages: Iterable[tuple[str, str | None]], within: float = 10.0
) -> None:
    """Until each message (its id, and the app whose bot reacts; None: any) shows one
    reaction, or `within` seconds; the caller's checks then say which did not. A message's
    reaction is changed after its answer is posted, its old one removed before the new one
    is added: the answers may be in while a reaction is between the two."""
    wanted = list(messages)
    with contextlib.suppress(TimeoutError):
        await emu.wait_for(
            lambda: all(len(emu.reactions(m, app_id=app)) == 1 for m, app in wanted), within
        )


async def test_three_instances_answer_every_message_once_in_order_per_chat(
    tmp_path: Path, pg_url: str
) -> None:
    chats, per_chat = 30, 10
    async with emulator() as emu, instances(emu, pg_url, tmp_path, 3) as services:
        sent: dict[str, list[tuple[str, str]]] = {}  # chat -> (message id, text), in order
        events: list[str] = []

        async def one_chat(n: int) -> None:
            for i in range(per_chat):
                text = f"c{n}-m{i}"
                delivered = await emu.send_user_message(
                    text, chat_type="p2p", sender_open_id=f"ou_user_{n:02d}"
                )
                # Taken (200) before the chat's next message is sent, as a user types one after
                # the other: a busy instance's 503 is redelivered by the emulator's ladder.
                await wait(emu, lambda e=delivered.event_id: taken_ok(emu, e), within=30.0)
                sent.setdefault(delivered.chat_id, []).append((delivered.message_id, text))
                events.append(delivered.event_id)

        await asyncio.gather(*(one_chat(n) for n in range(chats)))
        # Some are redelivered, each to an instance other than the one that took it.
        rng = random.Random(7)
        urls = [webhook(s) for s in services]
        redelivered = rng.sample(events, 40)
        for event_id in redelivered:
            first = emu.deliveries(event_id)[0].url
            again = await emu.redeliver(event_id, rng.choice([u for u in urls if u != first]))
            assert again.ok
        await wait(emu, lambda: len(answers(emu)) >= chats * per_chat)
        for service in services:
            await service.engine.wait_idle()

        # Spread over all three, and redeliveries did reach another instance.
        taken = Counter(a.url for e in events for a in emu.deliveries(e)[:1])
        assert set(taken) == set(urls)
        # One ack and one answer per message, answers in sending order per chat.
        ack = services[0].settings.presence.bridge_ack_emoji
        for chat_id, messages in sent.items():
            replies = [m for m in answers(emu) if m.chat_id == chat_id]
            assert [(m.parent_id, m.text) for m in replies] == [
                (mid, f"echo: {text}") for mid, text in messages
            ]
            for mid, _ in messages:
                assert [r.emoji_type for r in emu.reactions(mid)] == [ack], mid
        assert len(answers(emu)) == chats * per_chat


def spawn_instance(
    emu: FeishuEmulator,
    url: str | None,
    name: str,
    folder: Path,
    lease: float,
    agent_state: Path,
    **extra: str,
) -> tuple[subprocess.Popen[bytes], int, int]:
    """`feishu-bridge run` as its own process (so it can be SIGKILLed); its ports. `url`:
    the PostgreSQL database (None: the instance's own SQLite file); `extra`: more settings."""
    port, ops_port = free_port(), free_port()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("FEISHU_", "BRIDGE_"))}
    env = {
        **inherited,
        "FEISHU_APP_ID": emu.app_id,
        "FEISHU_APP_SECRET": emu.app_secret,
        "FEISHU_DOMAIN": emu.url,
        "FEISHU_EVENT_MODE": "webhook",
        "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_VERIFICATION_TOKEN": TOKEN,
        "BRIDGE_PORT": str(port),
        "BRIDGE_OPS_PORT": str(ops_port),
        "BRIDGE_DATA_DIR": str(folder / name),
        "BRIDGE_WORKDIR": str(folder / "work"),
        "BRIDGE_AGENT_COMMAND": scripted_agent_command(),
        "SCRIPTED_AGENT_STATE_DIR": str(agent_state),
        "BRIDGE_ALLOW_ALL": "true",
        "BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX": "true",  # CI runs as root; the agent is ours
        **({"BRIDGE_DATABASE_URL": url} if url else {}),
        "BRIDGE_INSTANCE_ID": name,
        "BRIDGE_LEASE_SECONDS": str(lease),
        "BRIDGE_FINISH_GRACE_SECONDS": "0.05",
        "BRIDGE_LOG_LEVEL": "INFO",
        **extra,
    }
    (folder / "work").mkdir(exist_ok=True)
    program = Path(sys.executable).parent / "feishu-bridge"
    with open(folder / f"{name}.log", "ab") as log:  # the child keeps its own copy (a restart adds)
        process = subprocess.Popen(
            [str(program), "run"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    return process, port, ops_port


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def wait_healthy(
    port: int, process: subprocess.Popen[bytes], log: Path | None = None
) -> None:
    """Until /healthz answers 200; an instance that exits first fails with its log's tail."""
    async with httpx.AsyncClient(trust_env=False, timeout=1.0) as http:
        for _ in range(3000):
            if process.poll() is not None:
                tail = _tail(log) if log is not None else ""
                raise AssertionError(f"the instance exited at start ({process.returncode})\n{tail}")
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.01)  # a readiness probe's poll, not a wait for an outcome
    raise AssertionError("never healthy")


@pytest.mark.parametrize("shared_sessions", [True, False], ids=["shared", "apart"])
async def test_sigkill_of_an_instance_mid_run_tells_its_users_and_runs_its_queue_elsewhere(
    tmp_path: Path, pg_url: str, shared_sessions: bool
) -> None:
    lease = 5.0  # a loaded 2-core machine may stall a loop for a second or two
    state = {name: tmp_path / ("agent-state" if shared_sessions else name) for name in NAMES}
    async with emulator() as emu:
        doomed, doomed_port, _ = spawn_instance(
            emu, pg_url, "doomed", tmp_path, lease, state["doomed"]
        )
        survivor, survivor_port, _ = spawn_instance(
            emu, pg_url, "survivor", tmp_path, lease, state["survivor"]
        )
        try:
            await wait_healthy(doomed_port, doomed, tmp_path / "doomed.log")
            await wait_healthy(survivor_port, survivor, tmp_path / "survivor.log")
            to_doomed = f"http://127.0.0.1:{doomed_port}/feishu/events"
            to_survivor = f"http://127.0.0.1:{survivor_port}/feishu/events"
            running: list[str] = []
            queued: list[str] = []
            for n in range(3):
                user = f"ou_kill_{n}"
                emu.webhook_url = to_doomed  # the doomed instance claims the chat
                warm = await emu.send_user_message("warm", sender_open_id=user)
                await wait(emu, lambda m=warm.message_id: replies(emu, m) == ["echo: warm"])
                long = await emu.send_user_message("hang", sender_open_id=user)
                await wait(emu, lambda m=long.message_id: emu.reactions(m))
                running.append(long.message_id)
                emu.webhook_url = to_survivor  # lands on the survivor, runs on the owner
                behind = await emu.send_user_message("history", sender_open_id=user)
                await wait(emu, lambda m=behind.message_id: replies(emu, m) == [QUEUED])
                queued.append(behind.message_id)

            doomed.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()

            def told_and_answered() -> bool:
                return all(
                    replies(emu, mid) == [T("presence.unrecoverable")] for mid in running
                ) and all(replies(emu, mid)[-1].startswith("history:") for mid in queued)

            await wait(emu, told_and_answered, within=lease + 5.0)
            assert time.monotonic() - killed_at <= lease + 5.0
            # Nothing lost or doubled: one ack each, the queued message's lines once each;
            # its session was loaded on the survivor when the agents share their sessions
            # (warm and hang are in it), else a fresh one is said to be fresh.
            for mid in queued:
                lines = replies(emu, mid)
                assert lines[:2] == [QUEUED, T("recovery.resumed")]
                if shared_sessions:
                    assert lines[2:] in (["history: 2 prompts"], ["history: 3 prompts"])
                else:
                    assert lines[2:] == [T("session.fresh"), "history: 1 prompts"]
            await reactions_settled(emu, [(mid, None) for mid in running + queued])
            for mid in running + queued:
                assert len(emu.reactions(mid)) == 1
        finally:
            for process in (doomed, survivor):
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in (doomed, survivor):
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


NAMES = ("doomed", "survivor")


def replies(emu: FeishuEmulator, message_id: str) -> list[str]:
    return [b.text or "" for b in emu.bot_messages() if b.parent_id == message_id]


async def test_a_card_click_landing_on_another_instance_is_decided_by_the_owner(
    tmp_path: Path, pg_url: str
) -> None:
    async with emulator() as emu, instances(emu, pg_url, tmp_path, 2) as (owner, other):
        emu.spread_webhooks([webhook(owner)])
        asked = await emu.send_user_message("permission Delete build/")
        # The click comes once the user was told it is their turn: a click before that line
        # goes out makes it untrue, and it is rightly never sent.
        paused = ["", T("presence.waiting_approval")]
        await wait(emu, lambda: replies(emu, asked.message_id) == paused)
        (card,) = [m for m in emu.bot_messages() if m.card]
        allow = next(
            a["value"]
            for e in (card.card or {}).get("elements", [])
            for a in e.get("actions", [])
            if a.get("text", {}).get("content") == T("card.approval.option.allow_once")
        )

        emu.spread_webhooks([webhook(other)])  # the click lands on the other instance
        clicked = await emu.click_card(card.message_id, allow)

        assert clicked.ok
        assert clicked.latency_ms < 3000
        assert clicked.toast is not None
        assert clicked.toast.content == T("card.click.recorded")
        assert clicked.card_replaced
        await wait(emu, lambda: "done" in replies(emu, asked.message_id))
        assert replies(emu, asked.message_id) == ["", T("presence.waiting_approval"), "done"]
        assert emu.bot_messages()[0].card  # the "" is the approval card
        # It was decided where the round runs: the other instance holds no conversation.
        assert owner.engine.conversations
        assert not other.engine.conversations
