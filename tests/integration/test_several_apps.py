"""Issue 44: several bots, one bridge. `feishu-bridge run` with BRIDGE_CONFIG_FILE serves three
apps of the emulator: two over their own long connections (in one process), one by webhook
on its own path; two of them are in the same group. Each chat is answered by the right bot
and the right agent (each project runs the scripted agent under its own name), in its own
session; a message that @-mentions both bots is answered by each, each in its session; an
app whose secret is wrong at start reports it alone while the others serve."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx

from bridge.demo import scripted_agent_command
from bridge.devtools.emulator import FeishuEmulator
from bridge.devtools.emulator.apps import AppSpec
from bridge.devtools.emulator.records import ChatMessage
from tests.integration.test_cluster import free_port, wait_healthy

CLAUDE, CODEX, TEAM = "cli_claude_app", "cli_codex_app", "cli_team_app"
SECRETS = {CLAUDE: "claude-secret", CODEX: "codex-secret", TEAM: "team-secret"}
TEAM_TOKEN = "team-verification-token"
CHATS_PER_APP = 20
DOCS_GROUP = "oc_docs_group"  # routed to the docs project for Claude


def _config(folder: Path, domain: str) -> Path:
    agent = scripted_agent_command()
    for name in ("backend", "docs"):
        (folder / name).mkdir(exist_ok=True)
    text = f"""
[projects.backend]
agent_command = '{agent} --name backend'
workdir = "backend"

[projects.docs]
agent_command = '{agent} --name docs'
workdir = "docs"

[apps.claude]
app_id = "{CLAUDE}"
app_secret_env = "CLAUDE_SECRET"
domain = "{{domain}}"
allow_all = true
default_project = "backend"

[apps.codex]
app_id = "{CODEX}"
app_secret_env = "CODEX_SECRET"
domain = "{{domain}}"
allow_all = true
default_project = "docs"

[apps.team]
app_id = "{TEAM}"
app_secret_env = "TEAM_SECRET"
verification_token_env = "TEAM_TOKEN"
domain = "{{domain}}"
mode = "webhook"
allow_all = true
default_project = "backend"

[[routes]]
app = "claude"
chat = "{DOCS_GROUP}"
project = "docs"
"""
    path = folder / "bridge.toml"
    path.write_text(text.replace("{domain}", domain))
    return path


@asynccontextmanager
async def three_apps() -> AsyncIterator[FeishuEmulator]:
    emu = FeishuEmulator(
        apps=[
            AppSpec(CLAUDE, SECRETS[CLAUDE], bot_name="Claude"),
            AppSpec(CODEX, SECRETS[CODEX], bot_name="Codex"),
            AppSpec(TEAM, SECRETS[TEAM], bot_name="Team", verification_token=TEAM_TOKEN),
        ],
        time_scale=0.001,
    )
    await emu.start()
    try:
        yield emu
    finally:
        await emu.close()


@contextmanager
def bridge(
    emu: FeishuEmulator, folder: Path, *, wrong: str | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int, int, Path]]:
    port, ops_port = free_port(), free_port()
    config = _config(folder, emu.url)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("FEISHU_", "BRIDGE_"))}
    secrets = {
        "CLAUDE_SECRET": SECRETS[CLAUDE] if wrong != CLAUDE else "not-the-secret",
        "CODEX_SECRET": SECRETS[CODEX] if wrong != CODEX else "not-the-secret",
        "TEAM_SECRET": SECRETS[TEAM] if wrong != TEAM else "not-the-secret",
        "TEAM_TOKEN": TEAM_TOKEN,
    }
    env = {
        **inherited,
        **secrets,
        "BRIDGE_CONFIG_FILE": str(config),
        "BRIDGE_PORT": str(port),
        "BRIDGE_OPS_PORT": str(ops_port),
        "BRIDGE_DATA_DIR": str(folder / "data"),
        "BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX": "true",  # CI runs as root; the agent is ours
        "BRIDGE_FIRST_HINT_SECONDS": "30",
        "BRIDGE_FINISH_GRACE_SECONDS": "0.05",
        "BRIDGE_LOG_LEVEL": "INFO",
    }
    log = folder / "bridge.log"
    program = Path(sys.executable).parent / "feishu-bridge"
    with open(log, "ab") as err:
        process = subprocess.Popen(
            [str(program), "run"], env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err
        )
    emu.set_webhook_url(f"http://127.0.0.1:{port}/feishu/events/team", TEAM)
    try:
        yield process, port, ops_port, log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def texts(messages: list[ChatMessage]) -> list[str]:
    return [m.text or "" for m in messages]


async def connected(emu: FeishuEmulator, *apps: str) -> None:
    await emu.wait_for(lambda: all(emu.long_connections(app) for app in apps), 30.0)


async def test_three_apps_answer_their_own_chats_with_their_own_agents(tmp_path: Path) -> None:
    async with three_apps() as emu:
        with bridge(emu, tmp_path) as (process, port, _, _):
            await wait_healthy(port, process)
            await connected(emu, CLAUDE, CODEX)
            sent: list[tuple[str, str, str]] = []  # (app, chat, what it must answer)
            for n in range(CHATS_PER_APP):
                for app in (CLAUDE, CODEX, TEAM):
                    user = f"ou_user_{n:02d}"
                    await emu.send_user_message("whoami", app_id=app, sender_open_id=user)
                    chat = emu.p2p_chat(app, user)
                    sent.append((app, chat, "docs" if app == CODEX else "backend"))

            def answered() -> bool:
                return all(emu.bot_messages(chat, app_id=app) for app, chat, _ in sent)

            await emu.wait_for(answered, 60.0)
            for app, chat, agent in sent:
                said = texts(emu.bot_messages(chat, app_id=app))
                assert len(said) == 1, (app, said)
                assert said[0].startswith(f"{agent}: resumed=0"), (app, said)
                others = [a for a in (CLAUDE, CODEX, TEAM) if a != app]
                assert not any(emu.bot_messages(chat, app_id=a) for a in others)
            assert len({chat for _, chat, _ in sent}) == 3 * CHATS_PER_APP

            # Two bots in one group: a message for both is answered by each, in its session.
            group = emu.open_chat("group", bots=[CLAUDE, CODEX])
            for _ in range(2):
                await emu.send_user_message(
                    "history", chat_id=group, chat_type="group", mention_apps=[CLAUDE, CODEX]
                )
            only_claude = await emu.send_user_message(
                "history", chat_id=group, chat_type="group", mention_apps=[CLAUDE]
            )

            def both_answered() -> bool:
                claude = texts(emu.bot_messages(group, app_id=CLAUDE))
                codex = texts(emu.bot_messages(group, app_id=CODEX))
                return len([t for t in claude if t.startswith("history")]) == 3 and (
                    len([t for t in codex if t.startswith("history")]) == 2
                )

            try:
                await emu.wait_for(both_answered, 30.0)
            except TimeoutError:
                said = {a: texts(emu.bot_messages(group, app_id=a)) for a in (CLAUDE, CODEX)}
                raise AssertionError(f"the group was told {said}") from None
            claude = [t for t in texts(emu.bot_messages(group, app_id=CLAUDE)) if "history" in t]
            codex = [t for t in texts(emu.bot_messages(group, app_id=CODEX)) if "history" in t]
            assert claude == ["history: 1 prompts", "history: 2 prompts", "history: 3 prompts"]
            assert codex == ["history: 1 prompts", "history: 2 prompts"]
            replied = {m.parent_id for m in emu.bot_messages(group, app_id=CODEX)}
            assert only_claude.message_id not in replied  # not addressed to Codex


async def test_an_app_with_a_wrong_secret_is_reported_alone(tmp_path: Path) -> None:
    async with three_apps() as emu:
        with bridge(emu, tmp_path, wrong=CODEX) as (process, port, ops_port, log):
            await wait_healthy(port, process)
            await connected(emu, CLAUDE)
            for app in (CLAUDE, TEAM):
                await emu.send_user_message("whoami", app_id=app, sender_open_id="ou_x")
            await emu.wait_for(
                lambda: all(
                    emu.bot_messages(emu.p2p_chat(app, "ou_x"), app_id=app)
                    for app in (CLAUDE, TEAM)
                ),
                30.0,
            )
            async with httpx.AsyncClient(trust_env=False) as http:
                answer = await http.get(f"http://127.0.0.1:{ops_port}/status")
                metrics = (await http.get(f"http://127.0.0.1:{ops_port}/metrics")).text
            status, apps = answer.json(), answer.json()["apps"]
            assert apps["codex"]["bot_open_id"] is None  # it never got in
            assert apps["claude"]["bot_open_id"]
            assert apps["team"]["bot_open_id"]
            # /status says which app is unhealthy, and why; the others are healthy.
            assert (apps["claude"]["problem"], apps["team"]["problem"]) == (None, None)
            assert (apps["claude"]["healthy"], apps["codex"]["healthy"]) == (True, False)
            problem = apps["codex"]["problem"]
            assert problem.startswith("cannot fetch the bot's identity"), problem
            assert "its long connection failed" in problem, problem
            assert apps["codex"]["long_connection"] == "failed"
            assert status["problem"] is None  # the first app's, at the top as always
            assert "not-the-secret" not in answer.text
            # /metrics: each app's own series.
            for app in ("claude", "team"):
                assert f'bridge_inbound_events_total{{app="{app}",fate="accepted"}} 1.0' in metrics
            assert 'bridge_inbound_events_total{app="codex"' not in metrics
            for app in ("claude", "codex", "team"):
                assert f'bridge_feishu_api_down{{app="{app}"}} 0.0' in metrics
                assert f'bridge_feishu_budget_rate_limited_total{{app="{app}"}} 0.0' in metrics
            words = log.read_text()
            assert "app codex: cannot fetch the bot's identity" in words
            assert "app claude: cannot fetch" not in words
            assert "not-the-secret" not in words
            assert emu.long_connection_refused(CODEX)


async def test_a_routed_chat_works_on_its_project_until_it_switches(tmp_path: Path) -> None:
    async with three_apps() as emu:
        with bridge(emu, tmp_path) as (process, port, _, _):
            await wait_healthy(port, process)
            await connected(emu, CLAUDE)
            emu.open_chat("group", chat_id=DOCS_GROUP, bots=[CLAUDE])

            async def say(text: str) -> str:
                sent = await emu.send_user_message(
                    text, chat_id=DOCS_GROUP, chat_type="group", mention_apps=[CLAUDE]
                )

                def answer() -> str | None:
                    said = [m for m in emu.bot_messages(DOCS_GROUP) if m.parent_id]
                    return next(
                        (m.text for m in said if m.parent_id == sent.message_id and m.text), None
                    )

                return await emu.wait_for(answer, 30.0)

            assert (await say("whoami")).startswith("docs: ")  # the route's project
            listed = await say("/project")
            assert "docs" in listed
            assert "backend" in listed
            assert (await say("/project backend")).startswith("已切换到项目 backend")
            assert (await say("whoami")).startswith("backend: ")  # its choice wins
            assert (await say("/project nowhere")).startswith("没有项目 nowhere")
            # A private chat with the same bot is on the app's default all along.
            await emu.send_user_message("whoami", app_id=CLAUDE, sender_open_id="ou_p")
            private = emu.p2p_chat(CLAUDE, "ou_p")
            said = await emu.wait_for(lambda: emu.bot_messages(private, app_id=CLAUDE), 30.0)
            assert (said[0].text or "").startswith("backend: ")
