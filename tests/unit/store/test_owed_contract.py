"""Owed posts (schema 8): recorded before a post is tried, kept across a restart in the order
they were owed, and settled by the post's outbox mark, whichever call writes it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bridge.store import Store, TurnOutcome

T0 = 1_700_000_000.0
Restart = Callable[[], Awaitable[Store]]


async def test_owed_posts_survive_a_restart_in_the_order_they_were_owed(
    store: Store, restart: Restart
) -> None:
    assert await store.owe("t1:answer:3", "A", "t1", '{"text": "答案"}', T0)
    assert await store.owe("t2:hint:1", "B", "t2", "{}", T0 + 1)
    assert await store.owe("A:refused", "A", None, "{}", T0 + 2)
    assert not await store.owe("t1:answer:3", "A", "t1", "{}", T0 + 3)  # first record wins
    store = await restart()
    owed = await store.owed()
    assert [p.idempotency_key for p in owed] == ["t1:answer:3", "t2:hint:1", "A:refused"]
    assert owed[0].payload == '{"text": "答案"}'
    assert (owed[0].conversation_key, owed[0].turn_id, owed[0].owed_at) == ("A", "t1", T0)
    assert owed[2].turn_id is None
    assert "答案" not in repr(owed[0])  # user text stays out of logs


async def test_a_mark_settles_its_post_whichever_call_writes_it(store: Store) -> None:
    await store.journal_message("A", "t1", "ou_1", "oc_1", "hi", T0)
    await store.begin_turn("t1", "A", "t1", T0)
    for key in ("t1:hint:1", "t1:end:2", "t1:gone:3", "t1:later:4"):
        await store.owe(key, "A", "t1", "{}", T0)
    await store.mark_sent("t1:hint:1", ["om_1"], T0 + 1)
    await store.end_turn("t1", "t1", TurnOutcome.COMPLETED, T0 + 2, sent=("t1:end:2", ["om_2"]))
    await store.settle("t1:gone:3")
    await store.settle("never-owed")  # nothing to settle: no error
    assert [p.idempotency_key for p in await store.owed()] == ["t1:later:4"]


async def test_a_post_already_marked_is_not_owed_again(store: Store) -> None:
    await store.mark_sent("t1:answer:2", ["om_1"], T0)
    assert not await store.owe("t1:answer:2", "A", "t1", "{}", T0 + 1)
    assert await store.owed() == []
