"""`feishu-bridge demo`: the whole product on loopback, no Feishu account needed.

Starts the local Feishu emulator (with its chat page), the bridge in webhook mode against
it, and the scripted ACP agent (or any ACP agent given with `--agent`). Timings are
shortened so every presence state can be seen within a minute.

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

from bridge.config import Settings, Tuning
from bridge.config.checks import root_without_sandbox
from bridge.devtools.emulator import FeishuEmulator
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
) -> Demo:
    """Emulator + bridge, wired to each other. Explicit `settings` win over the environment;
    integration tests use this too, with millisecond timings (and their own `tuning`)."""
    emulator = FeishuEmulator(
        encrypt_key="demo-encrypt-key",
        verification_token="demo-verification-token",
        scenarios=DEMO_SCENARIOS,
        port=port,
        **(emulator_options or {}),
    )
    await emulator.start()
    values: dict[str, object] = {
        "feishu_app_id": emulator.app_id,
        "feishu_app_secret": emulator.app_secret,
        "feishu_domain": emulator.url,
        "feishu_event_mode": "webhook",
        "feishu_encrypt_key": "demo-encrypt-key",
        "feishu_verification_token": "demo-verification-token",
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
    try:
        service = build_service(config, feishu=client, runtime_env=env, tuning=tuning)
        await service.start()
    except BaseException:
        await emulator.close()
        raise
    emulator.webhook_url = f"http://127.0.0.1:{service.port}/feishu/events"
    return Demo(emulator, service)


async def run_demo(*, port: int, locale: str | None, agent: str | None = None) -> int:
    configure_logging("INFO")
    with tempfile.TemporaryDirectory(prefix="feishu-bridge-demo-") as tmp:
        extra = {"bridge_locale": locale} if locale else {}
        demo = await start_demo(port=port, data_dir=Path(tmp), agent_command=agent, settings=extra)
        t = Translator(demo.service.settings.presence.bridge_locale)
        api = f"http://127.0.0.1:{demo.service.ops_port}/runtime-states"
        print("\n" + t("cli.demo_ready", chat=demo.chat_url, api=api) + "\n", flush=True)
        try:
            await until_signalled()
        finally:
            await demo.close()
    return 0
