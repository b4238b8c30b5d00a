"""The cluster part of the `Store` contract (leases, instances; schema version 7), run
against SqliteStore, PostgresStore and MemoryStore alike (see conftest)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from bridge.store import Lease, MessageState, Store, StoreClosed, UnownedConversation

Restart = Callable[[], Awaitable[Store]]
T0 = 1_700_000_000.0
TTL = 15.0


async def test_a_free_lease_is_claimed_with_fence_one_and_renewed_by_its_owner(
    store: Store,
) -> None:
    assert await store.lease_of("A", T0) is None
    assert await store.claim_lease("A", "i1", T0, TTL) == 1
    assert await store.lease_of("A", T0) == Lease("i1", 1, T0 + TTL)
    # Claiming again is a renewal: same fence, later expiry.
    assert await store.claim_lease("A", "i1", T0 + 5, TTL) == 1
    assert await store.lease_of("A", T0 + 5) == Lease("i1", 1, T0 + 5 + TTL)


async def test_a_renewal_or_claim_landing_late_never_moves_its_expiry_back(
    store: Store,
) -> None:
    """One asked before a database outage lands after it, with the expiry it computed
    then: the later one's stays (seed 892 of the simulator's cluster: the other instance
    took the lease as expired while its holder ran a turn on it)."""
    assert await store.claim_lease("A", "i1", T0 + 10, TTL) == 1
    assert await store.renew_leases("i1", T0, TTL) == ["A"]  # asked at T0, answered now
    assert await store.lease_of("A", T0 + 20) == Lease("i1", 1, T0 + 10 + TTL)
    assert await store.claim_lease("A", "i1", T0 + 1, TTL) == 1
    assert await store.lease_of("A", T0 + 20) == Lease("i1", 1, T0 + 10 + TTL)
    assert await store.claim_lease("A", "i2", T0 + 20, TTL) is None  # still live
    assert await store.renew_leases("i1", T0 + 12, TTL) == ["A"]  # a later one extends it
    assert await store.lease_of("A", T0 + 20) == Lease("i1", 1, T0 + 12 + TTL)


async def test_an_expired_lease_is_left_to_its_owner_when_asked(store: Store) -> None:
    """`take_expired=False`: after its own outage an instance claims only free leases and
    its own (issue 35, a database restart)."""
    assert await store.claim_lease("A", "i1", T0, TTL) == 1
    later = T0 + TTL + 1
    assert await store.claim_lease("A", "i2", later, TTL, take_expired=False) is None
    assert await store.claim_lease("B", "i2", later, TTL, take_expired=False) == 1  # free
    assert await store.claim_lease("A", "i1", later, TTL, take_expired=False) == 1  # its own
    assert await store.lease_of("A", later) == Lease("i1", 1, later + TTL)


async def test_a_live_lease_refuses_another_owner_until_it_expires(store: Store) -> None:
    assert await store.claim_lease("A", "i1", T0, TTL) == 1
    assert await store.claim_lease("A", "i2", T0 + TTL - 0.001, TTL) is None
    assert (await store.lease_of("A", T0 + 1)) == Lease("i1", 1, T0 + TTL)
    # Expired: the other instance takes it over, and the fence grows.
    assert await store.lease_of("A", T0 + TTL) is None
    assert await store.claim_lease("A", "i2", T0 + TTL, TTL) == 2
    assert await store.lease_of("A", T0 + TTL) == Lease("i2", 2, T0 + 2 * TTL)
    # The first owner, back from a pause, cannot take it back while it lives.
    assert await store.claim_lease("A", "i1", T0 + TTL + 1, TTL) is None


async def test_leases_of_different_conversations_are_independent(store: Store) -> None:
    assert await store.claim_lease("A", "i1", T0, TTL) == 1
    assert await store.claim_lease("B", "i2", T0, TTL) == 1
    assert (await store.lease_of("B", T0)) == Lease("i2", 1, T0 + TTL)


async def test_racing_claimers_get_exactly_one_winner(store: Store) -> None:
    owners = [f"i{n % 4}" for n in range(20)]
    fences = await asyncio.gather(*(store.claim_lease("A", o, T0, TTL) for o in owners))
    won = {o for o, f in zip(owners, fences, strict=True) if f is not None}
    assert len(won) == 1
    assert {f for f in fences if f is not None} == {1}
    lease = await store.lease_of("A", T0)
    assert lease is not None
    assert lease.owner in won


async def test_racing_takeovers_of_an_expired_lease_get_one_winner(store: Store) -> None:
    assert await store.claim_lease("A", "dead", T0, TTL) == 1
    later = T0 + TTL + 1
    fences = await asyncio.gather(*(store.claim_lease("A", f"i{n}", later, TTL) for n in range(8)))
    assert [f for f in fences if f is not None] == [2]


async def test_renew_extends_only_what_the_owner_still_holds(store: Store) -> None:
    for key in ("A", "B", "C"):
        assert await store.claim_lease(key, "i1", T0, TTL) == 1
    assert await store.claim_lease("D", "i2", T0, TTL) == 1
    # B expires and i2 takes it over; C expires and nobody takes it.
    assert await store.claim_lease("B", "i2", T0 + TTL + 1, TTL) == 2
    assert await store.renew_leases("i1", T0 + TTL + 2, TTL) == ["A", "C"]
    assert await store.lease_of("A", T0 + TTL + 2) == Lease("i1", 1, T0 + 2 * TTL + 2)
    # Kept by nobody else meanwhile, C stays i1's with the same fence.
    assert await store.lease_of("C", T0 + TTL + 2) == Lease("i1", 1, T0 + 2 * TTL + 2)
    assert await store.lease_of("B", T0 + TTL + 2) == Lease("i2", 2, T0 + 2 * TTL + 1)
    assert await store.renew_leases("nobody", T0, TTL) == []


async def test_release_frees_leases_and_the_next_claim_grows_the_fence(store: Store) -> None:
    for key in ("A", "B", "C"):
        assert await store.claim_lease(key, "i1", T0, TTL) == 1
    assert await store.release_leases("i1", ["A", "nope"]) == 1
    assert await store.release_leases("i2") == 0  # not its leases
    assert await store.release_leases("i1", []) == 0
    assert await store.lease_of("A", T0) is None
    assert await store.renew_leases("i1", T0 + 1, TTL) == ["B", "C"]  # A stays released
    assert await store.claim_lease("A", "i2", T0 + 1, TTL) == 2  # before its old expiry
    assert await store.release_leases("i1") == 2
    # Released, then claimed again by the same instance: an owner change all the same.
    assert await store.claim_lease("B", "i1", T0 + 2, TTL) == 2


async def test_unowned_conversations_are_those_with_work_and_no_live_lease(
    store: Store,
) -> None:
    async def journal(conv: str, mid: str) -> None:
        assert await store.journal_message(conv, mid, "ou", "oc", "hi", T0)

    for conv, mid in (("A", "a1"), ("B", "b1"), ("C", "c1"), ("D", "d1"), ("A", "a2")):
        await journal(conv, mid)
    assert await store.set_message_state("d1", MessageState.DONE, T0)  # D has no work left
    assert await store.claim_lease("A", "dead", T0, TTL) == 1
    assert await store.claim_lease("B", "alive", T0, TTL) == 1
    assert await store.claim_lease("C", "gone", T0, TTL) == 1
    assert await store.release_leases("gone") == 1
    assert await store.claim_lease("B", "alive", T0 + TTL, TTL) == 1  # renewed in time

    assert await store.unowned_conversations(T0 + 1) == [UnownedConversation("C", None, 1)]
    assert await store.unowned_conversations(T0 + TTL) == [
        UnownedConversation("A", "dead", 1),
        UnownedConversation("C", None, 1),
    ]
    await journal("E", "e1")  # never claimed
    keys = [u.conversation_key for u in await store.unowned_conversations(T0 + TTL)]
    assert keys == ["A", "C", "E"]


async def test_a_conversation_whose_only_leftover_is_an_owed_post_is_unowned_too(
    store: Store,
) -> None:
    """Its owner answered (the message done), recorded the answer and died before sending
    it: the conversation has work to take over though none of its messages is unfinished."""
    for conv, mid in (("A", "a1"), ("B", "b1"), ("C", "c1")):
        assert await store.journal_message(conv, mid, "ou", "oc", "hi", T0)
    assert await store.set_message_state("a1", MessageState.DONE, T0)
    assert await store.set_message_state("b1", MessageState.DONE, T0)
    assert await store.claim_lease("A", "dead", T0, TTL) == 1
    assert await store.claim_lease("B", "alive", T0 + TTL, TTL) == 1
    assert await store.owe("t1:answer:1", "A", "t1", "{}", T0)
    assert await store.owe("t2:answer:1", "B", "t2", "{}", T0)  # its owner sends it soon
    assert await store.owe("t3:answer:1", "D", "t3", "{}", T0)  # never claimed
    assert await store.owe("t1:answer:2", "A", "t1", "{}", T0)  # one entry per conversation
    assert await store.unowned_conversations(T0 + TTL) == [
        UnownedConversation("C", None, 0),  # a waiting message first
        UnownedConversation("A", "dead", 1),
        UnownedConversation("D", None, 0),
    ]
    await store.settle("t1:answer:1")
    await store.settle("t1:answer:2")
    keys = [u.conversation_key for u in await store.unowned_conversations(T0 + TTL)]
    assert keys == ["C", "D"]


async def test_interrupt_running_of_touches_one_conversation(store: Store) -> None:
    for conv, mid in (("A", "a1"), ("A", "a2"), ("B", "b1")):
        assert await store.journal_message(conv, mid, "ou", "oc", "hi", T0)
    for mid in ("a1", "b1"):
        assert await store.set_message_state(mid, MessageState.RUNNING, T0)
    assert await store.interrupt_running_of("A", T0 + 1) == 1
    states = {m.message_id: m.state for m in await store.unfinished_messages()}
    assert states == {
        "a1": MessageState.INTERRUPTED,
        "a2": MessageState.QUEUED,
        "b1": MessageState.RUNNING,
    }


async def test_taken_messages_keep_the_largest_fence_across_a_restart(
    store: Store, restart: Restart
) -> None:
    for mid in ("a1", "a2", "a3"):
        assert await store.journal_message("A", mid, "ou", "oc", "hi", T0)
    await store.take_messages(["a1", "a2"], 1)
    await store.take_messages(["a2"], 3)
    await store.take_messages(["a2", "unknown"], 2)  # a late, older owner's mark: ignored
    await store.take_messages([], 4)
    store = await restart()
    taken = {m.message_id: m.taken for m in await store.pending_messages("A")}
    assert taken == {"a1": 1, "a2": 3, "a3": 0}
    message = await store.message("a2")
    assert message is not None
    assert message.taken == 3


async def test_leases_survive_restart(store: Store, restart: Restart) -> None:
    assert await store.claim_lease("A", "i1", T0, TTL) == 1
    store = await restart()
    assert await store.lease_of("A", T0) == Lease("i1", 1, T0 + TTL)
    assert await store.claim_lease("A", "i2", T0, TTL) is None


async def test_heartbeat_upserts_and_instances_report_age(store: Store) -> None:
    assert await store.instances(T0) == []
    await store.heartbeat("i1", "e1", T0, "http://10.0.0.1:8081", {"version": "1", "turns": 2})
    await store.heartbeat("i0", "e9", T0 + 1)
    await store.heartbeat("i1", "e1", T0 + 5, "http://10.0.0.1:8081", {"turns": 3})
    i0, i1 = await store.instances(T0 + 7)
    assert (i0.instance_id, i0.epoch, i0.ops_url, i0.info, i0.age) == ("i0", "e9", "", {}, 6)
    assert (i1.instance_id, i1.epoch, i1.started_at, i1.heartbeat_at) == ("i1", "e1", T0, T0 + 5)
    assert (i1.ops_url, i1.info, i1.age) == ("http://10.0.0.1:8081", {"turns": 3}, 2)
    # A restart (a new epoch) starts afresh.
    await store.heartbeat("i1", "e2", T0 + 9)
    i1 = (await store.instances(T0 + 9))[1]
    assert (i1.epoch, i1.started_at, i1.ops_url, i1.info) == ("e2", T0 + 9, "", {})


async def test_an_empty_owner_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="owner"):
        await store.claim_lease("A", "", T0, TTL)


async def test_cluster_methods_need_an_open_store(store: Store) -> None:
    await store.close()
    with pytest.raises(StoreClosed):
        await store.claim_lease("A", "i1", T0, TTL)
    with pytest.raises(StoreClosed):
        await store.instances(T0)
