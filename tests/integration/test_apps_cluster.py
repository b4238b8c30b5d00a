"""Issue 44 on several instances: two `feishu-bridge run` processes on one PostgreSQL
database serve the same two apps from one config file (the second app's data in its own
schema, its wake-ups on its own channel), each by webhook. Chats of both apps, and a group
with both bots, are claimed by one instance, which is SIGKILLed with a turn running and a
message queued behind it in each: the survivor tells each running turn's user, answers each
queued message, and then every later message, once each, in order, each by its own bot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from bridge.demo import scripted_agent_command
from bridge.devtools.emulator import FeishuEmulator
from bridge.devtools.emulator.apps import AppSpec
from bridge.i18n import Translator
from tests.integration.test_cluster import free_port, reactions_settled, wait_healthy
from tests.pg import PgServer, pg_server

__all__ = ["pg_server"]  # the fixture of tests/pg.py, used here

T = Translator("zh_CN")
QUEUED = T("presence.queued", position=1)
APPS = {"a": "cli_cluster_a", "b": "cli_cluster_b"}
USERS = 3  # private chats per app
LEASE = 5.0  # a loaded 2-core machine may stall a loop for a second or two


def _config(folder: Path, domain: str) -> Path:
    (folder / "work").mkdir(exist_ok=True)
    text = f"[projects.work]\nagent_command = '{scripted_agent_command()}'\nworkdir = 'work'\n"
    for name, app_id in APPS.items():
        text += (
            f'\n[apps.{name}]\napp_id = "{app_id}"\napp_secret_env = "SECRET_{name.upper()}"\n'
            f'verification_token_env = "TOKEN_{name.upper()}"\ndomain = "{domain}"\n'
            'mode = "webhook"\nallow_all = true\ndefault_project = "work"\n'
        )
    # Each instance writes it as it starts, while the other may be reading it: whole or not at all.
    path, draft = folder / "bridge.toml", folder / f"bridge.toml.{os.getpid()}.{id(text)}"
    draft.write_text(text)
    draft.replace(path)
    return path


@asynccontextmanager
async def two_apps() -> AsyncIterator[FeishuEmulator]:
    emu = FeishuEmulator(
        apps=[
            AppSpec(app_id, f"{app_id}-secret", bot_name=name, verification_token=f"{app_id}-t")
            for name, app_id in APPS.items()
        ],
        time_scale=0.001,
        deadline_seconds=3.0,  # Feishu's own: two instances and their agents share two cores
        card_deadline_seconds=3.0,
    )
    await emu.start()
    try:
        yield emu
    finally:
        await emu.close()


@contextmanager
def instance(
    emu: FeishuEmulator, url: str, name: str, folder: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`feishu-bridge run` with the config file, on the shared database, as its own process
    (so it can be SIGKILLed); the agents of both instances share their sessions' state."""
    port, ops_port = free_port(), free_port()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("FEISHU_", "BRIDGE_"))}
    keys = {f"SECRET_{n.upper()}": f"{a}-secret" for n, a in APPS.items()}
    keys |= {f"TOKEN_{n.upper()}": f"{a}-t" for n, a in APPS.items()}
    env = {
        **inherited,
        **keys,
        "BRIDGE_CONFIG_FILE": str(_config(folder, emu.url)),
        "BRIDGE_PORT": str(port),
        "BRIDGE_OPS_PORT": str(ops_port),
        "BRIDGE_DATA_DIR": str(folder / name),
        "SCRIPTED_AGENT_STATE_DIR": str(folder / "agent-state"),
        "BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX": "true",  # CI runs as root; the agent is ours
        "BRIDGE_DATABASE_URL": url,
        "BRIDGE_INSTANCE_ID": name,
        "BRIDGE_LEASE_SECONDS": str(LEASE),
        "BRIDGE_FIRST_HINT_SECONDS": "30",
        "BRIDGE_FINISH_GRACE_SECONDS": "0.05",
        "BRIDGE_LOG_LEVEL": "INFO",
    }
    program = Path(sys.executable).parent / "feishu-bridge"
    with open(folder / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            [str(program), "run"], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def to(emu: FeishuEmulator, port: int) -> None:
    """Every app's events to the instance on `port`."""
    for name, app_id in APPS.items():
        emu.set_webhook_url(f"http://127.0.0.1:{port}/feishu/events/{name}", app_id)


def replies(emu: FeishuEmulator, message_id: str, app_id: str) -> list[str]:
    return [m.text or "" for m in emu.bot_messages(app_id=app_id) if m.parent_id == message_id]


@pytest.fixture
def pg_database(pg_server: PgServer) -> str:
    """A fresh database: the second app's schema and both apps' channels are the
    database's, not a test schema's."""
    return pg_server.create_database()


@pytest.mark.timeout(150)  # two instances, a takeover, every chat's turns, on a loaded machine
async def test_sigkill_of_an_instance_serving_two_apps_loses_and_doubles_nothing(
    tmp_path: Path, pg_database: str
) -> None:
    async with two_apps() as emu:
        with (
            instance(emu, pg_database, "doomed", tmp_path) as (doomed, doomed_port),
            instance(emu, pg_database, "survivor", tmp_path) as (survivor, survivor_port),
        ):
            await wait_healthy(doomed_port, doomed, tmp_path / "doomed.log")
            await wait_healthy(survivor_port, survivor, tmp_path / "survivor.log")
            group = emu.open_chat("group", bots=list(APPS.values()))
            # (app, how to write in the chat): each app's private chats, and the group,
            # where each message @-mentions one bot.
            chats = [
                (app_id, {"app_id": app_id, "sender_open_id": f"ou_kill_{n}"})
                for app_id in APPS.values()
                for n in range(USERS)
            ] + [
                (app_id, {"chat_id": group, "chat_type": "group", "mention_apps": [app_id]})
                for app_id in APPS.values()
            ]
            said: list[list[tuple[str, str]]] = [[] for _ in chats]  # (message id, text)

            async def write(n: int, text: str) -> str:
                where = chats[n][1]
                message = await emu.send_user_message(text, **where)
                said[n].append((message.message_id, text))
                return message.message_id

            to(emu, doomed_port)  # the doomed instance claims every chat, of both apps
            for n in range(len(chats)):
                await write(n, "warm")
            await emu.wait_for(
                lambda: all(
                    replies(emu, said[n][0][0], app_id) == ["echo: warm"]
                    for n, (app_id, _) in enumerate(chats)
                ),
                60,
            )
            running = [await write(n, "hang") for n in range(len(chats))]
            await emu.wait_for(lambda: all(emu.reactions(m) for m in running), 30)
            to(emu, survivor_port)  # lands on the survivor, runs on the owner: queued there
            queued = [await write(n, "history") for n in range(len(chats))]
            await emu.wait_for(
                lambda: all(
                    replies(emu, queued[n], app_id) == [QUEUED]
                    for n, (app_id, _) in enumerate(chats)
                ),
                30,
            )

            doomed.send_signal(signal.SIGKILL)

            def told_and_answered() -> bool:
                return all(
                    replies(emu, running[n], app_id) == [T("presence.unrecoverable")]
                    and replies(emu, queued[n], app_id)[-1:] != []
                    and replies(emu, queued[n], app_id)[-1].startswith("history:")
                    for n, (app_id, _) in enumerate(chats)
                )

            try:
                await emu.wait_for(told_and_answered, LEASE + 20.0)
            except TimeoutError:
                seen = {m: replies(emu, m, a) for (a, _), m in zip(chats, queued, strict=True)}
                raise AssertionError(f"the queued messages were told {seen}") from None
            later = [[await write(n, f"after {i}") for n in range(len(chats))] for i in range(2)]
            # No timing is asserted: a wait long enough for the whole suite's load, under
            # which some of these echoes were twice still coming (calls flowing) after 30 s.
            await emu.wait_for(
                lambda: all(
                    replies(emu, later[-1][n], app_id) == ["echo: after 1"]
                    for n, (app_id, _) in enumerate(chats)
                ),
                60,
            )

            await reactions_settled(
                emu, [(mid, app_id) for n, (app_id, _) in enumerate(chats) for mid, _ in said[n]]
            )
            # Each message of each chat answered once, in order, by its own bot only; the
            # queued one in its session, loaded on the survivor (warm and hang are in it).
            for n, (app_id, _) in enumerate(chats):
                other = next(a for a in APPS.values() if a != app_id)
                (warm, _), (hang, _), (history, _), *after = said[n]
                assert replies(emu, warm, app_id) == ["echo: warm"]
                assert replies(emu, hang, app_id) == [T("presence.unrecoverable")]
                lines = replies(emu, history, app_id)
                assert lines[:2] == [QUEUED, T("recovery.resumed")], lines
                assert lines[2:] in (["history: 2 prompts"], ["history: 3 prompts"]), lines
                for mid, text in after:
                    assert replies(emu, mid, app_id) == [f"echo: {text}"]
                for mid, _ in said[n]:
                    assert len(emu.reactions(mid, app_id=app_id)) == 1, mid
                    assert not replies(emu, mid, other)
                # Each message's answer (its last line) after the one before it.
                posted = emu.bot_messages(app_id=app_id)
                answered_at = [
                    max(i for i, m in enumerate(posted) if m.parent_id == mid) for mid, _ in said[n]
                ]
                assert answered_at == sorted(answered_at)


async def test_the_second_apps_click_and_recall_landing_on_another_instance_reach_its_owner(
    tmp_path: Path, pg_database: str
) -> None:
    """A group with both bots: the same chat is a conversation of each app, both run by one
    instance. The second app's card click and recall land on the other instance and are
    forwarded: to the owner's conversation of that app, not the first app's of that key."""
    a, b = APPS["a"], APPS["b"]
    async with two_apps() as emu:
        with (
            instance(emu, pg_database, "owner", tmp_path) as (owner, owner_port),
            instance(emu, pg_database, "other", tmp_path) as (other, other_port),
        ):
            await wait_healthy(owner_port, owner)
            await wait_healthy(other_port, other)
            group = emu.open_chat("group", bots=[a, b])

            async def write(text: str, app_id: str) -> str:
                sent = await emu.send_user_message(
                    text, chat_id=group, chat_type="group", mention_apps=[app_id]
                )
                return sent.message_id

            to(emu, owner_port)  # the owner runs the group's conversation of each app
            warm = await write("warm", a)
            await emu.wait_for(lambda: replies(emu, warm, a) == ["echo: warm"], 60)
            asked = await write("permission Delete build/", b)
            await emu.wait_for(lambda: [m for m in emu.bot_messages(app_id=b) if m.card], 60)
            (card,) = [m for m in emu.bot_messages(app_id=b) if m.card]
            allow = next(
                action["value"]
                for element in (card.card or {}).get("elements", [])
                for action in element.get("actions", [])
                if action.get("text", {}).get("content") == T("card.approval.option.allow_once")
            )
            slow = await write("sleep 1500\nsay first", b)
            behind = await write("say recalled", b)
            first, second = (T("presence.queued_approval", position=n) for n in (1, 2))
            await emu.wait_for(lambda: replies(emu, behind, b) == [second], 30)

            to(emu, other_port)  # the click and the recall land on the other instance
            clicked = await emu.click_card(card.message_id, allow)
            assert clicked.ok
            assert clicked.toast is not None
            assert clicked.toast.content == T("card.click.recorded")
            await emu.recall_message(behind)
            after = await write("say after", b)
            await emu.wait_for(lambda: replies(emu, after, b)[-1:] == ["after"], 60)

            shown, waiting, done = replies(emu, asked, b)
            assert shown == ""  # the approval card
            assert waiting.endswith(T("presence.waiting_approval"))  # after an @-mention
            assert done == "done"
            assert replies(emu, slow, b) == [first, "first"]
            # Recalled while it waited: its line says so, and it never ran.
            assert replies(emu, behind, b) == [T("presence.recalled_queued")]
            assert [m.text for m in emu.bot_messages(group, app_id=a)] == ["echo: warm"]
