"""The bridge as one long-lived service: wires the store, the Feishu client, the agent
runtime, the engine, the receiver and the HTTP server, then starts and stops them in order.

`build_service` is the only place that turns Settings into objects; tests and the demo pass
their own Feishu client or runtime where they need to.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

import bridge.feishu.webhook as webhook  # imports lark-oapi's crypto once, at start-up
from bridge.config import Settings
from bridge.core import Options, Timings
from bridge.engine.engine import Engine, EngineConfig
from bridge.feishu.api import FeishuApi
from bridge.feishu.client import FeishuClient
from bridge.feishu.longconn import ConnectionState, LongConnection
from bridge.i18n import Translator
from bridge.logs import configure_logging
from bridge.ops.metrics import Metrics
from bridge.ops.projection import Projection
from bridge.ops.routes import ops_routes
from bridge.receiver import AccessPolicy, Receiver
from bridge.runtime.acp.runtime import AcpRuntime
from bridge.runtime.port import AgentRuntime
from bridge.store.sqlite import SqliteStore

log = logging.getLogger(__name__)


@dataclass
class BotIdentity:
    open_id: str | None = None
    name: str | None = None


@dataclass
class BridgeService:
    settings: Settings
    feishu: FeishuApi
    runtime: AgentRuntime
    store: SqliteStore
    engine: Engine
    receiver: Receiver
    projection: Projection
    metrics: Metrics
    clock: Callable[[], float]
    bot: BotIdentity = field(default_factory=BotIdentity)
    drain_seconds: float = 10.0
    identity_retry_seconds: float = 30.0
    prune_every_seconds: float = 3600.0
    _identity_retry: asyncio.Task[None] | None = None
    _pruner: asyncio.Task[None] | None = None
    _runner: web.AppRunner | None = None
    _site: web.TCPSite | None = None
    _longconn: LongConnection | None = None
    _ready: bool = False
    _started_at: float = 0.0
    port: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        if self.settings.feishu_event_mode == "webhook":
            key = self.settings.feishu_encrypt_key
            token = self.settings.feishu_verification_token
            app.add_routes(
                webhook.webhook_routes(
                    self.receiver,
                    encrypt_key=key.get_secret_value() if key else None,
                    verification_token=token.get_secret_value() if token else None,
                    bot_open_id_provider=lambda: self.bot.open_id,
                    bot_name_provider=lambda: self.bot.name,
                )
            )
        app.add_routes(
            ops_routes(
                self.projection,
                ready=self.healthy,
                status=self.status,
                turn_view=self.engine.turn_view,
                metrics=self.metrics,
            )
        )
        return app

    def status(self) -> dict[str, Any]:
        return {
            "mode": self.settings.feishu_event_mode,
            "ready": self._ready,
            "uptime_seconds": round(self.clock() - self._started_at, 3),
            "bot_open_id": self.bot.open_id,
            "long_connection": self._longconn.state.name.lower() if self._longconn else None,
            "conversations": len(self.engine.conversations),
            "runtime": self.runtime.snapshot(),
        }

    def healthy(self) -> bool:
        """Ready, and (in websocket mode) a long connection that has not given up."""
        if not self._ready:
            return False
        return self._longconn is None or self._longconn.state not in _DEAD_CONNECTION

    async def start(self) -> None:
        self._started_at = self.clock()
        await self.store.open()
        # The server first (healthz says "starting" meanwhile), so a slow Feishu at start-up
        # does not look like a dead process to the orchestrator.
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.settings.bridge_host, self.settings.bridge_port)
        await self._site.start()
        server = self._site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.settings.bridge_port
        await self._identify()
        await self.engine.recover(before=self._started_at)
        # Retention: journaled prompts, seen events and finished turns older than 7 days go.
        await self._prune()
        self._pruner = asyncio.create_task(self._prune_forever())
        if self.settings.feishu_event_mode == "websocket":
            self._longconn = LongConnection(
                self.settings.feishu_app_id or "",
                _secret(self.settings),
                self.settings.feishu_domain,
                self.receiver,
                asyncio.get_running_loop(),
                bot_open_id_provider=lambda: self.bot.open_id,
                bot_name_provider=lambda: self.bot.name,
            )
            self._longconn.start()
        self._ready = True
        log.info(
            "bridge ready: mode=%s http=%s:%s",
            self.settings.feishu_event_mode,
            self.settings.bridge_host,
            self.port,
        )

    async def _identify(self) -> None:
        # Without the bot's open id, group @-mentions cannot be recognised; keep running
        # (private chats still work), say so plainly, and keep trying in the background.
        if not await self._fetch_identity(logging.ERROR):
            self._identity_retry = asyncio.create_task(self._identify_later())

    async def _identify_later(self) -> None:
        delay = self.identity_retry_seconds
        while True:
            await asyncio.sleep(delay)
            if await self._fetch_identity(logging.WARNING):
                return
            delay = min(delay * 2, 600.0)

    async def _fetch_identity(self, level: int) -> bool:
        try:
            info = await self.feishu.bot_info()
        except Exception as exc:
            log.log(level, "cannot fetch the bot's identity (check FEISHU_APP_ID/SECRET): %s", exc)
            return False
        self.bot.open_id, self.bot.name = info.open_id, info.app_name
        log.info("bot identity: %s (%s)", info.app_name, info.open_id)
        return True

    async def _prune(self) -> None:
        try:
            removed = await self.store.prune(self.clock())
        except Exception:
            log.exception("pruning the store failed")
            return
        if removed:
            log.info("pruned %d old records from the store", removed)

    async def _prune_forever(self) -> None:
        while True:
            await asyncio.sleep(self.prune_every_seconds)
            await self._prune()

    async def stop(self) -> None:
        self._ready = False
        for task in (self._identity_retry, self._pruner):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._longconn is not None:
            await self._longconn.stop()
        await self.engine.drain(self.drain_seconds)
        self.projection.close()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.runtime.close()
        await self.feishu.aclose()
        await self.store.close()


_DEAD_CONNECTION = frozenset({ConnectionState.FAILED, ConnectionState.STOPPED})


def _secret(settings: Settings) -> str:
    secret = settings.feishu_app_secret
    return secret.get_secret_value() if secret else ""


def build_service(
    settings: Settings,
    *,
    feishu: FeishuApi | None = None,
    runtime: AgentRuntime | None = None,
    clock: Callable[[], float] = time.time,
    runtime_env: dict[str, str] | None = None,
) -> BridgeService:
    translator = Translator(settings.bridge_locale)
    projection = Projection(clock=clock)
    metrics = Metrics(projection)
    store = SqliteStore(settings.db_path)
    if feishu is None:
        feishu = FeishuClient(
            settings.feishu_app_id or "", _secret(settings), settings.feishu_domain
        )
    if runtime is None:
        runtime = AcpRuntime.from_settings(settings, env=runtime_env)
    engine = Engine(
        feishu=feishu,
        runtime=runtime,
        store=store,
        translator=translator,
        config=EngineConfig(
            timings=Timings.from_settings(settings),
            options=Options(
                received_text=settings.bridge_received_text,
                approvers=frozenset(settings.bridge_approvers),
            ),
            ack_emoji=settings.bridge_ack_emoji,
            max_running_turns=settings.bridge_max_conversations,
        ),
        clock=clock,
        publish=projection.publish,
        metrics=metrics,
    )
    bot = BotIdentity()
    receiver = Receiver(
        store=store,
        sink=engine,
        policy=AccessPolicy(
            frozenset(settings.bridge_allowed_users), frozenset(settings.bridge_allowed_chats)
        ),
        bot_open_id=lambda: bot.open_id,
        clock=clock,
        count=lambda fate: metrics.inbound.labels(fate).inc(),
    )
    return BridgeService(
        settings=settings,
        feishu=feishu,
        runtime=runtime,
        store=store,
        engine=engine,
        receiver=receiver,
        projection=projection,
        metrics=metrics,
        clock=clock,
        bot=bot,
    )


async def run_service(settings: Settings) -> int:
    secrets = [
        s.get_secret_value()
        for s in (
            settings.feishu_app_secret,
            settings.feishu_encrypt_key,
            settings.feishu_verification_token,
        )
        if s is not None
    ]
    configure_logging(settings.bridge_log_level, secrets)
    service = build_service(settings)
    await service.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await service.stop()
    return 0
