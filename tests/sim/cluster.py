"""Two bridge processes on one database: the world's cluster (issue 42: the cluster
database-restart test's property, in virtual time).

Each member is a whole bridge as `bridge/stores.py` composes one on PostgreSQL: its own
engine (client, call budget, ACP runtime), behind its own `Ownership` (a `LeaseKeeper` on
the shared store, the wake-ups of a `LocalWake` both share, a `Forwarder` whose peer is the
other member's `take_forwarded`), its heartbeat, and its own `Receiver`. Feishu spreads
each delivery of an event over the members (a seeded draw, as the emulator's
`spread_webhooks` does), and a click or a recall lands on a live one. The database may go
away for longer than a lease (`draw_cluster`): every lease expires while it is away, and
the product's promise is that this costs nothing (each message answered once, in order,
acked once, nobody told of a restart that never was). Or one member is killed: the other
takes its conversations over once their leases expire.

A member's work is told apart by a context variable (`MEMBER`, set in its context; every
task its code starts inherits it, and the loop's task factory notes it): its death cancels
its tasks, and only its, as a SIGKILL stops one process of two.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import random
import weakref
from collections import defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from bridge.cluster.forward import Forwarder
from bridge.cluster.leases import LeaseKeeper
from bridge.cluster.ownership import Ownership
from bridge.cluster.wake import WakeKind, Wakeup, _Fanout
from bridge.engine.engine import Engine
from bridge.feishu.events import CardAction, CardActionReply
from bridge.store.port import Store, StoreUnavailable
from bridge.stores import leased

from .loop import SimClock
from .store import DbOutage, DownStore

EPOCH = "sim"
MEMBER: contextvars.ContextVar[str | None] = contextvars.ContextVar("sim_member", default=None)
R = TypeVar("R")
# Each member's tasks, in the order they started (a weak dict keeps its order: a kill
# cancels them in it, so a seed replays).
Tasks = dict[str, "weakref.WeakKeyDictionary[asyncio.Task[Any], None]"]


@dataclass(frozen=True)
class ClusterPlan:
    """How many members, their lease, the database's outage (if any), and a death."""

    members: int
    lease: float  # seconds (BRIDGE_LEASE_SECONDS)
    outage: DbOutage | None
    after_journals: int = 0  # the outage begins as this many are journaled (0: at its start)
    death: float | None = None  # member "b" is killed then (SIGKILL: no release)
    back_after: float | None = None  # and started again this long after (its supervisor)


def draw_cluster(seed: int) -> ClusterPlan | None:
    """Whether the seed's world runs two bridge processes on one database (a stream of its
    own: the worlds drawn before clusters were stay as they were). Most such worlds lose
    the database for longer than a lease, some for less; most of the others lose a member,
    and so do a quarter of those that lose the database."""
    draw = random.Random(f"cluster:{seed}")
    if draw.random() >= 0.15:
        return None
    lease = draw.choice((2.0, 5.0))
    outage = None
    after = 0
    if draw.random() < 0.8:
        start = draw.uniform(0.0, 30.0)
        length = draw.choice((lease / 2, lease * 2.5, 15.0, 40.0))
        outage = DbOutage(start, start + length, draw.choice((0.5, 5.0)))
        if draw.random() < 0.5:  # in the middle of a message's hand-over, rather
            after = draw.randint(1, 4)
    # (A stream of its own: the cluster worlds drawn before deaths stay as they were.)
    death = None
    dying = random.Random(f"death:{seed}")
    back = None
    # A member dies in most worlds that keep their database, and in a quarter of those
    # that lose it (drawn since: the others' draws are as before).
    if dying.random() < (0.7 if outage is None else 0.25):
        death = dying.uniform(0.0, 40.0)
        if dying.random() < 0.5:
            back = dying.choice((0.5, 3.0, 10.0))
    return ClusterPlan(2, lease, outage, after, death, back)


@dataclass
class Member:
    name: str
    engine: Engine
    ownership: Ownership
    keeper: LeaseKeeper
    dead: bool = False
    routed: bool = True  # deliveries reach it (the load balancer's view)
    runtime: Any = None  # its ACP runtime (the agents it owns)
    context: contextvars.Context = field(default_factory=contextvars.Context)

    def __post_init__(self) -> None:
        self.context.run(MEMBER.set, self.name)

    def task(self, coro: Coroutine[Any, Any, R]) -> asyncio.Task[R]:
        """`coro` as this member's work (the tasks it starts inherit the mark)."""
        return asyncio.get_running_loop().create_task(coro, context=self.context.copy())

    def call(self, work: Callable[[], R]) -> R:
        return self.context.copy().run(work)


# Seconds a load balancer's health checks take to stop routing to a dead member.
HEALTH_LAG = 2.0
# Seconds a supervisor waits before starting a process that exited again (systemd's
# RestartSec=1).
RESTART_SEC = 1.0


class MemberReceiver:
    """A member's `Receiver` as Feishu's webhook reaches it: a dead one answers nothing (the
    delivery times out, and Feishu delivers it again later), until the load balancer in
    front stops routing to it (`routed`)."""

    def __init__(self, member: Member, receiver: Any) -> None:
        self._member = member
        self._receiver = receiver

    def rebind(self, member: Member, receiver: Any) -> None:
        """The process started again behind the same address."""
        self._member, self._receiver = member, receiver

    @property
    def routed(self) -> bool:
        return self._member.routed

    async def on_message(self, message: Any) -> None:
        if self._member.dead:
            raise TimeoutError("no answer: the process is gone")
        await self._member.task(self._receiver.on_message(message))


def track_tasks(loop: asyncio.AbstractEventLoop) -> Tasks:
    """Note every task's member (by the context it starts in), through the loop's factory."""
    tasks: Tasks = defaultdict(weakref.WeakKeyDictionary)

    def factory(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context)
        owner = MEMBER.get() if context is None else context.get(MEMBER)
        if owner is not None:
            tasks[owner][task] = None
        return task

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    return tasks


class Cluster:
    """The members, and the front Feishu sees: a click or a recall reaches a live one."""

    def __init__(self, members: list[Member], spread: random.Random, tasks: Tasks) -> None:
        self.members = members
        self._spread = spread
        self._tasks = tasks
        self._beats: list[asyncio.Task[None]] = []
        self.restarted_at: float | None = None  # a member's death: the others take over
        self.restart_until: float | None = None  # by when they have, at the latest

    @property
    def engines(self) -> list[Engine]:
        return [m.engine for m in self.members if not m.dead]

    def _one(self) -> Member:
        return self._spread.choice([m for m in self.members if not m.dead])

    async def card_action(self, action: CardAction) -> CardActionReply:
        member = self._one()
        return await member.task(member.ownership.card_action(action))

    def recall(self, conversation_key: str, message_id: str) -> None:
        member = self._one()
        member.call(lambda: member.ownership.recall(conversation_key, message_id))

    async def start(self, store: Store, clock: SimClock, lease: float) -> None:
        """As `feishu-bridge run` starts each: heartbeat, release what an earlier process
        held, then take over what nobody runs and keep leases alive."""
        for member in self.members:
            await _heartbeat(store, member.name, clock)
            self._beats.append(member.task(_heartbeats(store, member.name, clock, lease / 2)))
        for member in self.members:
            await member.task(member.ownership.prepare())
        for member in self.members:
            await member.task(_started(member))

    async def kill(
        self,
        name: str,
        at: float,
        clock: SimClock,
        agents: Any,
        lease: float,
        respawn: Callable[[], tuple[Member, Any]] | None = None,
        back_after: float | None = None,
        store: Any = None,
        fronts: list[MemberReceiver] | None = None,
    ) -> None:
        """SIGKILL of one member at `at`: its work stops where it stood, its agents exit, its
        leases are left to expire; the others take over within a lease and a sweep. With
        `respawn`, a new process under the same name starts `back_after` later (it
        releases what the dead one held, and takes over with the others)."""
        await asyncio.sleep(at)
        index, member = next((i, m) for i, m in enumerate(self.members) if m.name == name)
        self.restarted_at = clock.now()
        self.restart_until = self.restarted_at + lease * 1.5 + 1.0
        self._terminate(member, agents)
        lag = HEALTH_LAG if back_after is None else min(HEALTH_LAG, back_after)
        await asyncio.sleep(lag)
        member.routed = False
        if respawn is None or back_after is None or fronts is None:
            return
        await asyncio.sleep(back_after - lag)
        while True:
            again, receiver = respawn()
            self.members[index] = again
            fronts[index].rebind(again, receiver)
            await _heartbeat(store, again.name, clock)
            beats = again.task(_heartbeats(store, again.name, clock, lease / 2))
            try:
                await again.task(again.ownership.prepare())
            except StoreUnavailable:
                # Started while the database is away: the process exits (its store would not
                # open), and its supervisor starts it again a second later.
                beats.cancel()
                self._terminate(again, agents)  # and whatever it had begun goes with it
                again.routed = False
                await asyncio.sleep(RESTART_SEC)
                continue
            break
        self._beats.append(beats)
        await again.task(_started(again))

    def _terminate(self, member: Member, agents: Any) -> None:
        """The process ends at once: its work stops where it stood, its agents exit."""
        member.dead = True
        member.keeper.stop()
        member.engine.schedules.close()  # its timers are the loop's, not tasks
        for actor in member.engine.conversations.values():
            actor.close()
        for task in list(self._tasks[member.name]):
            task.cancel()
        agents.died(member.name)

    async def stop(self) -> None:
        for beat in self._beats:
            beat.cancel()
        for member in self.members:
            if not member.dead:
                await member.ownership.stop()


# Seconds PgWake's listener takes to reconnect once the database is back (its backoff).
RECONNECT = 0.5


class DownWake(_Fanout):
    """The wake-ups as `PgWake` gives them on a database that goes away: one published
    meanwhile is lost (NOTIFY is not stored), and once the database is back every listener,
    reconnected, gets one RESCAN (bridge/cluster/wake_pg.py)."""

    def __init__(self, down: DownStore, now: Callable[[], float]) -> None:
        super().__init__()
        self._down = down
        self._now = now

    async def publish(self, conversation_key: str, kind: WakeKind) -> None:
        outage = self._down.outage
        if outage is not None and outage.down(self._now()):
            return  # pg_notify failed twice: logged and dropped
        self._deliver(Wakeup(conversation_key, WakeKind(kind)))

    async def rescans(self) -> None:
        """The listeners' reconnection after the outage (once it has happened, if it
        does within two minutes)."""
        for _ in range(120):
            if self._down.outage is not None:
                break
            await asyncio.sleep(1.0)
        outage = self._down.outage
        if outage is None:
            return
        await asyncio.sleep(max(0.0, outage.end - self._now()) + RECONNECT)
        self._deliver(Wakeup("", WakeKind.RESCAN))


async def _started(member: Member) -> None:
    await member.ownership.start()
    await member.engine.start_schedules()


def member(
    name: str,
    engine: Engine,
    store: Store,
    wake: _Fanout,
    clock: SimClock,
    lease: float,
    peers: Callable[[str], Member],
) -> Member:
    """One bridge process of the cluster, composed as `bridge/stores.py` composes it."""

    async def peer(request: httpx.Request) -> httpx.Response:
        other = peers(request.url.host)
        if other.dead:
            raise httpx.ConnectError("connection refused", request=request)
        answer = await other.task(other.ownership.take_forwarded(json.loads(request.content)))
        return httpx.Response(404, json={}) if answer is None else httpx.Response(200, json=answer)

    transport = httpx.MockTransport(peer)
    forwarder = Forwarder(
        store, name, token="sim", stale_after=lease, clock=clock.now, transport=transport
    )
    keeper, ownership = leased(
        store, engine, name, lease, clock=clock.now, wake=wake, forwarder=forwarder
    )
    return Member(name, engine, ownership, keeper)


async def _heartbeat(store: Store, name: str, clock: SimClock) -> None:
    with contextlib.suppress(StoreUnavailable):
        await store.heartbeat(name, EPOCH, clock.now(), f"http://{name}")


async def _heartbeats(store: Store, name: str, clock: SimClock, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await _heartbeat(store, name, clock)
