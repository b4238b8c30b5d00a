"""Several instances on one PostgreSQL database: which conversations this
instance runs, and how work reaches the instance that runs a conversation.

`Ownership` stands in front of the engine as the receiver's `MessageSink` when the store is
shared. The receiver has journaled every message before it gets here (first wins across
instances, so a redelivery to another instance is already dropped as a duplicate). Then:

- *Pull, in journal order.* A conversation's messages are fed to its actor from the
  journal (`pending_messages`), never straight from the request, so messages journaled on
  different instances run in one order. One pull per conversation at a time; a kick during
  a pull makes it read once more.
- *Claim or wake.* An instance that does not hold the conversation's lease tries to claim
  it (free, or expired); when another instance holds it, the owner is woken (`Wake`) and
  pulls. A lost wake-up is made good by the owner's rescan (after a listener reconnect)
  and by the sweep.
- *Takeover.* Every `sweep_every` seconds the instance claims conversations with
  unfinished messages and no live lease: an expired lease's owner died, so its
  interrupted turns' users are told, its open approval cards expire and its queue runs
  (`Intake.take_over`). A conversation whose lease was released (a clean shutdown) or
  never claimed is left one sweep for the instance that just received its message; one
  never claimed is then pulled as new (acked and run, no "restarted" line): nobody had
  taken its messages up. A claim that finds leftovers (a message past queued, or a post
  its last owner owed) takes over, however it came about: a sweep or a new message.
- *Never two runners.* A turn starts, and its prompt goes out, only while this instance
  holds the lease (the engine waits on `LeaseKeeper.confirmed`); a lease lost (taken over
  after a stall) drops the conversation here: its turn is cancelled and its actor
  forgotten. A lease only unconfirmed (the store was away past its expiry) is not lost:
  what runs goes on, and it carries on silently once a renewal finds it still ours.
- Card clicks, recalls and bot-menu clicks for a conversation another instance runs are
  forwarded to it (`Forwarder`); `take_forwarded` is the owner's side. A menu click nobody
  live runs the conversation of is answered here (nothing runs there to stop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Protocol

from bridge.cluster.forward import Forwarder, PeersUnreachable
from bridge.cluster.leases import LeaseKeeper, LossReason
from bridge.cluster.wake import Subscription, Wake, WakeKind
from bridge.feishu.events import CardAction, CardActionReply, InboundMessage, MenuClick
from bridge.store.port import JournaledMessage, MessageState, Store, StoreUnavailable

log = logging.getLogger(__name__)

Confirm = Callable[[str], Awaitable[bool]]  # the lease of a conversation still ours?
Forward = Callable[[CardAction], Awaitable[CardActionReply | None]]


class LocalEngine(Protocol):
    """What `Ownership` asks of this instance's engine (the composition root hands it the
    engine): the receiver's calls, the journal's messages fed, a dead owner's leftovers
    taken over, clicks forwarded here, a conversation forgotten once another instance runs
    it."""

    def accept(self, message: InboundMessage) -> None: ...

    def refuse(self, message: InboundMessage) -> None: ...

    async def card_action(self, action: CardAction) -> CardActionReply: ...

    def recall(self, conversation_key: str, message_id: str) -> None: ...

    def menu(self, click: MenuClick, chat_id: str | None, admitted: bool) -> None: ...

    def forget(self, key: str) -> None: ...

    def accept_journaled(self, message: JournaledMessage) -> None: ...

    async def take_over(
        self, key: str, fresh: Mapping[str, InboundMessage], leftovers: Collection[str]
    ) -> list[str]: ...

    async def local_card_action(self, action: CardAction) -> CardActionReply | None: ...

    async def reload_schedules(self, key: str) -> None: ...

    def share(self, owner: Ownership, confirm: Confirm, forward: Forward) -> None: ...


class Ownership:
    """Implements the receiver's `MessageSink` for an instance among several."""

    def __init__(
        self,
        *,
        keeper: LeaseKeeper,
        wake: Wake,
        store: Store,
        engine: LocalEngine,
        forwarder: Forwarder,
        clock: Callable[[], float],
        sweep_every: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._keeper = keeper
        self._wake = wake
        self._store = store
        self._engine = engine
        self._forwarder = forwarder
        self._clock = clock
        self._sweep_every = sweep_every
        self._sleep = sleep
        # Messages this instance journaled and has not fed yet (the request's own copy
        # knows its topic thread; the journal's does not).
        self._inbound: dict[str, dict[str, InboundMessage]] = {}
        self._fed: dict[str, set[str]] = {}  # fed to the actor and unfinished at last read
        # Takeovers begun here and cut short (the store went away mid-way): done again by
        # the next pull, which the sweep asks for, as the lease is this instance's by then.
        self._taking: set[str] = set()
        self._pulls: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()  # kicked during a pull: read once more
        self._takeover: set[str] = set()  # to claim as leftovers of a dead owner
        self._waited: set[str] = set()  # released or never-claimed, seen at the last sweep
        self._subscription: Subscription | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._renewal: asyncio.Task[None] | None = None
        self._loose: set[asyncio.Task[None]] = set()
        self._stopped = False
        engine.share(self, keeper.confirmed, self._forward_click)

    # -- lifecycle -----------------------------------------------------------------------

    async def prepare(self) -> None:
        """Before the listeners start: release what an earlier process under this id held
        (before anything is claimed anew) and listen for wake-ups."""
        await self._keeper.start()
        await self._wake.open()
        self._subscription = self._wake.subscribe()

    async def start(self) -> None:
        """Take over what nobody runs, then keep leases alive and sweep on a clock."""
        assert self._subscription is not None, "prepare() first"
        await self.sweep(patient=False)  # at start, what nobody runs is left over
        self._renewal = asyncio.create_task(self._keeper.run(), name="lease-renewal")
        self._loops = [
            asyncio.create_task(self._listen(self._subscription), name="wake-listener"),
            asyncio.create_task(self._sweeping(), name="takeover-sweep"),
        ]

    async def stop(self) -> None:
        """Before the engine drains: nothing more is claimed or fed here (what arrives from
        now on stays journaled for the others). The leases are still renewed: the rounds
        running here may finish."""
        self._stopped = True
        for task in [*self._loops, *self._pulls.values()]:
            task.cancel()
        await asyncio.gather(*self._loops, *self._pulls.values(), return_exceptions=True)

    async def release(self) -> None:
        """After the engine drained: give every lease back, so the others take over."""
        if self._renewal is not None:
            self._renewal.cancel()
            await asyncio.gather(self._renewal, return_exceptions=True)
        try:
            await self._keeper.close()
        except Exception as exc:  # expiry frees them anyway
            log.warning("leases not released at shutdown: %s", type(exc).__name__)
        await self._wake.close()
        await self._forwarder.aclose()

    async def settled(self) -> None:
        """Until no pull, forward or recall of this instance is under way (tests)."""
        while busy := [*self._pulls.values(), *self._loose]:
            await asyncio.gather(*busy, return_exceptions=True)

    # -- the receiver's MessageSink ----------------------------------------------------

    def accept(self, message: InboundMessage) -> None:
        key = message.conversation_key
        self._inbound.setdefault(key, {})[message.message_id] = message
        self.kick(key)

    def refuse(self, message: InboundMessage) -> None:
        self._engine.refuse(message)  # one line answering the refused message: no turn

    async def card_action(self, action: CardAction) -> CardActionReply:
        return await self._engine.card_action(action)

    def recall(self, conversation_key: str, message_id: str) -> None:
        if self._keeper.owns(conversation_key):
            self._engine.recall(conversation_key, message_id)
            return
        self._spawn(self._recall_elsewhere(conversation_key, message_id), f"recall:{message_id}")

    def menu(self, click: MenuClick, chat_id: str | None, admitted: bool) -> None:
        if chat_id is None or self._keeper.owns(chat_id):
            self._engine.menu(click, chat_id, admitted)  # a chat never seen runs nowhere
            return
        self._spawn(self._menu_elsewhere(click, chat_id, admitted), f"menu:{click.event_id}")

    async def _menu_elsewhere(self, click: MenuClick, chat_id: str, admitted: bool) -> None:
        try:
            if await self._forwarder.menu(click, chat_id, admitted):
                return
        except PeersUnreachable:
            pass
        self._engine.menu(click, chat_id, admitted)

    # -- pulling ------------------------------------------------------------------------

    def kick(self, key: str, *, takeover: bool = False) -> None:
        """Look at the conversation's journal soon (claiming it if nobody holds it)."""
        if self._stopped:
            return
        if takeover:
            self._takeover.add(key)
        if key in self._pulls:
            self._again.add(key)
            return
        self._pulls[key] = self._spawn(self._pull(key), f"pull:{key}")

    async def _pull(self, key: str) -> None:
        try:
            while True:
                self._again.discard(key)
                await self._pull_once(key)
                if key not in self._again:
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The store hiccuped: the message stays journaled; the sweep (here, or the
            # owner's) reads it again. The request's copies go: by then another instance
            # may have fed (and acked) them, so they are no longer new to a takeover here.
            self._inbound.pop(key, None)
            if isinstance(exc, StoreUnavailable):
                log.warning("reading the journal of %s failed: the store is away", key)
            else:
                log.exception("reading the journal of %s failed", key)
        finally:
            self._pulls.pop(key, None)

    async def _pull_once(self, key: str) -> None:
        takeover = key in self._takeover
        self._takeover.discard(key)
        claimed = False
        if not self._keeper.owns(key):
            held = self._keeper.fence(key)  # held here, unconfirmed: the store was away
            fence = await self._keeper.acquire(key)
            if fence is None:
                if self._inbound.pop(key, None):  # ours to hand over: wake the owner
                    await self._wake.publish(key, WakeKind.MESSAGE)
                return
            # The same fence: still ours, nobody ran it meanwhile (nothing to take over).
            claimed = fence != held
        if claimed:
            log.info("conversation %s claimed%s", key, " (takeover)" if takeover else "")
            self._fed[key] = set()
        pending = await self._store.pending_messages(key)
        # What an earlier owner took (acked, queued, ran), even with every message still
        # queued (seed 54781: its owner died in a scheduled round, an acked message behind
        # it). What none took arrives as new: journaled by another instance after its owner
        # died, or just before the store went away (seed 17734; the database-restart flake).
        # (A takeover cut short marked them with this holding's fence: not leftovers then.)
        mine = self._keeper.fence(key) or 0
        leftovers = {
            m.message_id
            for m in pending
            if 0 < m.taken < mine or m.state is not MessageState.QUEUED
        }
        resumed = key in self._taking
        if resumed or (claimed and (takeover or leftovers or await self._owes(key))):
            # A dead owner's leftovers: told and run as after a restart (each step keeps
            # its effect in the store, so one cut short is simply done again).
            # Only what arrives here as new is marked: a leftover keeps its taker's fence,
            # so a takeover cut short still finds it one.
            self._taking.add(key)
            await self._take(key, [m.message_id for m in pending if m.message_id not in leftovers])
            inbound = self._inbound.pop(key, {})
            fed = await self._engine.take_over(key, inbound, leftovers)
            read = {m.message_id for m in pending}  # marked above, or leftovers
            await self._take(key, [mid for mid in fed if mid not in read])  # come since
            self._fed[key] = set(fed)
            self._taking.discard(key)
        else:
            await self._feed(key, pending)
        if claimed:  # its schedules, as the store holds them now, run here
            await self._engine.reload_schedules(key)

    async def _owes(self, key: str) -> bool:
        """Whether a post of the conversation is owed: its last owner recorded it and died
        before sending it (seed 44126: an /every's confirmation, its command done, claimed
        here by a new message's pull rather than by the sweep)."""
        return any(post.conversation_key == key for post in await self._store.owed())

    async def _take(self, key: str, message_ids: list[str]) -> None:
        """Mark the messages taken under this instance's fence, before they are acked: an
        owner after this one finds them as its leftovers."""
        fence = self._keeper.fence(key)
        if message_ids and fence is not None:
            await self._store.take_messages(message_ids, fence)

    async def _feed(self, key: str, pending: list[JournaledMessage]) -> None:
        """The queued messages not fed yet, in journal order."""
        fed = self._fed.setdefault(key, set())
        new = [m for m in pending if m.state is MessageState.QUEUED and m.message_id not in fed]
        await self._take(key, [m.message_id for m in new])
        inbound = self._inbound.pop(key, {})
        for message in new:
            local = inbound.pop(message.message_id, None)
            if local is not None:  # the request's own copy knows its topic thread
                self._engine.accept(local)
            else:
                self._engine.accept_journaled(message)
            fed.add(message.message_id)
        self._fed[key] = fed & {m.message_id for m in pending}

    # -- takeover -----------------------------------------------------------------------

    async def sweep(self, *, patient: bool = True) -> None:
        """Claim the conversations with unfinished messages that no live lease covers, and
        read again those held here with a message not fed yet (its wake-up was lost)."""
        waited: set[str] = set()
        me, steady = self._keeper.instance_id, self._keeper.steady(self._keeper.takeover_grace)
        for found in await self._store.unowned_conversations(self._clock()):
            key = found.conversation_key
            if key in self._pulls:
                continue
            if patient and found.last_owner is None and key not in self._waited:
                waited.add(key)  # its receiver is claiming it right now, most likely
                continue
            if found.last_owner not in (None, me) and not steady:
                continue  # after an outage: its owner, cut off too, renews it first
            # Never claimed: nobody acked or ran its messages (its receiver died, or the
            # store went away before the claim), so they arrive as new, not as leftovers.
            self.kick(key, takeover=found.fence > 0)
        self._waited = waited
        held = set(self._keeper.held())  # unconfirmed ones too: the pull reclaims them
        for key in sorted(self._taking & held):
            self.kick(key)
        for message in await self._store.unfinished_messages():
            key = message.conversation_key
            if (
                message.state is MessageState.QUEUED
                and message.message_id not in self._fed.get(key, ())
                and key in held
            ):
                self.kick(key)

    async def _sweeping(self) -> None:
        while True:
            await self._sleep(self._sweep_every)
            try:
                await self.sweep()
            except Exception as exc:  # the store is down: the next sweep tries again
                log.warning("takeover sweep failed: %s", type(exc).__name__)

    async def _listen(self, subscription: Subscription) -> None:
        async for wakeup in subscription:
            if wakeup.kind is WakeKind.RESCAN:
                for key in self._keeper.held():
                    self.kick(key)
                self._spawn(self.sweep(), "rescan-sweep")
            elif self._keeper.holds(wakeup.conversation_key):
                self.kick(wakeup.conversation_key)

    def lost(self, key: str, reason: LossReason) -> None:
        """The keeper's `on_lost`: another instance may run the conversation from now on."""
        self._fed.pop(key, None)
        self._taking.discard(key)
        self._inbound.pop(key, None)
        self._engine.forget(key)

    def holds(self, key: str) -> bool:
        return self._keeper.owns(key)

    # -- forwarded work -----------------------------------------------------------------

    async def _forward_click(self, action: CardAction) -> CardActionReply | None:
        return await self._forwarder.card_action(action)

    async def _recall_elsewhere(self, key: str, message_id: str) -> None:
        try:
            if await self._forwarder.recall(key, message_id):
                return
        except PeersUnreachable:
            pass
        # Nobody live runs it: a message still waiting is simply not run.
        message = await self._store.message(message_id)
        if message is not None and message.state is MessageState.QUEUED:
            await self._store.set_message_state(message_id, MessageState.DONE, self._clock())

    async def take_forwarded(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """Another instance's forward (`POST /cluster/forward`): the answer, or None when
        this instance does not hold what it names."""
        kind = body.get("kind")
        if kind == "card_action":
            action = CardAction.model_validate(body.get("action") or {})
            reply = await self._engine.local_card_action(action)
            return None if reply is None else reply.model_dump()
        if kind == "menu":
            chat_id = str(body.get("chat_id"))
            if not self._keeper.owns(chat_id):
                return None
            click = MenuClick.model_validate(body.get("click") or {})
            self._engine.menu(click, chat_id, bool(body.get("admitted")))
            return {}
        if kind == "recall":
            key, message_id = str(body.get("conversation_key")), str(body.get("message_id"))
            if not self._keeper.owns(key):
                return None
            self._engine.recall(key, message_id)
            return {}
        raise ValueError(f"unknown forward kind {kind!r}")

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro, name=name)
        self._loose.add(task)
        task.add_done_callback(self._loose.discard)
        return task
