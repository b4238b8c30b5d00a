"""Several instances on one store, in-process: two real engines on one MemoryStore, each
behind its own `Ownership` (leases, a shared LocalWake, forwards answered by the other
instance in-process). Every assertion is on what each instance's Feishu and agent saw."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from bridge.cluster.forward import Forwarder
from bridge.cluster.leases import LeaseKeeper
from bridge.cluster.ownership import Ownership
from bridge.cluster.wake import LocalWake
from bridge.feishu.events import InboundMessage
from bridge.runtime.events import PermissionRequested
from bridge.store import MemoryStore
from bridge.store.port import ApprovalStatus, MessageState, StoreUnavailable
from tests.fakes.feishu import Call
from tests.unit.engine.engine_fakes import ACK, ALICE, CHAT, Harness, T
from tests.unit.engine.test_engine_intake import OPTIONS

TTL = 15.0


@dataclass
class Instance:
    name: str
    harness: Harness
    ownership: Ownership
    keeper: LeaseKeeper

    async def say(self, text: str, message_id: str, chat: str = CHAT) -> bool:
        """The receiver's part: journal (first wins across instances), then hand over."""
        h = self.harness
        message = InboundMessage(
            event_id=f"ev_{message_id}",
            message_id=message_id,
            chat_id=chat,
            chat_type="p2p",
            sender_open_id=ALICE,
            message_type="text",
            text=text,
        )
        if not await h.store.journal_message(chat, message_id, ALICE, chat, text, h.clock):
            return False
        self.ownership.accept(message)
        return True


class Cluster:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.wake = LocalWake()
        self.instances: dict[str, Instance] = {}
        self.clock = 1_700_000_000.0

    def add(self, name: str) -> Instance:
        harness = Harness(self.store)
        harness.clock = self.clock

        def clock() -> float:
            return harness.clock

        async def peer(request: httpx.Request) -> httpx.Response:
            other = self.instances[request.url.host]
            answer = await other.ownership.take_forwarded(json.loads(request.content))
            if answer is None:
                return httpx.Response(404, json={})
            return httpx.Response(200, json=answer)

        keeper = LeaseKeeper(
            self.store, name, TTL, clock=clock, on_lost=lambda k, r: ownership.lost(k, r)
        )
        forwarder = Forwarder(
            self.store,
            name,
            token="t",
            stale_after=TTL,
            clock=clock,
            transport=httpx.MockTransport(peer),
        )
        ownership = Ownership(
            keeper=keeper,
            wake=self.wake,
            store=self.store,
            engine=harness.engine,
            forwarder=forwarder,
            clock=clock,
            sweep_every=TTL / 3,
        )
        instance = Instance(name, harness, ownership, keeper)
        self.instances[name] = instance
        return instance

    async def kill(self, name: str) -> Instance:
        """SIGKILL: no renewal, no release; what it had in hand never goes out."""
        instance = self.instances.pop(name)
        instance.keeper.stop()
        await instance.harness.engine.drain(0.0)
        return instance

    def tick(self, seconds: float) -> None:
        self.clock += seconds
        for instance in self.instances.values():
            instance.harness.clock = self.clock

    async def settled(self) -> None:
        for _ in range(3):
            for instance in list(self.instances.values()):
                await instance.ownership.settled()
                await instance.harness.idle()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    store = MemoryStore()
    await store.open()
    c = Cluster(store)
    for name in ("a", "b"):
        instance = c.add(name)
        await store.heartbeat(name, "e1", c.clock, f"http://{name}")
        await instance.ownership.prepare()
        await instance.ownership.start()
    # Up for longer than the takeover grace (a keeper just started leaves the others'
    # expired leases to them for it): each takes over a dead owner's at once.
    c.tick(2 * TTL)
    for name in c.instances:
        await store.heartbeat(name, "e1", c.clock, f"http://{name}")
    yield c
    for instance in c.instances.values():
        instance.harness.feishu.release()
        await instance.ownership.stop()
        await instance.harness.engine.drain(0.1)
        await instance.ownership.release()
    await store.close()


async def test_messages_landing_on_either_instance_run_on_the_owner_in_journal_order(
    cluster: Cluster,
) -> None:
    a, b = cluster.instances["a"], cluster.instances["b"]
    assert await a.say("one", "om_1")
    await cluster.settled()
    assert await b.say("two", "om_2")  # the owner (a) is woken and reads it
    assert not await a.say("two", "om_2")  # a redelivery to the other instance: a duplicate
    assert await b.say("three", "om_3")
    await cluster.settled()

    (await a.harness.runtime.turn(1)).end()
    await cluster.settled()
    (await a.harness.runtime.turn(2)).end()
    await cluster.settled()
    (await a.harness.runtime.turn(3)).end()
    await cluster.settled()

    prompts = [c[2] for c in a.harness.runtime.calls if c[0] == "prompt"]
    assert prompts == ["one", "two", "three"]
    assert b.harness.runtime.calls == []
    assert b.harness.feishu.calls == []
    acks = [c for c in a.harness.feishu.calls if c.op == "add_reaction"]
    assert acks == [Call("add_reaction", m, ACK) for m in ("om_1", "om_2", "om_3")]
    for mid in ("om_1", "om_2", "om_3"):
        journaled = await cluster.store.message(mid)
        assert journaled is not None
        assert journaled.state is MessageState.DONE


async def test_a_click_landing_on_the_other_instance_is_answered_by_the_owner(
    cluster: Cluster,
) -> None:
    a, b = cluster.instances["a"], cluster.instances["b"]
    await a.say("clean up", "om_1")
    await cluster.settled()
    turn = await a.harness.runtime.turn(1)
    turn.emit(
        PermissionRequested(
            turn.session_id, request_id="r1", title="Run ls", options=OPTIONS, detail="ls"
        )
    )
    await cluster.settled()
    (posted,) = a.harness.feishu.cards()
    assert posted.card is not None

    reply = await b.harness.engine.card_action(b.harness.click(posted.card, "allow-once"))
    await cluster.settled()

    assert reply.toast_type == "success"
    assert reply.card is not None
    assert ("answer_permission", "r1", "allow-once") in a.harness.runtime.calls
    assert b.harness.feishu.calls == []
    again = await b.harness.engine.card_action(b.harness.click(posted.card, "allow-once"))
    assert again.toast_text == T("card.already_handled")


async def test_when_the_owner_dies_the_other_takes_over_tells_the_user_and_runs_the_queue(
    cluster: Cluster,
) -> None:
    a, b = cluster.instances["a"], cluster.instances["b"]
    await a.say("long job", "om_1")
    await cluster.settled()
    turn = await a.harness.runtime.turn(1)
    turn.emit(
        PermissionRequested(
            turn.session_id, request_id="r1", title="Run ls", options=OPTIONS, detail="ls"
        )
    )
    await b.say("next", "om_2")  # queued behind it, on the owner
    await cluster.settled()
    assert len(a.harness.feishu.cards()) == 1
    card_message = (await cluster.store.open_approvals())[0].card_message_id
    # a dies: no renewal, no release, no turn of it goes on.
    await cluster.kill("a")

    cluster.tick(TTL / 3)
    await b.ownership.sweep()  # the lease is still live: nothing to take
    await cluster.settled()
    assert b.harness.feishu.calls == []
    cluster.tick(TTL)
    await b.ownership.sweep()
    await cluster.settled()
    (await b.harness.runtime.turn(1)).end()
    await cluster.settled()

    assert [(c.op, c.target, c.text) for c in b.harness.feishu.calls] == [
        ("update_card", card_message, ""),  # the open approval card, expired
        ("reply_text", "om_1", T("presence.unrecoverable")),
        ("reply_text", "om_2", T("recovery.resumed")),
        ("reply_text", "om_2", T("presence.ended_empty")),
    ]
    approval = await cluster.store.approval("r1")
    assert approval is not None
    assert approval.status is ApprovalStatus.EXPIRED
    assert [c[2] for c in b.harness.runtime.calls if c[0] == "prompt"] == ["next"]
    lease = await cluster.store.lease_of(CHAT, cluster.clock)
    assert lease is not None
    assert lease.owner == "b"


async def test_a_message_journaled_but_never_claimed_is_taken_up_as_new(
    cluster: Cluster,
) -> None:
    """Its receiver journaled it, then lost the store (or died) before claiming the
    conversation: nobody acked or ran it, so the sweep's instance acks and runs it as a new
    message, with no "restarted" line (the cluster database-restart test's race)."""
    a, b = cluster.instances["a"], cluster.instances["b"]
    h = a.harness
    assert await h.store.journal_message(CHAT, "om_1", ALICE, CHAT, "hello", h.clock)
    await b.ownership.sweep()  # left one sweep for its receiver
    await cluster.settled()
    assert b.harness.feishu.calls == []
    cluster.tick(TTL / 3)
    await b.ownership.sweep()
    await cluster.settled()
    (await b.harness.runtime.turn(1)).end()
    await cluster.settled()

    assert [(c.op, c.target, c.text) for c in b.harness.feishu.calls] == [
        ("add_reaction", "om_1", ACK),
        ("reply_text", "om_1", T("presence.ended_empty")),
    ]
    assert [c[2] for c in b.harness.runtime.calls if c[0] == "prompt"] == ["hello"]


async def test_a_post_its_dead_owner_owed_goes_out_from_the_next_to_claim_it(
    cluster: Cluster,
) -> None:
    """Seed 44126: the owner answered a command (the message done, its reply owed) and
    died before the reply went out. The other instance claims the conversation for the
    user's next message, not by a sweep: the owed reply goes out from there all the same."""
    a, b = cluster.instances["a"], cluster.instances["b"]
    a.harness.feishu.hold("reply_text")
    await a.say("/help", "om_1")
    await a.harness.feishu.entered.wait()
    owed = a.harness.feishu.calls[-1]
    assert (owed.op, owed.target) == ("reply_text", "om_1")
    await cluster.kill("a")  # a dies: no renewal, no release, its reply never sent

    cluster.tick(TTL + 1)
    assert await b.say("hello", "om_2")  # b's pull claims the expired lease for it
    await cluster.settled()

    replies = [(c.op, c.target, c.text) for c in b.harness.feishu.calls if c.op == "reply_text"]
    assert replies[0] == ("reply_text", "om_1", owed.text)
    assert [c[2] for c in b.harness.runtime.calls if c[0] == "prompt"] == ["hello"]


async def test_a_message_its_dead_owner_took_is_resumed_not_acked_again(
    cluster: Cluster,
) -> None:
    """Seed 54781: the owner took a message (acked it, queued it behind a scheduled round)
    and died; nothing of the conversation was past queued or owed. The other instance
    claims the chat for the user's next message: the queued one is the dead owner's, said
    to be picked up again, not acked a second time as new."""
    a, b = cluster.instances["a"], cluster.instances["b"]
    assert await a.keeper.acquire(CHAT) == 1
    store, clock = cluster.store, cluster.clock
    assert await store.journal_message(CHAT, "om_1", ALICE, CHAT, "first", clock)
    await store.take_messages(["om_1"], 1)  # as a's feed marks it, before its ack
    await cluster.kill("a")  # a dies holding the conversation, om_1 queued on it

    cluster.tick(TTL + 1)
    assert await b.say("next", "om_2")
    await cluster.settled()
    (await b.harness.runtime.turn(1)).end()
    await cluster.settled()

    calls = [(c.op, c.target, c.text) for c in b.harness.feishu.calls]
    assert ("add_reaction", "om_1", ACK) not in calls
    assert ("reply_text", "om_1", T("recovery.resumed")) in calls
    assert ("add_reaction", "om_2", ACK) in calls  # the new one is acked as new
    assert [c[2] for c in b.harness.runtime.calls if c[0] == "prompt"] == ["first", "next"]


async def test_a_message_no_owner_took_arrives_as_new_after_its_owner_died(
    cluster: Cluster,
) -> None:
    """Seed 17734: the owner died; another instance journaled a message for the chat
    after that, and before it claimed the chat, the other instance claimed it for its own
    message. No owner ever took the first one: it is acked and run as new, never told it
    waited through a restart."""
    a, b = cluster.instances["a"], cluster.instances["b"]
    await a.say("one", "om_1")
    await cluster.settled()
    (await a.harness.runtime.turn(1)).end()
    await cluster.settled()
    await cluster.kill("a")  # a dies between rounds

    cluster.tick(TTL + 1)
    store, clock = cluster.store, cluster.clock
    assert await store.journal_message(CHAT, "om_2", ALICE, CHAT, "two", clock)  # by c
    assert await b.say("three", "om_3")
    await cluster.settled()

    calls = [(c.op, c.target, c.text) for c in b.harness.feishu.calls]
    assert ("add_reaction", "om_2", ACK) in calls
    assert ("add_reaction", "om_3", ACK) in calls
    assert T("recovery.resumed") not in b.harness.feishu.texts()
    assert T("recovery.resumed_queued") not in b.harness.feishu.texts()
    assert [c[2] for c in b.harness.runtime.calls if c[0] == "prompt"] == ["two"]


async def test_a_post_its_dead_owner_owed_goes_out_from_the_sweep_with_no_message_left(
    cluster: Cluster,
) -> None:
    """Seed 11168: the owner answered (the message done, the answer recorded, owed) and
    died before sending it, and its user wrote nothing more. The sweep finds the
    conversation by its owed post alone and takes it over: the answer goes out."""
    a, b = cluster.instances["a"], cluster.instances["b"]
    a.harness.feishu.hold("reply_text")
    await a.say("/help", "om_1")
    await a.harness.feishu.entered.wait()
    owed = a.harness.feishu.calls[-1]
    await cluster.kill("a")

    cluster.tick(TTL + 1)
    await b.ownership.sweep()
    await cluster.settled()

    replies = [(c.op, c.target, c.text) for c in b.harness.feishu.calls if c.op == "reply_text"]
    assert replies == [("reply_text", "om_1", owed.text)]
    assert await cluster.store.owed() == []


async def test_a_takeover_cut_short_by_the_store_is_done_again_by_the_next_sweep(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 12407: the database went away in the middle of a takeover, after the claim.
    Once it is back the lease is still this instance's, so no claim says "take over"
    again: the takeover itself is remembered, and the next sweep finishes it."""
    a, b = cluster.instances["a"], cluster.instances["b"]
    await a.say("long job", "om_1")
    await cluster.settled()
    await a.harness.runtime.turn(1)
    await b.say("next", "om_2")  # acked and queued on a
    await cluster.settled()
    await cluster.kill("a")  # a dies mid-round

    store = cluster.store
    approvals = store.open_approvals

    async def away() -> list[Any]:
        raise StoreUnavailable("OperationalError")

    monkeypatch.setattr(store, "open_approvals", away)
    cluster.tick(TTL + 1)
    await b.ownership.sweep()
    await cluster.settled()
    assert b.harness.feishu.calls == []  # claimed, then cut short
    monkeypatch.setattr(store, "open_approvals", approvals)
    await b.ownership.sweep()
    await cluster.settled()

    assert [(c.op, c.target, c.text) for c in b.harness.feishu.calls] == [
        ("reply_text", "om_1", T("presence.unrecoverable")),
        ("reply_text", "om_2", T("recovery.resumed")),  # a's, though cut short: no new ack
    ]
    assert [c[2] for c in b.harness.runtime.calls if c[0] == "prompt"] == ["next"]


async def test_a_lost_lease_stops_the_old_owner_from_starting_turns(cluster: Cluster) -> None:
    a, b = cluster.instances["a"], cluster.instances["b"]
    await a.say("one", "om_1")
    await cluster.settled()
    (await a.harness.runtime.turn(1)).end()
    await cluster.settled()
    # a stalls past its lease; b takes the conversation with the next message.
    cluster.tick(TTL + 1)
    await b.say("two", "om_2")
    await cluster.settled()
    await a.keeper.renew()  # a learns it lost the lease
    await cluster.settled()
    assert CHAT not in a.harness.engine.conversations
    (await b.harness.runtime.turn(1)).end()
    await cluster.settled()
    assert [c[2] for c in b.harness.runtime.calls if c[0] == "prompt"] == ["two"]
    assert [(c.op, c.target) for c in b.harness.feishu.calls] == [
        ("add_reaction", "om_2"),
        ("reply_text", "om_2"),
    ]


async def test_a_stop_landing_on_the_other_instance_stops_the_owner_s_round(
    cluster: Cluster,
) -> None:
    a, b = cluster.instances["a"], cluster.instances["b"]
    await a.say("long job", "om_1")
    await cluster.settled()
    await a.harness.runtime.turn(1)
    await b.say("/stop", "om_2")
    await cluster.settled()

    assert ("cancel", "sess_1") in a.harness.runtime.calls
    assert T("presence.stopped") in a.harness.feishu.texts()
    assert b.harness.feishu.calls == []
    assert b.harness.runtime.calls == []
