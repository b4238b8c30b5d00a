"""Two bridge processes on one database: the world's cluster (issue 42: the cluster
database-restart test's property, in virtual time).

Each member is a whole bridge as `bridge/stores.py` composes one on PostgreSQL: its own
engine (client, call budget, ACP runtime), behind its own `Ownership` (a `LeaseKeeper` on
the shared store, the wake-ups of a `LocalWake` both share, a `Forwarder` whose peer is the
other member's `take_forwarded`), its heartbeat, and its own `Receiver`. Feishu spreads
each delivery of an event over the members (a seeded draw, as the emulator's
`spread_webhooks` does), and a click or a recall lands on either. The database may go away
for longer than a lease (`draw_cluster`): every lease expires while it is away, and the
product's promise is that this costs nothing (each message answered once, in order, acked
once, nobody told of a restart that never was).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from bridge.cluster.forward import Forwarder
from bridge.cluster.leases import LeaseKeeper
from bridge.cluster.ownership import Ownership
from bridge.cluster.wake import LocalWake
from bridge.engine.engine import Engine
from bridge.feishu.events import CardAction, CardActionReply
from bridge.store.port import Store, StoreUnavailable

from .loop import SimClock
from .store import DbOutage

EPOCH = "sim"


@dataclass(frozen=True)
class ClusterPlan:
    """How many members, their lease, and the database's outage (if any)."""

    members: int
    lease: float  # seconds (BRIDGE_LEASE_SECONDS)
    outage: DbOutage | None
    after_journals: int = (
        0  # the outage begins as this many messages are journaled (0: at its start)
    )


def draw_cluster(seed: int) -> ClusterPlan | None:
    """Whether the seed's world runs two bridge processes on one database (a stream of its
    own: the worlds drawn before clusters were stay as they were). Most such worlds lose
    the database for longer than a lease, some for less, a few not at all."""
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
    return ClusterPlan(2, lease, outage, after)


@dataclass
class Member:
    name: str
    engine: Engine
    ownership: Ownership
    keeper: LeaseKeeper


class Cluster:
    """The members, and the front Feishu sees: a click or a recall reaches one of them."""

    restarted_at: float | None = None  # a member never restarts here

    def __init__(self, members: list[Member], spread: random.Random) -> None:
        self.members = members
        self._spread = spread
        self._heartbeats: list[asyncio.Task[None]] = []

    @property
    def engines(self) -> list[Engine]:
        return [m.engine for m in self.members]

    def _one(self) -> Member:
        return self._spread.choice(self.members)

    async def card_action(self, action: CardAction) -> CardActionReply:
        return await self._one().ownership.card_action(action)

    def recall(self, conversation_key: str, message_id: str) -> None:
        self._one().ownership.recall(conversation_key, message_id)

    async def start(self, store: Store, clock: SimClock, lease: float) -> None:
        """As `feishu-bridge run` starts each: heartbeat, release what an earlier process
        held, then take over what nobody runs and keep leases alive."""
        for member in self.members:
            await _heartbeat(store, member.name, clock)
            self._heartbeats.append(
                asyncio.ensure_future(_heartbeats(store, member.name, clock, lease / 2))
            )
        for member in self.members:
            await member.ownership.prepare()
        for member in self.members:
            await member.ownership.start()
            await member.engine.start_schedules()

    async def stop(self) -> None:
        for task in self._heartbeats:
            task.cancel()
        for member in self.members:
            await member.ownership.stop()


def member(
    name: str,
    engine: Engine,
    store: Store,
    wake: LocalWake,
    clock: SimClock,
    lease: float,
    peers: Callable[[str], Member],
) -> Member:
    """One bridge process of the cluster, composed as `bridge/stores.py` composes it."""

    async def peer(request: httpx.Request) -> httpx.Response:
        answer = await peers(request.url.host).ownership.take_forwarded(json.loads(request.content))
        return httpx.Response(404, json={}) if answer is None else httpx.Response(200, json=answer)

    keeper = LeaseKeeper(
        store, name, lease, clock=clock.now, on_lost=lambda key, why: ownership.lost(key, why)
    )
    forwarder = Forwarder(
        store,
        name,
        token="sim",
        stale_after=lease,
        clock=clock.now,
        transport=httpx.MockTransport(peer),
    )
    ownership = Ownership(
        keeper=keeper,
        wake=wake,
        store=store,
        engine=engine,
        forwarder=forwarder,
        clock=clock.now,
        sweep_every=lease / 3,
    )
    return Member(name, engine, ownership, keeper)


async def _heartbeat(store: Store, name: str, clock: SimClock) -> None:
    with contextlib.suppress(StoreUnavailable):
        await store.heartbeat(name, EPOCH, clock.now(), f"http://{name}")


async def _heartbeats(store: Store, name: str, clock: SimClock, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        await _heartbeat(store, name, clock)
