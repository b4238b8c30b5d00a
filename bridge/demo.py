"""`feishu-bridge demo`: the whole product on loopback, no Feishu account needed.

Starts the local Feishu emulator (with its chat page), the bridge in webhook mode against
it, and the scripted ACP agent (or any ACP agent given with `--agent`). Timings are
shortened so every presence state can be seen within a minute.

`feishu-bridge demo` runs two bots, Claude and Codex (two Feishu apps of the emulator, each
its own webhook path, project and agent: the scripted agent under each bot's name), in one
bridge: the page shows a group with both, where an @-mention picks which one answers. Tests
start it with one bot (`start_demo`'s default), as a single-app bridge runs.

As root without a sandbox, the scripted agent still runs (it is the bridge's own code, and
the demo's secrets are the emulator's): BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX is implied for it,
and said in the log. An `--agent` is refused there like `run` refuses it, unless set.
"""

from __future__ import annotations

import logging
import shlex
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bridge.config import Settings, Tuning
from bridge.config.apps import WEBHOOK_PATHS, Access, App, Apps, project_from_agent
from bridge.config.checks import root_without_sandbox
from bridge.devtools.emulator import FeishuEmulator
from bridge.devtools.emulator.apps import AppSpec
from bridge.feishu.api import FeishuApi
from bridge.i18n import Translator
from bridge.logs import configure_logging
from bridge.running import until_signalled
from bridge.service import BridgeService, build_service

log = logging.getLogger(__name__)

# Prompts for the scripted agent, shown as chips on the chat page.
DEMO_SCENARIOS = (
    "hello",
    "think planning\ntool Read README.md\nsay Here is the summary you asked for.",
    "sleep 4000\nsay Done after a slow start.",
    "permission Delete build/",
    "ask Which environment? staging|production",
    "tool Run tests\nsleep 20000\nsay Tests passed.",
    "hang",
    "silent",
    "stop max_tokens",
    "crash",
    "/status",
    "/help",
)

DEMO_TIMINGS = {
    "bridge_first_hint_seconds": 2.0,
    "bridge_heartbeat_seconds": 15.0,
    "bridge_stale_seconds": 45.0,
    "bridge_approval_timeout_seconds": 120.0,
    "bridge_finish_grace_seconds": 1.0,
}
DEMO_TUNING = Tuning(progress_interval_seconds=1.0)

# The demo's bots: (the app's name in the bridge, its bot's name). `bots=2` runs both.
DEMO_BOTS = (("claude", "Claude"), ("codex", "Codex"))
DEMO_ENCRYPT_KEY = "demo-encrypt-key"
DEMO_VERIFICATION_TOKEN = "demo-verification-token"


def scripted_agent_command() -> str:
    return shlex.join([sys.executable, "-m", "bridge.devtools.scripted_agent"])


@dataclass
class Demo:
    emulator: FeishuEmulator
    service: BridgeService

    @property
    def chat_url(self) -> str:
        return f"{self.emulator.url}/"

    async def close(self) -> None:
        await self.service.stop()
        await self.emulator.close()


async def start_demo(
    *,
    port: int = 0,
    data_dir: Path,
    agent_command: str | None = None,
    emulator_options: Mapping[str, Any] | None = None,
    feishu: Callable[[FeishuEmulator], FeishuApi] | None = None,
    settings: Mapping[str, object] | None = None,
    tuning: Tuning = DEMO_TUNING,
    bots: int = 1,
) -> Demo:
    """Emulator + bridge, wired to each other. Explicit `settings` win over the environment;
    integration tests use this too, with millisecond timings (and their own `tuning`).
    `bots`: 1, the single app of the environment settings; 2, the apps of `DEMO_BOTS`, each
    its own bot in the emulator's group, its own webhook path and agent, in one bridge."""
    if bots not in (1, 2):
        raise ValueError("the demo runs one bot or two")
    hosted: dict[str, Any] = {
        "encrypt_key": DEMO_ENCRYPT_KEY,
        "verification_token": DEMO_VERIFICATION_TOKEN,
    }
    scenarios: tuple[str, ...] = DEMO_SCENARIOS
    if bots == 2:
        specs = [
            AppSpec(
                f"cli_demo_{name}",
                f"demo-{name}-secret",
                encrypt_key=DEMO_ENCRYPT_KEY,
                verification_token=DEMO_VERIFICATION_TOKEN,
                bot_name=bot,
            )
            for name, bot in DEMO_BOTS
        ]
        hosted, scenarios = {"apps": specs}, ("whoami", *DEMO_SCENARIOS)
    emulator = FeishuEmulator(scenarios=scenarios, port=port, **hosted, **(emulator_options or {}))
    await emulator.start()
    values: dict[str, object] = {
        "feishu_app_id": emulator.app_id,
        "feishu_app_secret": emulator.app_secret,
        "feishu_domain": emulator.url,
        "feishu_event_mode": "webhook",
        "feishu_encrypt_key": DEMO_ENCRYPT_KEY,
        "feishu_verification_token": DEMO_VERIFICATION_TOKEN,
        "bridge_host": "127.0.0.1",
        "bridge_port": 0,
        "bridge_ops_host": "127.0.0.1",
        "bridge_ops_port": 0,
        # The chat page's users are the emulator's own; anyone on it may drive the agent.
        "bridge_allow_all": True,
        "bridge_data_dir": data_dir,
        "bridge_workdir": data_dir,
        "bridge_agent_command": agent_command or scripted_agent_command(),
        **({} if agent_command else {"bridge_allow_root_without_sandbox": True}),
        **DEMO_TIMINGS,
        **(settings or {}),
    }
    config = Settings(**values)
    if agent_command is None and root_without_sandbox(config):
        log.info(
            "demo: the scripted agent (the bridge's own code) runs as root without a sandbox:"
            " BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX is implied for it, not for --agent"
        )
    env = {"SCRIPTED_AGENT_STATE_DIR": str(data_dir / "agent-state")}
    client = feishu(emulator) if feishu is not None else None
    apps = _demo_apps(emulator, config, named=agent_command is None) if bots == 2 else None
    try:
        service = build_service(config, feishu=client, runtime_env=env, tuning=tuning, apps=apps)
        await service.start()
    except BaseException:
        await emulator.close()
        raise
    if apps is None:
        emulator.webhook_url = f"http://127.0.0.1:{service.port}/feishu/events"
    else:
        for app in apps.apps.values():
            url = f"http://127.0.0.1:{service.port}{app.webhook_path}"
            emulator.set_webhook_url(url, app.app_id)
    return Demo(emulator, service)


def _demo_apps(emulator: FeishuEmulator, config: Settings, *, named: bool) -> Apps:
    """The emulator's apps as the bridge serves them: each its own webhook path and keys,
    anyone on the page allowed, and a project of its own whose agent is the demo's agent
    (the scripted one under the bot's name, so `whoami` tells them apart)."""
    projects, apps = {}, {}
    for (name, bot), spec in zip(DEMO_BOTS, emulator.apps.values(), strict=True):
        project = project_from_agent(name, config.agent)
        if named:
            command = f"{project.agent_command} --name {bot}"
            project = project.model_copy(update={"agent_command": command})
        projects[name] = project
        apps[name] = App(
            name=name,
            app_id=spec.app_id,
            app_secret=SecretStr(spec.app_secret),
            encrypt_key=SecretStr(spec.encrypt_key),
            verification_token=SecretStr(spec.verification_token),
            domain=emulator.url,
            intake="webhook",
            webhook_path=WEBHOOK_PATHS + name,
            access=Access(allow_all=True),
            default_project=name,
        )
    return Apps(projects=projects, apps=apps)


async def run_demo(*, port: int, locale: str | None, agent: str | None = None) -> int:
    configure_logging("INFO")
    with tempfile.TemporaryDirectory(prefix="feishu-bridge-demo-") as tmp:
        extra = {"bridge_locale": locale} if locale else {}
        demo = await start_demo(
            port=port, data_dir=Path(tmp), agent_command=agent, settings=extra, bots=2
        )
        t = Translator(demo.service.settings.presence.bridge_locale)
        api = f"http://127.0.0.1:{demo.service.ops_port}/runtime-states"
        print("\n" + t("cli.demo_ready", chat=demo.chat_url, api=api) + "\n", flush=True)
        try:
            await until_signalled()
        finally:
            await demo.close()
    return 0
