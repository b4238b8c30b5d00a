"""The composition root: `build_service` turns Settings into objects (the store, the Feishu
client, the agent runtime, the engine, the receiver, the Feishu listener or long connection,
and the operator listener); `BridgeService` only starts and stops them, in order.

Tests and the demo pass their own Feishu client or runtime where they need to.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import httpx
from aiohttp import web

import bridge.feishu.webhook as webhook
from bridge.clock import Clock, LoopClock, new_id
from bridge.cluster.identity import check_alone
from bridge.cluster.ownership import Ownership
from bridge.config import Settings, Tuning
from bridge.config.apps import (
    DEFAULT,
    PROJECT_SETTINGS,
    App,
    Apps,
    Project,
    apps_from_settings,
)
from bridge.config.budget import BudgetSection
from bridge.config.checks import (
    ConfigProblem,
    UnsafeConfiguration,
    describe_access,
    exposure_problems,
    ops_exposure_problems,
    root_problems,
    root_without_sandbox,
)
from bridge.config.feishu import FeishuSection
from bridge.core import Options, PresenceStyle
from bridge.core.state import Urgency
from bridge.engine.engine import Engine, EngineConfig
from bridge.feishu.api import FeishuApi
from bridge.feishu.budget import BudgetPolicy, CallBudget, Spent
from bridge.feishu.budget_record import FILE_NAME as BUDGET_RECORD
from bridge.feishu.budget_record import BudgetRecord
from bridge.feishu.client import FeishuClient
from bridge.feishu.delivery import DeliveryPolicy
from bridge.feishu.events import BotIdentity
from bridge.feishu.longconn import ConnectionState, LongConnection
from bridge.feishu.retry import RetryPolicy
from bridge.i18n import Translator
from bridge.listener import Listener
from bridge.ops.access import ops_middlewares
from bridge.ops.app_health import AppFacts, health, without_secrets
from bridge.ops.cluster_routes import cluster_routes
from bridge.ops.housekeeping import Housekeeping, reachable_url
from bridge.ops.metrics import MetricsRegistry
from bridge.ops.projection import ProcessWatch, Projection
from bridge.ops.routes import health_routes, ops_routes
from bridge.ops.sessions import AppSessions, SessionDirectory
from bridge.ops.turns import TurnView, app_turn_view, turn_view
from bridge.receiver import AccessPolicy, Receiver
from bridge.runtime.port import CONFIG_CHOICE, MODE_CHOICE, AgentRuntime
from bridge.runtime.router import Projects, RoutedRuntime, Routes, acp_routed
from bridge.schedules.scheduler import ScheduleSettings
from bridge.store.port import Store
from bridge.stores import app_folder, ownership_for, secret, store_for

log = logging.getLogger(__name__)


@dataclass
class Readiness:
    """What `/healthz` and `/status` read; the service sets it as it starts and stops."""

    clock: Callable[[], float]
    longconns: list[LongConnection] = field(default_factory=list)
    ready: bool = False
    started_at: float = 0.0

    def healthy(self) -> bool:
        """Ready, and (in websocket mode) some app's long connection that has not given up:
        one app's dead connection (a wrong secret) is its own fault, told by /status, not
        a reason to restart the process the other apps run in."""
        if not self.ready:
            return False
        return not self.longconns or any(
            conn.state not in _DEAD_CONNECTION for conn in self.longconns
        )


@dataclass
class AppStack:
    """One Feishu app's part of the bridge, sharing nothing with another app's but the
    process, the listeners and the operator's view: its client, call budget and delivery
    gate (in its engine), its store (its own file or schema: every key is the app's), its
    agents, its receiver and intake, its bot identity."""

    name: str
    feishu: FeishuApi
    runtime: AgentRuntime
    store: Store
    engine: Engine
    receiver: Receiver
    sessions: SessionDirectory
    housekeeping: Housekeeping
    bot: BotIdentity
    longconn: LongConnection | None = None
    ownership: Ownership | None = None  # several instances on PostgreSQL
    identity_retry_seconds: float = 30.0
    started: bool = False  # its start ran: what /status finds missing is then a problem
    identity_error: str | None = None  # why the bot's identity could not be fetched
    secrets: tuple[str | None, ...] = ()  # never shown in /status, even in an error's text
    # Records what the call budget spent of Feishu's minutes, for the next process (at the
    # end: nothing more is called).
    spending: Callable[[], None] | None = None
    _identity_retry: asyncio.Task[None] | None = None
    _warmup: asyncio.Task[None] | None = None

    async def open(
        self, settings: Settings, projection: Projection, clock: Callable[[], float]
    ) -> None:
        await self.store.open()
        await self.sessions.load()  # the operator's display names, into the snapshots
        if self.ownership is not None:
            await check_alone(
                self.store,
                settings.cluster.bridge_instance_id,
                projection.epoch,
                ttl=settings.cluster.bridge_lease_seconds,
                clock=clock,
                sleep=asyncio.sleep,
            )
            await self.ownership.prepare()  # an earlier process's leases go before any claim

    async def start(self, started_at: float, ops_url: str) -> None:
        self.started = True
        await self._identify()
        self.engine.probe_voice()
        self.engine.probe_urgent()
        if self.ownership is None:
            await self.engine.recover(before=started_at)
        else:  # only what no live instance runs: claimed, then recovered the same way
            await self.ownership.start()
        await self.engine.start_schedules()  # one that came due while down runs once
        self.housekeeping.ops_url = ops_url
        await self.housekeeping.start()  # pruning, and the heartbeat `status --all` reads
        if self.longconn is not None:
            self.longconn.start()
        if isinstance(self.runtime, RoutedRuntime):
            self._warmup = asyncio.create_task(self.runtime.warm(), name=f"warmup:{self.name}")

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
            log.log(
                level,
                "app %s: cannot fetch the bot's identity (check its app id and secret): %s",
                self.name,
                exc,
            )
            self.identity_error = without_secrets(str(exc) or type(exc).__name__, self.secrets)
            return False
        self.identity_error = None
        self.bot.open_id, self.bot.name = info.open_id, info.app_name
        log.info("app %s: bot identity %s (%s)", self.name, info.app_name, info.open_id)
        return True

    async def quiesce(self) -> None:
        """Nothing new comes in or is claimed; what is under way carries on."""
        for task in (self._identity_retry, self._warmup):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.housekeeping.stop()
        if self.longconn is not None:
            await self.longconn.stop()
        if self.ownership is not None:
            await self.ownership.stop()  # nothing more is claimed or fed here

    async def drain(self, seconds: float) -> None:
        await self.engine.drain(seconds)
        if self.ownership is not None:
            await self.ownership.release()  # the leases go back: the others take over

    async def close(self) -> None:
        await self.runtime.close()
        await self.feishu.aclose()
        if self.spending is not None:
            self.spending()
        await self.store.close()


@dataclass
class BridgeService:
    """The apps' stacks (`apps`: the first is the single app of the environment settings, or
    the file's first), the operator's view they share, and the two listeners."""

    settings: Settings
    apps: list[AppStack]
    projection: Projection
    metrics: MetricsRegistry
    clock: Callable[[], float]
    readiness: Readiness
    feishu_listener: Listener
    ops_listener: Listener
    drain_seconds: float = 10.0

    # The first app's parts, as a single app's service had them (tests, the demo).
    @property
    def first(self) -> AppStack:
        return self.apps[0]

    @property
    def feishu(self) -> FeishuApi:
        return self.first.feishu

    @property
    def runtime(self) -> AgentRuntime:
        return self.first.runtime

    @property
    def store(self) -> Store:
        return self.first.store

    @property
    def engine(self) -> Engine:
        return self.first.engine

    @property
    def receiver(self) -> Receiver:
        return self.first.receiver

    @property
    def sessions(self) -> SessionDirectory:
        return self.first.sessions

    @property
    def housekeeping(self) -> Housekeeping:
        return self.first.housekeeping

    @property
    def bot(self) -> BotIdentity:
        return self.first.bot

    @property
    def longconn(self) -> LongConnection | None:
        return self.first.longconn

    @property
    def ownership(self) -> Ownership | None:
        return self.first.ownership

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
        if len(self.apps) == 1:
            log.info("%s", describe_access(self.settings))
        for stack in self.apps:
            await stack.open(self.settings, self.projection, self.clock)
        # The listeners first (healthz: "starting"): a slow Feishu is not a dead process.
        await self.feishu_listener.start()
        await self.ops_listener.start()
        ops_url = reachable_url(self.settings.ops.bridge_ops_host, self.ops_port)
        for stack in self.apps:
            await stack.start(self.readiness.started_at, ops_url)
        self.readiness.ready = True
        log.info(
            "bridge ready: apps=%s mode=%s %s %s",
            ",".join(stack.name for stack in self.apps),
            self.settings.feishu.feishu_event_mode,
            self.feishu_listener,
            self.ops_listener,
        )

    async def stop(self) -> None:
        self.readiness.ready = False
        for stack in self.apps:
            await stack.quiesce()
        await asyncio.gather(*(stack.drain(self.drain_seconds) for stack in self.apps))
        self.projection.close()
        await self.feishu_listener.stop()
        await self.ops_listener.stop()
        for stack in self.apps:
            await stack.close()


_DEAD_CONNECTION = frozenset({ConnectionState.FAILED, ConnectionState.STOPPED})


def call_budget(
    section: BudgetSection, clock: Clock, tuning: Tuning, before: Spent | None = None
) -> CallBudget:
    """The app's Feishu call budget, paced at the limits' margin on `clock` (the
    simulator passes its own clock, so the pacing runs on its virtual time), starting with
    what its predecessor spent (`before`: none, a first start)."""
    policy = BudgetPolicy.of(tuning.limits(section))
    return CallBudget(policy, now=clock.now, call_at=clock.call_at, before=before)


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
    app_id, app_secret = section.feishu_app_id, secret(section.feishu_app_secret)
    return _client(
        app_id, app_secret, section.feishu_domain, clock, translator, budget, http, retry
    )


def build_service(
    settings: Settings,
    *,
    feishu: FeishuApi | None = None,
    runtime: AgentRuntime | None = None,
    clock: Clock | None = None,
    runtime_env: dict[str, str] | None = None,
    tuning: Tuning | None = None,
    apps: Apps | None = None,
) -> BridgeService:
    """Everything the service runs, built from `settings` and the `apps` it serves (default:
    the one app of the environment settings); in websocket mode on the running event loop,
    which the long connections hand their events to. `tuning`: what tests, benches and the
    demo set that the operator does not; `feishu`, `runtime`: the first app's, made by a
    test or the demo."""
    clock, tuning = clock or LoopClock(), tuning or Tuning()
    wall = clock.wall  # leases, snapshots and uptime: times other processes read too
    apps = apps or apps_from_settings(settings)
    single = list(apps.apps) == [DEFAULT]  # the environment's: its settings are named
    problems = exposure_problems(settings) if single else ops_exposure_problems(settings)
    problems += [p for app in apps.apps.values() for p in _app_exposure(app)]
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
    projection = Projection(new_id(), wall, instance_id=settings.cluster.bridge_instance_id)
    readiness = Readiness(wall)
    metrics = MetricsRegistry(projection, first_app=next(iter(apps.apps)))
    parts = _Shared(settings, tuning, clock, projection, readiness, runtime_env, metrics)
    stacks: list[AppStack] = []
    for number, app in enumerate(apps.apps.values()):
        given = (feishu, runtime) if number == 0 else (None, None)
        stacks.append(parts.stack(app, apps, number == 0, *given))
    for stack in stacks:  # the bots that share its groups, by the names they go by
        stack.bot.siblings = [other.bot for other in stacks if other is not stack]
    feishu_app = web.Application()
    for app, stack in zip(apps.apps.values(), stacks, strict=True):
        if app.intake == "webhook":
            feishu_app.add_routes(_webhook(app, stack))
        else:
            stack.longconn = _longconn(app, stack)
            readiness.longconns.append(stack.longconn)
    feishu_app.add_routes(health_routes(readiness.healthy))
    first = stacks[0]
    status = partial(
        _status,
        settings,
        readiness,
        stacks,
        runtime=first.runtime,
        projection=projection,
        clock=wall,
    )
    ops_app = web.Application(middlewares=ops_middlewares(secret(settings.ops.bridge_ops_token)))
    ops_app.add_routes(
        ops_routes(
            projection,
            ready=readiness.healthy,
            status=status,
            turn_view=partial(
                app_turn_view, [_turns(stack, n == 0) for n, stack in enumerate(stacks)]
            ),
            metrics=metrics,
            sessions=AppSessions([stack.sessions for stack in stacks]),
        )
    )
    owners = {  # the app a forward names: none for the first, as the Forwarders say
        None if stack is first else stack.name: stack.ownership
        for stack in stacks
        if stack.ownership is not None
    }
    if owners:
        ops_app.add_routes(cluster_routes(partial(_take_forwarded, owners)))
    ops = settings.ops
    return BridgeService(
        settings=settings,
        apps=stacks,
        projection=projection,
        metrics=metrics,
        clock=wall,
        readiness=readiness,
        feishu_listener=Listener(
            "feishu", feishu_app, settings.feishu.bridge_host, settings.feishu.bridge_port
        ),
        ops_listener=Listener("ops", ops_app, ops.bridge_ops_host, ops.bridge_ops_port),
    )


@dataclass
class _Shared:
    """What every app's stack is built with, and how one is built."""

    settings: Settings
    tuning: Tuning
    clock: Clock
    projection: Projection
    readiness: Readiness
    runtime_env: dict[str, str] | None
    metrics: MetricsRegistry

    def stack(
        self,
        app: App,
        apps: Apps,
        first: bool,
        feishu: FeishuApi | None,
        runtime: AgentRuntime | None,
    ) -> AppStack:
        settings, clock, tuning, projection = (
            self.settings,
            self.clock,
            self.tuning,
            self.projection,
        )
        wall = clock.wall
        projects, settings_of = app_projects(settings, apps, app)
        presence, agent = settings.presence, settings_of[app.default_project].agent
        translator = Translator(presence.bridge_locale)
        own = None if first else app.name  # the first app's keys where one app's always were
        store = store_for(settings, own)
        data = settings.store.bridge_data_dir if first else app_folder(settings, app.name)
        spending = BudgetRecord(data / BUDGET_RECORD, clock)
        budget = call_budget(settings.budget, clock, tuning, spending.load())
        if feishu is None:
            feishu = app_client(app, clock, translator, budget)
        elif isinstance(feishu, FeishuClient):
            feishu.pace(budget)  # a client made by a test or the demo, paced as the product's
        routes = projects.first
        watch = ProcessWatch(projection, routes.agents[0][0], routes.workspaces[0][0], app.name)
        if runtime is None:
            options = {"env": self.runtime_env, "on_change": watch.changed}
            own_settings = settings_of[app.default_project]
            runtime = acp_routed(own_settings, projects, clock, options, settings_of)
        watch.runtime = runtime
        metrics = self.metrics.for_app(app.name)  # every series labelled with the app
        metrics.watch_budget(budget.state)
        metrics.watch_runtime(runtime.snapshot)
        # Every snapshot names its app; another app's conversation keys may be the first's:
        # prefixed with its name.
        prefix = "" if own is None else f"{own}/"
        publish = partial(_publish_as, projection.publish, app.name, prefix)
        ended = partial(_ended_as, projection.session_ended, prefix)
        access = app.access
        engine = Engine(
            feishu=feishu,
            runtime=runtime,
            store=store,
            translator=translator,
            config=EngineConfig(
                timings=tuning.timings(presence),
                options=Options(
                    received_text=presence.bridge_received_text,
                    approvers=frozenset(access.approvers),
                    requester_may_approve=access.requester_may_approve,
                    presence_style=PresenceStyle(presence.bridge_presence_style),
                    usage_footer=presence.bridge_usage_footer,
                    state_reactions=presence.bridge_state_reactions,
                    urgency=Urgency.APP if presence.bridge_urgent else Urgency.OFF,
                ),
                routes=projects,
                attachments_dir=data / "inbox",
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
                app=app.name,
            ),
            clock=clock,
            publish=publish,
            metrics=metrics,
            session_ended=ended,
            budget=budget,
        )
        bot = BotIdentity()
        ownership = ownership_for(settings, store, engine, wall, own)
        receiver = Receiver(
            store=store,
            sink=engine.intake if ownership is None else ownership,
            policy=AccessPolicy(
                frozenset(access.allowed_users),
                frozenset(access.allowed_chats),
                allow_all=access.allow_all,
            ),
            bot=bot,
            clock=wall,
            fates=metrics.inbound,
            app_id=app.app_id,
            max_event_age=settings.feishu.bridge_max_event_age_seconds,
            quoted_content=feishu.message_content,
            voice_kind=engine.voice_mode.kind,
            bot_menu=settings.feishu.bridge_bot_menu,
        )
        return AppStack(
            name=app.name,
            feishu=feishu,
            runtime=runtime,
            store=store,
            engine=engine,
            receiver=receiver,
            sessions=SessionDirectory(
                store, engine, projection, routes, wall, app=app.name, prefix=prefix
            ),
            housekeeping=Housekeeping(
                store,
                wall,
                instance_id=projection.instance_id,
                epoch=projection.epoch,
                ops_url="",  # known once the operator listener has its port (start)
                facts=partial(_facts, engine),
                beat_every=settings.cluster.bridge_lease_seconds / 3,
                record_spending=lambda: spending.save(budget.spent()),
            ),
            bot=bot,
            ownership=ownership,
            spending=lambda: spending.save(budget.spent(), closed=True),
            secrets=tuple(
                secret(value) for value in (app.app_secret, app.encrypt_key, app.verification_token)
            ),
        )


Publish = Callable[[str, Mapping[str, Any]], dict[str, Any] | None]
SessionEnded = Callable[[str, str, str, str], dict[str, Any]]


def _app_exposure(app: App) -> list[ConfigProblem]:
    """An app of the file that would let anyone drive its agent, or approve nothing."""
    if app.name == DEFAULT:
        return []  # the environment's: `exposure_problems` names its settings
    access, found = app.access, []
    if not access.allowed_users and not access.allowed_chats and not access.allow_all:
        found.append(ConfigProblem(f"apps.{app.name}.allowed_users", "nobody_allowed"))
    if not access.requester_may_approve and not access.approvers:
        found.append(ConfigProblem(f"apps.{app.name}.approvers", "no_approvers"))
    return found


def _publish_as(
    publish: Publish, app: str, prefix: str, key: str, snapshot: Mapping[str, Any]
) -> dict[str, Any] | None:
    return publish(f"{prefix}{key}", {**snapshot, "app": app})


def _ended_as(
    ended: SessionEnded, prefix: str, kind: str, key: str, session_id: str, reason: str
) -> dict[str, Any]:
    return ended(kind, f"{prefix}{key}", session_id, reason)


def app_projects(settings: Settings, apps: Apps, app: App) -> tuple[Projects, dict[str, Settings]]:
    """The projects a chat of `app` may work on (its default first; one project: unnamed,
    as the environment settings' always was), and each project's settings."""
    names = [app.default_project, *(n for n in apps.projects if n != app.default_project)]
    own = {name: project_settings(settings, apps.projects[name]) for name in names}

    def routes(name: str) -> Routes:
        agent, project = own[name].agent, apps.projects[name]
        found = Routes.of(agent.agent_profiles, agent.workspace_roots)
        defaults = ((MODE_CHOICE, project.mode), (CONFIG_CHOICE + "model", project.model))
        return replace(found, defaults=tuple((k, v) for k, v in defaults if v))

    if len(names) == 1:
        return Projects.single(routes(names[0])), {"": own[names[0]], **own}
    routed = {(r.chat, r.thread): r.project for r in apps.routes if r.app == app.name}
    return Projects(tuple((name, routes(name)) for name in names), routed), own


def project_settings(settings: Settings, project: Project) -> Settings:
    """`settings` with the agent settings of `project` (the same values for the one project
    of the environment settings)."""
    agent = settings.agent.model_copy(
        update={f"bridge_{key}": getattr(project, key) for key in PROJECT_SETTINGS}
    )
    return settings.model_copy(update={"agent": agent})


def app_client(app: App, clock: Clock, translator: Translator, budget: CallBudget) -> FeishuClient:
    """An app's outbound Feishu stack (`feishu_client`, for an app of several)."""
    return _client(
        app.app_id, secret(app.app_secret), app.domain, clock, translator, budget, name=app.name
    )


def _client(
    app_id: str | None,
    app_secret: str | None,
    domain: str,
    clock: Clock,
    translator: Translator,
    budget: CallBudget,
    http: httpx.AsyncClient | None = None,
    retry: RetryPolicy | None = None,
    name: str = "",
) -> FeishuClient:
    return FeishuClient(
        app_id or "",
        app_secret or "",
        domain,
        clock=clock.now,
        cut_notice=lambda kept, total: translator("reply.cut", kept=kept, total=total),
        budget=budget,
        http=http,
        retry=retry,
        app=name,
    )


def _turns(stack: AppStack, first: bool) -> tuple[str, str, TurnView]:
    """An app's turn view for `/turns/{id}`, with the prefix of its conversation keys."""
    view = partial(turn_view, stack.store, pending=stack.engine.executor.traces.pending)
    return stack.name, "" if first else f"{stack.name}/", view


def _webhook(app: App, stack: AppStack) -> list[web.RouteDef]:
    """An app's event request URL (webhook mode), verified and decrypted with its keys."""
    return webhook.webhook_routes(
        stack.receiver,
        encrypt_key=secret(app.encrypt_key),
        verification_token=secret(app.verification_token),
        bot=stack.bot,
        path=app.webhook_path,
    )


def _longconn(app: App, stack: AppStack) -> LongConnection:
    """An app's own long connection (websocket mode)."""
    return LongConnection(
        app.app_id or "",
        secret(app.app_secret) or "",
        app.domain,
        stack.receiver,
        asyncio.get_running_loop(),
        bot=stack.bot,
    )


async def _take_forwarded(
    owners: Mapping[str | None, Ownership], body: dict[str, Any]
) -> dict[str, Any] | None:
    """Another instance's forward, to the app it names: a click or a recall of one app's
    conversation never reaches another's (which may have the same key); None: not held."""
    app = body.get("app")
    owner = owners.get(app if isinstance(app, str) else None)
    return None if owner is None else await owner.take_forwarded(body)


def _facts(engine: Engine) -> dict[str, Any]:
    """What this instance's heartbeat tells the others (counts, never any text)."""
    actors = list(engine.conversations.values())
    running = sum(1 for actor in actors if actor.conv.turn is not None)
    return {"conversations": len(actors), "running": running}


def _status(
    settings: Settings,
    readiness: Readiness,
    stacks: list[AppStack],
    *,
    runtime: AgentRuntime,
    projection: Projection,
    clock: Callable[[], float],
) -> dict[str, Any]:
    """`GET /status`: the process (the conversations' snapshots are added by the route). The
    first app's figures at the top, as a single app's were; each app's under `apps` (the one
    app's too), with its `problem`, so an operator sees which one is unhealthy and why."""
    now = clock()
    apps = {stack.name: _app_status(stack, now) for stack in stacks}
    first = {key: value for key, value in apps[stacks[0].name].items() if key != "healthy"}
    status = {
        "mode": settings.feishu.feishu_event_mode,
        "ready": readiness.ready,
        "uptime_seconds": round(now - readiness.started_at, 3),
        **first,
        "event_subscribers": projection.subscribers(),
        "runtime": runtime.snapshot(),
        # Each app's health, the one app's too: which one is unhealthy, and why.
        "apps": apps,
    }
    return status


def _app_status(stack: AppStack, now: float) -> dict[str, Any]:
    engine, longconn = stack.engine, stack.longconn
    facts = AppFacts(
        started=stack.started,
        bot_open_id=stack.bot.open_id,
        identity_error=stack.identity_error,
        long_connection=longconn.state.name.lower() if longconn else None,
        long_connection_error=(
            without_secrets(longconn.error, stack.secrets) if longconn and longconn.error else None
        ),
        gate=engine.gate.state(),
        budget=engine.budget.state() if engine.budget else None,
    )
    return {
        **health(facts, now=now),
        "bot_open_id": facts.bot_open_id,
        "bot_name": stack.bot.name,
        "long_connection": facts.long_connection,
        "conversations": len(engine.conversations),
        "feishu_api": {**facts.gate, "down_since": _down_since(facts.gate, now)},
        "voice": engine.voice_mode.state(),
        "urgent": engine.urgent_mode.state(),
        "feishu_budget": facts.budget,
    }


def _down_since(gate: Mapping[str, float], now: float) -> float | None:
    """When the app's Feishu API was taken to be down (the wall clock), None while up."""
    return round(now - gate["down_seconds"], 3) if gate.get("down") else None
