"""The composition root: `build_service` turns Settings into objects (the store, the Feishu
client, the agent runtime, the engine, the receiver, the Feishu listener or long connection,
and the operator listener); `BridgeService` only starts and stops them, in order.

Tests and the demo pass their own Feishu client or runtime where they need to.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
from aiohttp import web

import bridge.feishu.webhook as webhook
from bridge.clock import Clock, LoopClock, new_id
from bridge.cluster.identity import check_alone
from bridge.cluster.ownership import Ownership
from bridge.config import Settings, Tuning
from bridge.config.budget import BudgetSection
from bridge.config.checks import (
    UnsafeConfiguration,
    describe_access,
    exposure_problems,
    root_problems,
    root_without_sandbox,
)
from bridge.config.feishu import FeishuSection
from bridge.core import Options, PresenceStyle
from bridge.core.state import Urgency
from bridge.engine.engine import Engine, EngineConfig
from bridge.feishu.api import FeishuApi
from bridge.feishu.budget import BudgetPolicy, CallBudget
from bridge.feishu.client import FeishuClient
from bridge.feishu.delivery import DeliveryPolicy
from bridge.feishu.events import BotIdentity
from bridge.feishu.longconn import ConnectionState, LongConnection
from bridge.feishu.retry import RetryPolicy
from bridge.i18n import Translator
from bridge.listener import Listener
from bridge.ops.access import ops_middlewares
from bridge.ops.cluster_routes import cluster_routes
from bridge.ops.housekeeping import Housekeeping, reachable_url
from bridge.ops.metrics import Metrics
from bridge.ops.projection import ProcessWatch, Projection
from bridge.ops.routes import health_routes, ops_routes
from bridge.ops.sessions import SessionDirectory
from bridge.ops.turns import turn_view
from bridge.receiver import AccessPolicy, Receiver
from bridge.runtime.port import AgentRuntime
from bridge.runtime.router import RoutedRuntime, Routes, acp_routed
from bridge.schedules.scheduler import ScheduleSettings
from bridge.store.port import Store
from bridge.stores import ownership_for, secret, store_for

log = logging.getLogger(__name__)


@dataclass
class Readiness:
    """What `/healthz` and `/status` read; the service sets it as it starts and stops."""

    clock: Callable[[], float]
    longconn: LongConnection | None = None
    ready: bool = False
    started_at: float = 0.0

    def healthy(self) -> bool:
        """Ready, and (in websocket mode) a long connection that has not given up."""
        if not self.ready:
            return False
        return self.longconn is None or self.longconn.state not in _DEAD_CONNECTION


@dataclass
class BridgeService:
    settings: Settings
    feishu: FeishuApi
    runtime: AgentRuntime
    store: Store
    engine: Engine
    receiver: Receiver
    projection: Projection
    metrics: Metrics
    clock: Callable[[], float]
    readiness: Readiness
    feishu_listener: Listener
    ops_listener: Listener
    sessions: SessionDirectory
    housekeeping: Housekeeping
    longconn: LongConnection | None = None
    ownership: Ownership | None = None  # several instances on PostgreSQL
    bot: BotIdentity = field(default_factory=BotIdentity)
    drain_seconds: float = 10.0
    identity_retry_seconds: float = 30.0
    _identity_retry: asyncio.Task[None] | None = None
    _warmup: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The Feishu listener's bound port (the webhook URL's)."""
        return self.feishu_listener.port

    @property
    def ops_port(self) -> int:
        """The operator listener's bound port."""
        return self.ops_listener.port

    async def start(self) -> None:
        self.readiness.started_at = self.clock()
        log.info("%s", describe_access(self.settings))
        await self.store.open()
        await self.sessions.load()  # the operator's display names, into the snapshots
        if self.ownership is not None:
            await check_alone(
                self.store,
                self.settings.cluster.bridge_instance_id,
                self.projection.epoch,
                ttl=self.settings.cluster.bridge_lease_seconds,
                clock=self.clock,
                sleep=asyncio.sleep,
            )
            await self.ownership.prepare()  # an earlier process's leases go before any claim
        # The listeners first (healthz: "starting"): a slow Feishu is not a dead process.
        await self.feishu_listener.start()
        await self.ops_listener.start()
        await self._identify()
        self.engine.probe_voice()
        self.engine.probe_urgent()
        if self.ownership is None:
            await self.engine.recover(before=self.readiness.started_at)
        else:  # only what no live instance runs: claimed, then recovered the same way
            await self.ownership.start()
        await self.engine.start_schedules()  # one that came due while down runs once
        self.housekeeping.ops_url = reachable_url(self.settings.ops.bridge_ops_host, self.ops_port)
        await self.housekeeping.start()  # pruning, and the heartbeat `status --all` reads
        if self.longconn is not None:
            self.longconn.start()
        self.readiness.ready = True
        if isinstance(self.runtime, RoutedRuntime):
            self._warmup = asyncio.create_task(self.runtime.warm(), name="runtime-warmup")
        log.info(
            "bridge ready: mode=%s %s %s",
            self.settings.feishu.feishu_event_mode,
            self.feishu_listener,
            self.ops_listener,
        )

    async def _identify(self) -> None:
        # No bot open id, no group @-mentions (private chats work): say so, keep trying.
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

    async def stop(self) -> None:
        self.readiness.ready = False
        for task in (self._identity_retry, self._warmup):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.housekeeping.stop()
        if self.longconn is not None:
            await self.longconn.stop()
        if self.ownership is not None:
            await self.ownership.stop()  # nothing more is claimed or fed here
        await self.engine.drain(self.drain_seconds)
        if self.ownership is not None:
            await self.ownership.release()  # the leases go back: the others take over
        self.projection.close()
        await self.feishu_listener.stop()
        await self.ops_listener.stop()
        await self.runtime.close()
        await self.feishu.aclose()
        await self.store.close()


_DEAD_CONNECTION = frozenset({ConnectionState.FAILED, ConnectionState.STOPPED})


def call_budget(section: BudgetSection, clock: Clock, tuning: Tuning) -> CallBudget:
    """The app's Feishu call budget, paced at the limits' margin on `clock` (the
    simulator passes its own clock, so the pacing runs on its virtual time)."""
    return CallBudget(BudgetPolicy.of(tuning.limits(section)), now=clock.now, call_at=clock.call_at)


def feishu_client(
    section: FeishuSection,
    clock: Clock,
    translator: Translator,
    budget: CallBudget,
    *,
    http: httpx.AsyncClient | None = None,
    retry: RetryPolicy | None = None,
) -> FeishuClient:
    """The outbound Feishu stack as the service runs it: the client (its token, retries and
    breaker) paced by `budget`. The simulator gives it a transport that plays Feishu and a
    retry policy whose jitter comes from the seed."""
    return FeishuClient(
        section.feishu_app_id or "",
        secret(section.feishu_app_secret) or "",
        section.feishu_domain,
        clock=clock.now,
        cut_notice=lambda kept, total: translator("reply.cut", kept=kept, total=total),
        budget=budget,
        http=http,
        retry=retry,
    )


def build_service(
    settings: Settings,
    *,
    feishu: FeishuApi | None = None,
    runtime: AgentRuntime | None = None,
    clock: Clock | None = None,
    runtime_env: dict[str, str] | None = None,
    tuning: Tuning | None = None,
) -> BridgeService:
    """Everything the service runs, built from `settings` (in websocket mode, on the running
    event loop, which the long connection hands its events to); `tuning`: what tests, benches
    and the demo set that the operator does not."""
    clock, tuning = clock or LoopClock(), tuning or Tuning()
    wall = clock.wall  # leases, snapshots and uptime: times other processes read too
    problems = exposure_problems(settings)
    if runtime is None:  # it starts agents itself: as root, only sandboxed or on purpose
        problems += root_problems(settings)
    if problems:
        raise UnsafeConfiguration(problems)
    if runtime is None and root_without_sandbox(settings):
        log.warning(
            "agents run as root without a sandbox (BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX=true):"
            " an agent's shell can read this process's memory, its secrets included;"
            " BRIDGE_AGENT_SANDBOX=bwrap keeps it out (docs/sandbox.md)"
        )
    presence, agent, access, ops = settings.presence, settings.agent, settings.access, settings.ops
    translator = Translator(presence.bridge_locale)
    projection = Projection(new_id(), wall, instance_id=settings.cluster.bridge_instance_id)
    store = store_for(settings)
    budget = call_budget(settings.budget, clock, tuning)
    if feishu is None:
        feishu = feishu_client(settings.feishu, clock, translator, budget)
    elif isinstance(feishu, FeishuClient):
        feishu.pace(budget)  # a client made by a test or the demo, paced as the product's
    routes = Routes.of(agent.agent_profiles, agent.workspace_roots)
    watch = ProcessWatch(projection, routes.agents[0][0], routes.workspaces[0][0])
    if runtime is None:
        options = {"env": runtime_env, "on_change": watch.changed}
        runtime = acp_routed(settings, routes, clock, options)
    watch.runtime = runtime
    metrics = Metrics(projection, runtime_snapshot=runtime.snapshot)
    metrics.watch_budget(budget.state)
    engine = Engine(
        feishu=feishu,
        runtime=runtime,
        store=store,
        translator=translator,
        config=EngineConfig(
            timings=tuning.timings(presence),
            options=Options(
                received_text=presence.bridge_received_text,
                approvers=frozenset(access.bridge_approvers),
                requester_may_approve=access.bridge_requester_may_approve,
                presence_style=PresenceStyle(presence.bridge_presence_style),
                usage_footer=presence.bridge_usage_footer,
                state_reactions=presence.bridge_state_reactions,
                urgency=Urgency.APP if presence.bridge_urgent else Urgency.OFF,
            ),
            routes=routes,
            attachments_dir=settings.store.bridge_data_dir / "inbox",
            max_attachment_mb=agent.bridge_max_attachment_mb,
            voice=settings.voice.bridge_voice,
            voice_max_seconds=settings.voice.bridge_voice_max_seconds,
            ack_emoji=presence.bridge_ack_emoji,
            max_running_turns=agent.bridge_max_running_turns,
            card_interval=presence.bridge_card_update_interval_seconds,
            schedules=ScheduleSettings.from_settings(settings.schedules),
            delivery=DeliveryPolicy(
                *tuning.probes(settings.budget),
                give_up_after=settings.budget.bridge_delivery_give_up_seconds,
            ),
        ),
        clock=clock,
        publish=projection.publish,
        metrics=metrics,
        session_ended=projection.session_ended,
        budget=budget,
    )
    bot = BotIdentity()
    ownership = ownership_for(settings, store, engine, wall)
    receiver = Receiver(
        store=store,
        sink=engine.intake if ownership is None else ownership,
        policy=AccessPolicy(
            frozenset(access.bridge_allowed_users),
            frozenset(access.bridge_allowed_chats),
            allow_all=access.bridge_allow_all,
        ),
        bot=bot,
        clock=wall,
        fates=metrics.inbound,
        app_id=settings.feishu.feishu_app_id,
        max_event_age=settings.feishu.bridge_max_event_age_seconds,
        quoted_content=feishu.message_content,
        voice_kind=engine.voice_mode.kind,
        bot_menu=settings.feishu.bridge_bot_menu,
    )
    readiness = Readiness(wall)
    feishu_app = _feishu_app(settings.feishu, receiver, bot, readiness)
    status = partial(_status, settings, readiness, bot, engine, runtime, projection, wall)
    sessions = SessionDirectory(store, engine, projection, routes, wall)
    ops_app = web.Application(middlewares=ops_middlewares(secret(ops.bridge_ops_token)))
    ops_app.add_routes(
        ops_routes(
            projection,
            ready=readiness.healthy,
            status=status,
            turn_view=partial(turn_view, store, pending=engine.executor.traces.pending),
            metrics=metrics,
            sessions=sessions,
        )
    )
    if ownership is not None:
        ops_app.add_routes(cluster_routes(ownership.take_forwarded))
    return BridgeService(
        settings=settings,
        feishu=feishu,
        runtime=runtime,
        store=store,
        engine=engine,
        receiver=receiver,
        projection=projection,
        metrics=metrics,
        clock=wall,
        readiness=readiness,
        feishu_listener=Listener(
            "feishu", feishu_app, settings.feishu.bridge_host, settings.feishu.bridge_port
        ),
        ops_listener=Listener("ops", ops_app, ops.bridge_ops_host, ops.bridge_ops_port),
        longconn=readiness.longconn,
        bot=bot,
        sessions=sessions,
        ownership=ownership,
        housekeeping=Housekeeping(
            store,
            wall,
            instance_id=projection.instance_id,
            epoch=projection.epoch,
            ops_url="",  # known once the operator listener has its port (start)
            facts=partial(_facts, engine),
            beat_every=settings.cluster.bridge_lease_seconds / 3,
        ),
    )


def _feishu_app(
    settings: FeishuSection, receiver: Receiver, bot: BotIdentity, readiness: Readiness
) -> web.Application:
    """The Feishu listener: the event request URL (webhook mode) and `/healthz`. In websocket
    mode events come over the long connection instead, built here too."""
    app = web.Application()
    if settings.feishu_event_mode == "webhook":
        app.add_routes(
            webhook.webhook_routes(
                receiver,
                encrypt_key=secret(settings.feishu_encrypt_key),
                verification_token=secret(settings.feishu_verification_token),
                bot=bot,
            )
        )
    else:
        readiness.longconn = LongConnection(
            settings.feishu_app_id or "",
            secret(settings.feishu_app_secret) or "",
            settings.feishu_domain,
            receiver,
            asyncio.get_running_loop(),
            bot=bot,
        )
    app.add_routes(health_routes(readiness.healthy))
    return app


def _facts(engine: Engine) -> dict[str, Any]:
    """What this instance's heartbeat tells the others (counts, never any text)."""
    actors = list(engine.conversations.values())
    running = sum(1 for actor in actors if actor.conv.turn is not None)
    return {"conversations": len(actors), "running": running}


def _status(
    settings: Settings,
    readiness: Readiness,
    bot: BotIdentity,
    engine: Engine,
    runtime: AgentRuntime,
    projection: Projection,
    clock: Callable[[], float],
) -> dict[str, Any]:
    """`GET /status`: the process (the conversations' snapshots are added by the route)."""
    longconn = readiness.longconn
    return {
        "mode": settings.feishu.feishu_event_mode,
        "ready": readiness.ready,
        "uptime_seconds": round(clock() - readiness.started_at, 3),
        "bot_open_id": bot.open_id,
        "long_connection": longconn.state.name.lower() if longconn else None,
        "conversations": len(engine.conversations),
        "feishu_api": engine.gate.state(),
        "voice": engine.voice_mode.state(),
        "urgent": engine.urgent_mode.state(),
        "feishu_budget": engine.budget.state() if engine.budget else None,
        "event_subscribers": projection.subscribers(),
        "runtime": runtime.snapshot(),
    }
