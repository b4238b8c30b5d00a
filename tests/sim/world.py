"""One simulated run: the real engine (intake, actors, core, executor, turn runner, timers,
status cards, schedules) and the real Feishu client under it (its token, retries, breaker
and call budget, composed as the service composes them), on the in-memory store, in a
virtual-time loop, with Feishu (at the HTTP transport), the agent, the users and the clock's
wake-ups all drawn from one seeded `random.Random`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC
from typing import Any

from bridge.cluster.wake import LocalWake
from bridge.config import Tuning
from bridge.config.budget import BudgetSection
from bridge.config.feishu import FeishuSection
from bridge.core import Options, Timings
from bridge.core.delivery import Lane
from bridge.core.effects import ShowStatusCard
from bridge.core.state import PresenceStyle
from bridge.engine.actor import ConversationActor, terms_of
from bridge.engine.engine import Engine, EngineConfig
from bridge.feishu.budget import CallBudget, Spent, Waiter
from bridge.feishu.delivery import BreakerState, CircuitBreaker
from bridge.feishu.events import BotIdentity, CardAction, CardActionReply, InboundMessage
from bridge.feishu.http import FeishuHttp
from bridge.feishu.retry import RetryPolicy
from bridge.feishu.webhook import DEFAULT_DEADLINE
from bridge.i18n import Translator
from bridge.receiver import AccessPolicy, Receiver
from bridge.schedules.scheduler import ScheduleSettings
from bridge.service import call_budget, feishu_client
from bridge.store import MemoryStore
from bridge.store.port import Store, StoreUnavailable

from .acp_agent import SimAgents, WatchedRuntime, draw_temper
from .agent import Plan, draw_plan
from .cluster import (
    Cluster,
    ClusterPlan,
    DownWake,
    Member,
    MemberReceiver,
    draw_cluster,
    member,
    track_tasks,
)
from .loop import SimClock, SimLoop, WorldAtRest
from .store import DbOutage, DownStore, draw_db_outage
from .transport import DOMAIN, FaultPlan, Limits, Post, SimTransport, buttons

T = Translator("zh_CN")
TUNING = Tuning()
TIMINGS = Timings(
    first_hint=0.6,
    heartbeat=1.2,
    stale=30.0,
    approval_timeout=60.0,
    finish_grace=0.5,
    progress_interval=1.0,
    cancel_notice=3.0,
    cancel_limit=8.0,
)
CARD_INTERVAL = 0.5
# Virtual seconds the bridge has, after what the world holds it to (the last user action,
# Feishu's return, each approval answered at the last moment), to do everything it owes.
HORIZON = 300.0
# Feishu's redelivery of an event the bridge did not take (a 5xx, or no answer within the
# webhook's deadline): 15 s after, then 5 min, 1 h, 6 h (bridge/devtools/emulator).
LADDER = (15.0, 300.0, 3600.0, 21600.0)
# The app as the service reads it: Feishu's own limits, the product's margin (explicit values:
# the environment does not change the world).
APP = FeishuSection(
    feishu_app_id="cli_sim", feishu_app_secret="sim", feishu_domain=DOMAIN, _env_file=None
)
BUDGET = BudgetSection(
    bridge_feishu_app_calls_per_second=50.0,
    bridge_feishu_total_calls_per_second=0.0,
    _env_file=None,
)


@dataclass(frozen=True)
class Crowd:
    """A world where the call budget's pacing matters: many chats at once, each with a live
    status card and a long streaming turn, their first messages in one burst, on an app
    with a small share of Feishu's limits (each API's second, and a minute of a few dozen
    calls: the bridge paces itself to those, and Feishu meters it at them)."""

    chats: int
    calls_per_second: float  # each API's (BRIDGE_FEISHU_APP_CALLS_PER_SECOND)
    per_minute: int  # each API's, sends' too

    @property
    def budget(self) -> BudgetSection:
        return BudgetSection(
            bridge_feishu_app_calls_per_second=self.calls_per_second,
            bridge_feishu_total_calls_per_second=0.0,
            _env_file=None,
        )

    @property
    def tuning(self) -> Tuning:
        return replace(TUNING, feishu_sends_per_minute=float(self.per_minute))

    @property
    def limits(self) -> Limits:
        return Limits(per_second=round(self.calls_per_second), per_minute=self.per_minute)


def crowd_of(seed: int) -> Crowd | None:
    """Whether the seed's world is a crowd, and how big (a stream of its own)."""
    draw = random.Random(f"crowd:{seed}")
    if draw.random() >= 0.1:
        return None
    # The minute is what binds (each API's pace half a call to a call a second); each API's
    # second at 10 leaves a call of room over the budget's 8 and its one token's burst, for
    # a call that goes with a token taken before it waited (a card's change, for its card or
    # out an outage), as Feishu's 50 leaves room for a few.
    return Crowd(
        chats=draw.randint(5, 8), calls_per_second=10.0, per_minute=draw.choice((40, 60, 80))
    )


@dataclass(frozen=True)
class Wait:
    """A call's wait for its turn in the call budget: from its offer to its grant (or to
    its withdrawal: moot, cancelled, or still waiting when the run ended)."""

    lane: Lane
    api: str
    chat: str | None
    send: bool
    since: float
    until: float
    granted: bool


@dataclass(frozen=True)
class Asked:
    """A live card asked to show a newer view (a `ShowStatusCard` of a card already up)."""

    at: float
    card: str  # its CardKit id
    chat: str
    final: bool
    # A status card whose page of the answer closed (the answer goes on below it): its
    # changes are spaced twice as far (bridge/engine/status_cards.py `_spacing`).
    quiet: bool = False


@dataclass(frozen=True)
class Sent:
    """A message a user sent: when, where, and what the agent will do with it."""

    at: float
    chat: str
    message_id: str
    text: str
    plan: Plan | None  # None for a command


@dataclass(frozen=True)
class Click:
    """A person's click on an approval card: when, on which card, by whom, what."""

    at: float
    reply_to: str  # the user message the card answers
    card: str  # the card's message id
    operator: str
    choice: str
    toast: str


@dataclass
class Run:
    seed: int
    style: PresenceStyle
    sent: list[Sent]
    posts: list[Post]
    runtime: SimAgents  # the agents behind the real ACP runtime: what they were asked
    timings: Timings = TIMINGS
    card_interval: float = CARD_INTERVAL
    faults: FaultPlan = field(default_factory=FaultPlan)
    clicks: list[Click] = field(default_factory=list)
    restarted_at: float | None = None  # the bridge was killed and started again then
    gate_down: list[tuple[float, float]] = field(default_factory=list)  # bridge knew it down
    # Reactions paused by the client's breaker (Feishu's 429 asked it to wait): from..until.
    reactions_paused: list[tuple[float, float]] = field(default_factory=list)
    recalled: dict[str, float] = field(default_factory=dict)  # message id -> taken back at
    stuck: list[str] = field(default_factory=list)  # conversations never back to idle
    leaked: list[int] = field(default_factory=list)  # agent pids alive, no pool's own
    card_answers: dict[str, str] = field(default_factory=dict)  # card id -> its answer at the end
    crowd: Crowd | None = None
    # Every bridge process's call budget (one per process), and the waits for a turn in it.
    budgets: list[CallBudget] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    asked: list[Asked] = field(default_factory=list)
    db_outage: DbOutage | None = None  # the database away from..until (world seconds)
    taken: dict[str, float] = field(default_factory=dict)  # message id -> first taken at, in order
    cluster: ClusterPlan | None = None  # several bridge processes on one database
    restart_until: float | None = None  # a cluster's takeover after a kill: done by then


def run_seed(
    seed: int,
    *,
    jitter: bool = True,
    storms: bool = True,
    crowds: bool = True,
    databases: bool = True,
    clusters: bool = True,
) -> Run:
    # Thousands of runs: the transcript says what matters. Restored after: the switch is
    # process-wide, and the tests that follow read their logs.
    was = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    loop = SimLoop()
    try:
        world = _world(seed, loop, jitter, storms, crowds, databases, clusters)
        return loop.run_until_complete(world)
    finally:
        _wind_down(loop)
        logging.disable(was)


def _wind_down(loop: SimLoop) -> None:
    """Cancel what is left (a killed process's stragglers, timers' tasks) and let it finish,
    so nothing is destroyed pending when the loop closes."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()

    async def finished() -> None:
        await asyncio.gather(*pending, return_exceptions=True)

    with contextlib.suppress(WorldAtRest):
        loop.run_until_complete(finished())
    loop.close()


def _every(seed: int, chat: str) -> float | None:
    """Whether the chat asks for a scheduled prompt, and how often (its own stream)."""
    draw = random.Random(f"every:{seed}:{chat}")
    return draw.choice((2.0, 3.0, 7.0)) if draw.random() < 0.25 else None


@dataclass
class Bridge:
    """The bridge process of the world; a restart replaces its engine (the store stays).
    It is also the real `Receiver`'s sink: whichever engine runs now takes what comes."""

    engine: Engine
    restarted_at: float | None = None

    def accept(self, message: InboundMessage) -> None:
        self.engine.accept(message)

    def refuse(self, message: InboundMessage) -> None:
        self.engine.refuse(message)

    async def card_action(self, action: CardAction) -> CardActionReply:
        return await self.engine.card_action(action)

    def recall(self, conversation_key: str, message_id: str) -> None:
        self.engine.recall(conversation_key, message_id)


async def _world(
    seed: int,
    loop: SimLoop,
    jitter: bool,
    storms: bool,
    crowds: bool,
    databases: bool,
    clusters: bool,
) -> Run:
    rng = random.Random(seed)
    clock = SimClock(loop, random.Random(rng.random()), jitter=jitter)
    style = rng.choice((PresenceStyle.MESSAGES, PresenceStyle.CARD))
    # (Drawn from a stream of its own: the worlds drawn before crowds were stay as they were.)
    crowd = crowd_of(seed) if crowds else None
    if crowd is not None:
        style = PresenceStyle.CARD
    section = BUDGET if crowd is None else crowd.budget
    faults = FaultPlan(slow=rng.choice((0.0, 0.05, 0.2)))
    if crowd is not None:
        faults.slow = 0.5  # a crowd's Feishu is busy too: half its calls take seconds
    # Drawn from a stream of their own, so a calm world keeps the draws it always had (the
    # seeds that found bugs before storms existed still replay the same world).
    storm = random.Random(f"storm:{seed}")
    if storms and storm.random() < 0.4:  # Feishu goes away for a while: seconds, or minutes
        start = storm.uniform(0.0, 40.0)
        faults.outage = (start, start + storm.choice((1.0, 5.0, 30.0, 60.0, 120.0)))
    client = random.Random(f"client:{seed}")  # the client's jitter, the token's life
    busy = random.Random(f"busy:{seed}")
    if busy.random() < 0.5:  # a loaded machine: the loop's own timers fire late too
        loop.busy = busy
    token_seconds = client.choice((7200, 7200, 7200, 40))  # 40: refreshed every 20 s
    feishu = SimTransport(
        random.Random(rng.random()),
        clock.now,
        faults,
        token_seconds=token_seconds,
        limits=None if crowd is None else crowd.limits,
    )
    https: list[FeishuHttp] = []
    paused: list[tuple[float, float]] = []
    plans: dict[str, Plan] = {}
    # The real ACP runtime, a new one per bridge process, on in-memory agent processes
    # (their temper from a stream of their own).
    temper = draw_temper(random.Random(f"agent:{seed}"))
    agents = SimAgents(random.Random(rng.random()), clock.now, plans, temper)
    runtimes: list[WatchedRuntime] = []
    memory = MemoryStore()
    await memory.open()
    # The database goes away for a while (a stream of its own: see draw_db_outage).
    db = draw_db_outage(seed) if storms and databases else None
    # Two bridge processes on the database (a stream of its own), which may go away for
    # longer than their leases: that outage is the cluster's own draw.
    cluster = draw_cluster(seed) if clusters and crowd is None else None
    if cluster is not None:
        db = cluster.outage if storms and databases else None
    # A cluster's database calls take a little time (a server over a socket).
    latency = None if cluster is None else random.Random(f"db-latency:{seed}")
    after = 0 if cluster is None else cluster.after_journals
    down = None if db is None else DownStore(memory, loop.time, db, latency, after)
    store: Store = memory if down is None else down  # type: ignore[assignment]
    engine_rng = random.Random(storm.random())
    restart = storm.uniform(0.0, 60.0) if storms and storm.random() < 0.3 else None
    if db is not None or cluster is not None:
        # Not both yet: a process started while its database is away exits, and when its
        # supervisor starts the next one is a model of its own (seed 449 with the next
        # started once the database is back: a cut turn's heartbeats after its end line).
        restart = None
    budgets: list[CallBudget] = []
    waits: list[Wait] = []
    still: dict[int, Waiter] = {}  # the calls waiting for their turn now, in every budget
    asked: list[Asked] = []

    def build() -> Engine:
        """A bridge process: its own client, token and call budget, and its own ACP runtime
        (its pool of agent processes); Feishu and the agents' world are the world's."""
        http = FeishuHttp(base_url=DOMAIN, transport=feishu)
        https.append(http)
        tuning = TUNING if crowd is None else crowd.tuning
        budget = call_budget(section, clock, tuning, _recorded(budgets, clock.now()))
        budgets.append(budget)
        _record_waits(budget, clock, still, waits)
        retry = RetryPolicy(rng=random.Random(client.random()))
        api = feishu_client(APP, clock, T, budget, http=http, retry=retry)
        _paused(api.breaker, clock, paused)
        runtimes.append(WatchedRuntime(agents, clock, agents.new_id))
        engine = Engine(
            feishu=api,
            runtime=runtimes[-1],
            store=store,
            translator=T,
            config=EngineConfig(
                timings=TIMINGS,
                options=Options(presence_style=style, state_reactions=True),
                ack_emoji="OnIt",
                max_running_turns=8,
                card_interval=CARD_INTERVAL,
                schedules=ScheduleSettings(min_interval=1.0, zone=UTC),
            ),
            clock=clock,
            publish=lambda key, snapshot: None,
            rng=engine_rng,
            budget=budget,
        )
        _record_views(engine, clock, asked)
        return engine

    gate_log: list[tuple[float, bool]] = []
    bridge: Bridge | Cluster
    wake: Any = None
    if cluster is None:
        bridge = Bridge(_watched(build(), clock, gate_log))
        await bridge.engine.start_schedules()
        sinks: list[Any] = [bridge]
    else:
        # The wake-ups are PostgreSQL's: lost while it is away, a RESCAN once it is back.
        wake: Any = LocalWake() if down is None else DownWake(down, loop.time)
        members: dict[str, Member] = {}

        def process(name: str) -> Member:
            engine = _watched(build(), clock, gate_log)
            made = member(name, engine, store, wake, clock, cluster.lease, peer)
            made.runtime = runtimes[-1]
            return made

        def peer(name: str) -> Member:
            return next(m for m in bridge.members if m.name == name)  # type: ignore[union-attr]

        for name in ("a", "b")[: cluster.members]:
            members[name] = process(name)
        tracked = track_tasks(loop)
        bridge = Cluster(list(members.values()), random.Random(f"spread:{seed}"), tracked)
        await bridge.start(store, clock, cluster.lease)
        sinks = [m.ownership for m in members.values()]
    sent: list[Sent] = []
    clicks: list[Click] = []
    clicking = random.Random(f"clicks:{seed}")
    tasks: set[asyncio.Future[None]] = set()
    feishu.on_card = lambda post: tasks.add(
        # The world's, whichever process posted the card (a fresh context: no member's).
        loop.create_task(
            _click(clicking, post, bridge, sent, clock, clicks), context=contextvars.Context()
        )
    )
    chats = [f"oc_{n}" for n in range(rng.randint(1, 3) if crowd is None else crowd.chats)]
    every = {c: _every(seed, c) if storms else None for c in chats}
    recalls: dict[str, float] = {}
    extra: list[asyncio.Future[None]] = []

    def receiver(sink: Any) -> Receiver:
        return Receiver(  # the real one: its de-duplication meets redeliveries
            store=store,
            sink=sink,
            policy=AccessPolicy(allow_all=True),
            bot=BotIdentity("ou_bot"),
            clock=clock.now,
        )

    receivers: list[Any] = [receiver(sink) for sink in sinks]
    dying = cluster is not None and cluster.death is not None
    fronts: list[MemberReceiver] = []
    if isinstance(bridge, Cluster):
        fronts = [MemberReceiver(m, r) for m, r in zip(bridge.members, receivers, strict=True)]
        receivers = list(fronts)
    feishu_pushes = Pushes(
        receivers,
        clock,
        extra,
        webhook=db is not None or dying,
        spread=random.Random(f"push:{seed}"),
    )
    users = [
        _user(
            random.Random(rng.random()),
            c,
            feishu_pushes,
            bridge,
            clock,
            plans,
            sent,
            feishu,
            every[c],
            random.Random(f"mishaps:{seed}:{c}") if storms else None,
            recalls,
            extra,
            crowd is not None,
        )
        for c in chats
    ]
    world: list[asyncio.Future[None]] = [asyncio.ensure_future(u) for u in users]
    if isinstance(wake, DownWake):
        tasks.add(loop.create_task(wake.rescans(), context=contextvars.Context()))
    if isinstance(bridge, Cluster) and cluster is not None and cluster.death is not None:

        def respawn() -> tuple[Member, Receiver]:
            again = process("b")
            return again, receiver(again.ownership)

        kill = bridge.kill(
            "b",
            cluster.death,
            clock,
            agents,
            cluster.lease,
            respawn,
            cluster.back_after,
            store,
            fronts,
        )
        world.append(asyncio.ensure_future(kill))
    if restart is not None and isinstance(bridge, Bridge):
        main = asyncio.current_task()
        people = lambda: {main, *world, *tasks, *extra}  # noqa: E731 - what a kill spares
        killer = _restart(
            restart,
            bridge,
            lambda: _watched(build(), clock, gate_log),
            agents,
            clock,
            people,
        )
        world.append(asyncio.ensure_future(killer))
    try:
        await asyncio.gather(*world)
        seen = 0
        while seen < len(extra):  # a redelivery may ask for another
            seen = len(extra)
            await asyncio.gather(*extra)
        await asyncio.sleep(_horizon(loop.time(), faults.outage, sent))
    except WorldAtRest:
        pass
    run = Run(seed, style, sent, feishu.posts, agents, faults=faults, clicks=clicks, crowd=crowd)
    run.budgets = budgets
    waits.extend(_wait(w, clock.now(), granted=False) for w in still.values())
    run.waits = waits
    run.asked = asked
    run.db_outage = None if down is None else down.outage
    run.taken = feishu_pushes.taken
    run.restarted_at = bridge.restarted_at
    run.recalled = recalls
    run.gate_down = _intervals(gate_log, clock.now())
    run.reactions_paused = paused
    run.card_answers = feishu.answers()
    for task in tasks:
        task.cancel()
    engines = [bridge.engine] if isinstance(bridge, Bridge) else bridge.engines
    if isinstance(bridge, Cluster):
        run.restart_until = bridge.restart_until
    run.stuck = [
        key
        for engine in engines
        for key, actor in engine.conversations.items()
        if actor.conv.turn is not None or actor.conv.queue
    ]
    if isinstance(bridge, Cluster):  # built in the members' order; a killed one owns none
        live = [m.runtime for m in bridge.members if not m.dead]
    else:
        live = runtimes[-1:]  # a restart's predecessor owns nothing any more
    owned = {pid for runtime in live for pid in runtime.owns()}
    run.leaked = [p.pid for p in agents.processes if p.returncode is None and p.pid not in owned]
    run.cluster = cluster
    if isinstance(bridge, Cluster):
        await bridge.stop()
    for engine in engines:
        await engine.drain(0.0)
    for http in https:
        await http.aclose()
    return run


def _horizon(now: float, outage: tuple[float, float] | None, sent: list[Sent]) -> float:
    """How long the world runs on once its users are done: `HORIZON` after what the world
    itself holds the bridge to. Feishu's return: nothing owed goes while it is away (a
    crowd's two minutes of outage left its chats' turns and their queues to be caught up
    after it, paced). And a person's answer to each approval a chat's turns ask for, which
    may come only as its timeout ends (or never): a chat's turns run one after another, so
    its approvals add up, and the chat with the most holds the world longest."""
    back = max(0.0, outage[1] - now) if outage is not None else 0.0
    asks = Counter(
        s.chat
        for s in sent
        if s.plan is not None
        for step in s.plan.steps
        if step.kind == "permission"
    )
    waits = max(asks.values(), default=0) * TIMINGS.approval_timeout
    return back + waits + HORIZON


def _record_waits(
    budget: CallBudget, clock: SimClock, still: dict[int, Waiter], log: list[Wait]
) -> None:
    """Note each call's wait for its turn in `budget`, from its offer to its grant or its
    withdrawal (observation only: the scheduler's own methods, wrapped)."""
    scheduler = budget.scheduler
    offer, grant, withdraw = scheduler.offer, scheduler.grant, scheduler.withdraw

    def on_offer(waiter: Waiter, now: float) -> list[Waiter]:
        still[id(waiter)] = waiter
        return went(offer(waiter, now), now)  # (granted at once when nothing else waits)

    def on_grant(now: float) -> list[Waiter]:
        return went(grant(now), now)

    def went(granted: list[Waiter], now: float) -> list[Waiter]:
        for waiter in granted:
            if still.pop(id(waiter), None) is not None:
                log.append(_wait(waiter, now, granted=True))
        return granted

    def on_withdraw(waiter: Waiter) -> None:
        if still.pop(id(waiter), None) is not None:
            log.append(_wait(waiter, clock.now(), granted=False))
        withdraw(waiter)

    scheduler.offer = on_offer  # type: ignore[method-assign]
    scheduler.grant = on_grant  # type: ignore[method-assign]
    scheduler.withdraw = on_withdraw  # type: ignore[method-assign]


def _record_views(engine: Engine, clock: SimClock, log: list[Asked]) -> None:
    """Note each view a live card is asked to show (observation only: the executor's
    handler of `ShowStatusCard`, wrapped)."""
    executor = engine.executor
    handler = executor._handlers[ShowStatusCard]
    cards, quiet = executor._status_cards._cards, executor._status_cards._quiet

    async def show(actor: ConversationActor, work: ShowStatusCard) -> None:
        at, card = clock.now(), cards.get(work.card_key)
        if card is not None and card.card_id is not None:
            closed = work.view.closed or work.card_key in quiet
            chat = terms_of(actor, work).chat
            log.append(Asked(at, card.card_id, chat, work.final, closed))
        await handler.run(actor, work)

    executor._handlers[ShowStatusCard] = replace(handler, run=show)


def _wait(waiter: Waiter, until: float, *, granted: bool) -> Wait:
    return Wait(waiter.lane, waiter.api, waiter.chat, waiter.send, waiter.since, until, granted)


def _watched(engine: Engine, clock: SimClock, log: list[tuple[float, bool]]) -> Engine:
    """Note when the bridge took Feishu to be down, and up again (observation only)."""
    gate = engine.gate
    failed, up = gate._failed, gate._up

    def on_failed(*args: Any) -> None:
        failed(*args)
        log.append((clock.now(), gate.down))

    def on_up() -> None:
        up()
        log.append((clock.now(), gate.down))

    gate._failed, gate._up = on_failed, on_up  # type: ignore[method-assign]
    return engine


def _paused(breaker: CircuitBreaker, clock: SimClock, log: list[tuple[float, float]]) -> None:
    """Note when the client's breaker paused reactions, and until when: its window, and on
    past it until a call closes it (half-open, it lets one probe through at a time and skips
    the others) (observation only)."""
    opened, closed = breaker.record_rate_limited, breaker.record_ok
    mine: list[int] = []  # this breaker's windows in the log (a restart's breaker shares it)

    def on_limited(reset_after: float | None = None) -> float:
        window = opened(reset_after)
        mine.append(len(log))
        log.append((clock.now(), clock.now() + window))
        return window

    def on_ok() -> None:
        half_open = breaker.state is BreakerState.HALF_OPEN
        closed()
        if half_open and mine:
            since, until = log[mine[-1]]
            log[mine[-1]] = (since, max(until, clock.now()))

    breaker.record_rate_limited = on_limited  # type: ignore[method-assign]
    breaker.record_ok = on_ok  # type: ignore[method-assign]


def _intervals(log: list[tuple[float, bool]], end: float) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    since: float | None = None
    for at, down in log:
        if down and since is None:
            since = at
        elif not down and since is not None:
            out.append((since, at))
            since = None
    if since is not None:
        out.append((since, end))
    return out


def _recorded(budgets: list[CallBudget], now: float) -> Spent | None:
    """What the record of the bridge killed now says it spent (feishu/budget_record.py: one
    a second): its grants up to its last whole second, and the time since unseen. None
    for the first bridge (no predecessor)."""
    if not budgets:
        return None
    saved_at = math.floor(now)
    spent = budgets[-1].spent()
    kept = {api: [t for t in times if t <= saved_at] for api, times in spent.items()}
    return Spent(kept, saved_at)


async def _restart(
    at: float,
    bridge: Bridge,
    build: Callable[[], Engine],
    agents: SimAgents,
    clock: SimClock,
    people: Callable[[], set[Any]],
) -> None:
    """SIGKILL at `at`, and a new process at once: everything the old one was doing stops
    where it stood (its agent processes see their stdin end and exit); the store is what
    survives."""
    await asyncio.sleep(at)
    bridge.restarted_at = clock.now()
    old = bridge.engine
    old.schedules.close()  # its timers are the loop's, not tasks: stopped by hand
    for actor in old.conversations.values():
        actor.close()
    spared = {asyncio.current_task(), *people()}
    for task in asyncio.all_tasks():
        if task not in spared:
            task.cancel()
    agents.bridge_died()
    bridge.engine = build()
    await bridge.engine.recover(before=clock.now())
    await bridge.engine.start_schedules()


async def _user(
    rng: random.Random,
    chat: str,
    pushes: Pushes,
    bridge: Bridge | Cluster,
    clock: SimClock,
    plans: dict[str, Plan],
    sent: list[Sent],
    feishu: SimTransport,
    schedule: float | None,
    mishaps: random.Random | None,
    recalls: dict[str, float],
    extra: list[asyncio.Future[None]],
    crowd: bool,
) -> None:
    async def say(message_id: str, text: str, plan: Plan | None) -> None:
        sent.append(Sent(clock.now(), chat, message_id, text, plan))
        feishu.user_message(message_id, chat)
        await pushes.push(_message(chat, message_id, text))

    if schedule is not None:  # "/every 3s tick oc_0", taken back after the last message
        await say(f"om_{chat}_every", f"/every {schedule:g}s tick {chat}", None)
    # A crowd's chats send their first messages in one burst, a second one close behind.
    pauses = (0.0, 0.3, 1.5, 4.0, 10.0, 30.0) if not crowd else (0.0, 0.3, 1.5, 4.0)
    for n in range(rng.randint(1, 4) if not crowd else rng.randint(1, 2)):
        await asyncio.sleep(rng.choice(pauses) if not crowd or n > 0 else 0.0)
        stop = n > 0 and rng.random() < 0.2
        text = "/stop" if stop else f"task {chat}.{n}"
        plan = None if stop else draw_plan(rng, text, streams=crowd)
        if plan is not None:
            plans[text] = plan
        await say(f"om_{chat}_{n}", text, plan)
        if mishaps is not None and (fate := mishaps.random()) < 0.2:
            message_id, after = f"om_{chat}_{n}", mishaps.choice((0.05, 1.0, 4.0))
            if fate < 0.1:  # Feishu delivers it again (past the receiver's de-duplication)
                again = _again(pushes, chat, message_id, text, after)
            else:  # its sender takes it back
                again = _recall(bridge, chat, message_id, after, recalls, clock)
            extra.append(asyncio.ensure_future(again))
    if schedule is not None:
        await asyncio.sleep(rng.choice((0.5, 5.0)))
        for _ in range(600):  # a person reads the number off the confirmation, once it shows
            added = [p.text for p in feishu.posts if p.ok and p.target == f"om_{chat}_every"]
            number = next((m.group(1) for t in added if (m := _NUMBER.search(t))), None)
            if number is not None:
                await say(f"om_{chat}_unschedule", f"/unschedule {number}", None)
                return
            await asyncio.sleep(1.0)


async def _again(pushes: Pushes, chat: str, message_id: str, text: str, after: float) -> None:
    await asyncio.sleep(after)
    await pushes.push(_message(chat, message_id, text))


@dataclass
class Pushes:
    """Feishu pushing each user's message to the bridge's receiver: with `webhook`, as the
    webhook takes it (bridge/feishu/webhook.py: an answer within its deadline, else a 5xx,
    the hand-over going on), redelivered on Feishu's ladder while the bridge does not take
    it (a world whose database may refuse); else handed straight over, as always."""

    receivers: list[Receiver]  # one per bridge process; each delivery reaches one
    clock: SimClock
    extra: list[asyncio.Future[None]]
    webhook: bool
    spread: random.Random  # which process a delivery reaches (drawn only among several)
    taken: dict[str, float] = field(default_factory=dict)  # message id -> first taken at

    async def push(self, message: InboundMessage, attempt: int = 0) -> None:
        if not self.webhook:
            await self._take(message)
            return
        handover = asyncio.ensure_future(self._take(message))
        handover.add_done_callback(lambda t: t.cancelled() or t.exception())  # a late one's
        try:
            await asyncio.wait_for(asyncio.shield(handover), DEFAULT_DEADLINE)
            return
        except (TimeoutError, StoreUnavailable):  # answered 5xx: Feishu tries again later
            pass
        except asyncio.CancelledError:
            # The bridge was killed with the hand-over in it: no answer, so a redelivery.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        if attempt < len(LADDER):
            self.extra.append(asyncio.ensure_future(self._later(message, attempt)))

    async def _later(self, message: InboundMessage, attempt: int) -> None:
        await asyncio.sleep(LADDER[attempt])
        await self.push(message, attempt + 1)

    async def _take(self, message: InboundMessage) -> None:
        receivers = [r for r in self.receivers if getattr(r, "routed", True)]
        receiver = receivers[0] if len(receivers) == 1 else self.spread.choice(receivers)
        await receiver.on_message(message)
        self.taken.setdefault(message.message_id, self.clock.now())


def _message(chat: str, message_id: str, text: str) -> InboundMessage:
    return InboundMessage(
        event_id=f"ev_{message_id}",
        message_id=message_id,
        chat_id=chat,
        chat_type="p2p",
        sender_open_id=f"ou_{chat}",
        message_type="text",
        text=text,
    )


async def _recall(
    bridge: Bridge | Cluster,
    chat: str,
    message_id: str,
    after: float,
    recalls: dict[str, float],
    clock: SimClock,
) -> None:
    await asyncio.sleep(after)
    recalls[message_id] = clock.now()
    bridge.recall(chat, message_id)


_NUMBER = re.compile(r"#(\d+)")


async def _click(
    rng: random.Random,
    card: Post,
    bridge: Bridge | Cluster,
    sent: list[Sent],
    clock: SimClock,
    clicks: list[Click],
) -> None:
    """Someone answers an approval card: soon, late, never; a bystander first, sometimes."""
    chat = next((s.chat for s in sent if s.message_id == card.target), None)
    if chat is None:
        return
    await asyncio.sleep(rng.choice((0.2, 1.0, 3.0, 12.0, 45.0, 1000.0)))  # 1000: never
    values = buttons(card.card or {})
    people = [f"ou_bystander_{chat}"] if rng.random() < 0.2 else []
    for operator in [*people, f"ou_{chat}"]:
        value = rng.choice(values)
        action = CardAction(
            event_id=f"ev_click_{len(clicks)}",
            operator_open_id=operator,
            open_message_id=card.result,
            value=value,
        )
        for _ in range(6):
            try:
                reply = await bridge.card_action(action)
                break
            except StoreUnavailable:  # the callback failed: an error shown, clicked again
                await asyncio.sleep(10.0)
        else:
            return
        toast = reply.toast_text or ""
        choice = str(value.get("choice"))
        clicks.append(Click(clock.now(), card.target, card.result, operator, choice, toast))
