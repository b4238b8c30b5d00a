"""The `Store` contract, run against SqliteStore, PostgresStore and MemoryStore alike (see
conftest)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from bridge.store import (
    ApprovalStatus,
    MessageState,
    Schedule,
    ScheduleKind,
    SessionRecord,
    Store,
    StoreClosed,
    TurnOutcome,
    UnknownTurn,
)

Restart = Callable[[], Awaitable[Store]]
RETENTION = 1000.0  # matches conftest
T0 = 1_700_000_000.0


async def _journal(store: Store, conv: str, mid: str, now: float, text: str = "hi") -> bool:
    return await store.journal_message(conv, mid, "ou_alice", "oc_chat", text, now)


# -- 1. inbound dedup ----------------------------------------------------------------------


async def test_claim_event_dedups_redelivery_by_event_id(store: Store) -> None:
    assert await store.claim_event("ev1", "om1", T0)
    assert not await store.claim_event("ev1", "om1", T0 + 1)
    # A redelivered event id is a duplicate even if the payload's message id differs.
    assert not await store.claim_event("ev1", "om2", T0 + 2)
    assert await store.claim_event("ev2", "om2", T0 + 3)


async def test_claim_event_dedups_same_message_under_another_event_id(store: Store) -> None:
    assert await store.claim_event("ev1", "om1", T0)
    assert not await store.claim_event("ev2", "om1", T0 + 1)
    # The losing event id was not recorded: claiming it again with a fresh message works.
    assert await store.claim_event("ev2", "om9", T0 + 2)


async def test_claim_event_without_message_ids_do_not_collide(store: Store) -> None:
    assert await store.claim_event("card1", None, T0)
    assert await store.claim_event("card2", None, T0)
    assert not await store.claim_event("card1", None, T0)


async def test_claim_event_concurrent_claims_have_exactly_one_winner(store: Store) -> None:
    results = await asyncio.gather(*(store.claim_event("ev", "om", T0) for _ in range(20)))
    assert results.count(True) == 1


async def test_claims_survive_restart(store: Store, restart: Restart) -> None:
    assert await store.claim_event("ev1", "om1", T0)
    store = await restart()
    assert not await store.claim_event("ev1", None, T0 + 1)
    assert not await store.claim_event("ev2", "om1", T0 + 1)


async def test_a_users_private_chat_is_remembered_across_restarts(
    store: Store, restart: Restart
) -> None:
    assert await store.p2p_chat("ou_alice") is None
    await store.remember_p2p_chat("ou_alice", "oc_1", T0)
    await store.remember_p2p_chat("ou_bob", "oc_2", T0)
    await store.remember_p2p_chat("ou_alice", "oc_3", T0 + 1)  # a later one replaces it
    store = await restart()
    assert [await store.p2p_chat(u) for u in ("ou_alice", "ou_bob", "ou_carol")] == [
        "oc_3",
        "oc_2",
        None,
    ]


# -- 2. inbound journal --------------------------------------------------------------------


async def test_journal_keeps_arrival_order_across_conversations(store: Store) -> None:
    # Arrival order is journal order, even when the clock steps back.
    assert await _journal(store, "A", "m1", T0 + 5)
    assert await _journal(store, "B", "m2", T0 + 1)
    assert await _journal(store, "A", "m3", T0 + 2)

    assert [m.message_id for m in await store.unfinished_messages()] == ["m1", "m2", "m3"]
    assert [m.message_id for m in await store.pending_messages("A")] == ["m1", "m3"]
    assert [m.message_id for m in await store.pending_messages("B")] == ["m2"]
    assert await store.pending_messages("C") == []


async def test_journal_records_the_message_and_repeat_is_ignored(store: Store) -> None:
    assert await store.journal_message("A", "m1", "ou_alice", "oc_1", "修一下这个 bug", T0)
    assert not await store.journal_message("A", "m1", "ou_bob", "oc_2", "other", T0 + 1)
    m = await store.message("m1")
    assert m is not None
    assert (m.conversation_key, m.sender_open_id, m.chat_id) == ("A", "ou_alice", "oc_1")
    assert m.text == "修一下这个 bug"
    assert m.state is MessageState.QUEUED
    assert (m.received_at, m.updated_at) == (T0, T0)
    assert await store.message("nope") is None


async def test_journaled_text_is_kept_out_of_repr(store: Store) -> None:
    await _journal(store, "A", "m1", T0, text="secret prompt")
    m = await store.message("m1")
    assert m is not None
    assert "secret prompt" not in repr(m)
    assert "m1" in repr(m)


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ([MessageState.RUNNING, MessageState.DONE], [True, True]),
        ([MessageState.RUNNING, MessageState.INTERRUPTED, MessageState.RUNNING], [True] * 3),
        ([MessageState.DONE], [True]),  # a queued message consumed as a reply, or dropped
        ([MessageState.INTERRUPTED, MessageState.DONE], [True, True]),
        ([MessageState.DONE, MessageState.RUNNING], [True, False]),  # done is terminal
        ([MessageState.DONE, MessageState.DONE], [True, False]),
        ([MessageState.QUEUED], [False]),  # nothing goes back to queued
        ([MessageState.RUNNING, MessageState.RUNNING], [True, False]),
    ],
)
async def test_message_state_transitions(
    store: Store, path: list[MessageState], allowed: list[bool]
) -> None:
    await _journal(store, "A", "m1", T0)
    got = [await store.set_message_state("m1", s, T0 + i + 1) for i, s in enumerate(path)]
    assert got == allowed
    last_ok = max(i for i, ok in enumerate([True, *allowed]) if ok)  # 0 means "still queued"
    m = await store.message("m1")
    assert m is not None
    assert m.state is ([MessageState.QUEUED, *path][last_ok])
    assert m.updated_at == T0 + last_ok


async def test_set_state_of_unknown_message_is_false(store: Store) -> None:
    assert not await store.set_message_state("nope", MessageState.RUNNING, T0)


async def test_done_messages_leave_the_pending_lists(store: Store) -> None:
    for i in range(3):
        await _journal(store, "A", f"m{i}", T0 + i)
    await store.set_message_state("m0", MessageState.RUNNING, T0 + 3)
    await store.set_message_state("m0", MessageState.DONE, T0 + 4)
    await store.set_message_state("m1", MessageState.RUNNING, T0 + 5)
    pending = await store.pending_messages("A")
    assert [(m.message_id, m.state) for m in pending] == [
        ("m1", MessageState.RUNNING),
        ("m2", MessageState.QUEUED),
    ]


async def test_restart_recovery_finds_cut_turn_and_queue_behind_it(
    store: Store, restart: Restart
) -> None:
    await _journal(store, "A", "a1", T0)
    await _journal(store, "B", "b1", T0 + 1)
    await _journal(store, "A", "a2", T0 + 2)
    await _journal(store, "A", "a3", T0 + 3)
    await store.bind_session("A", "sess-A", T0)
    assert await store.set_message_state("a1", MessageState.RUNNING, T0 + 4)
    assert await store.start_turn("t-a1", "A", "a1", T0 + 4)
    assert await store.save_approval("p1", "t-a1", "A", "om_card", "ou_alice", T0 + 5)
    await store.trace("t-a1", "prompt_sent", "", T0 + 4)

    store = await restart()  # the process died here

    assert await store.interrupt_running_messages(T0 + 100) == 1
    assert await store.interrupt_running_messages(T0 + 100) == 0
    unfinished = await store.unfinished_messages()
    assert [(m.message_id, m.state) for m in unfinished] == [
        ("a1", MessageState.INTERRUPTED),
        ("b1", MessageState.QUEUED),
        ("a2", MessageState.QUEUED),
        ("a3", MessageState.QUEUED),
    ]
    assert unfinished[0].text == "hi"  # enough to rerun or report the turn
    assert [t.turn_id for t in await store.running_turns()] == ["t-a1"]
    assert [a.request_id for a in await store.open_approvals()] == ["p1"]
    assert await store.session_for("A") == "sess-A"
    assert [e.kind for e in await store.trace_for("t-a1")] == ["prompt_sent"]

    assert await store.finish_turn("t-a1", TurnOutcome.INTERRUPTED, T0 + 101)
    assert await store.resolve_approval("p1", ApprovalStatus.EXPIRED, None, T0 + 101)
    assert await store.running_turns() == []
    assert await store.open_approvals() == []


# -- 3. session bindings -------------------------------------------------------------------


async def test_bindings_bind_rebind_unbind(store: Store, restart: Restart) -> None:
    assert await store.session_for("A") is None
    await store.bind_session("A", "s1", T0)
    await store.bind_session("B", "s2", T0)
    await store.bind_session("A", "s3", T0 + 1)  # rebinding replaces
    assert await store.session_for("A") == "s3"

    store = await restart()
    assert await store.session_for("A") == "s3"
    assert await store.session_for("B") == "s2"
    assert await store.unbind("A")
    assert not await store.unbind("A")
    assert await store.session_for("A") is None
    assert await store.session_for("B") == "s2"


# -- 4. turns ------------------------------------------------------------------------------


async def test_first_terminal_wins_for_turns(store: Store) -> None:
    assert await store.start_turn("t1", "A", "m1", T0)
    assert not await store.start_turn("t1", "B", "m2", T0 + 1)  # id taken, nothing changes
    assert await store.finish_turn("t1", TurnOutcome.CANCELLED, T0 + 2)
    assert not await store.finish_turn("t1", TurnOutcome.COMPLETED, T0 + 3)
    assert not await store.finish_turn("t1", TurnOutcome.CANCELLED, T0 + 4)
    t = await store.turn("t1")
    assert t is not None
    assert (t.conversation_key, t.message_id, t.started_at) == ("A", "m1", T0)
    assert (t.outcome, t.finished_at) == (TurnOutcome.CANCELLED, T0 + 2)


async def test_concurrent_terminals_have_exactly_one_winner(store: Store) -> None:
    await store.start_turn("t1", "A", "m1", T0)
    outcomes = [TurnOutcome.COMPLETED, TurnOutcome.FAILED, TurnOutcome.TIMED_OUT] * 5
    results = await asyncio.gather(*(store.finish_turn("t1", o, T0 + 1) for o in outcomes))
    assert results.count(True) == 1
    t = await store.turn("t1")
    assert t is not None
    assert t.outcome is outcomes[results.index(True)]


async def test_begin_and_end_turn_move_the_message_with_the_turn(store: Store) -> None:
    await _journal(store, "A", "m1", T0)
    assert await store.begin_turn("m1", "A", "m1", T0 + 1)
    message = await store.message("m1")
    assert message is not None
    assert message.state is MessageState.RUNNING
    assert [t.turn_id for t in await store.running_turns()] == ["m1"]
    # A replay after a restart: the turn exists (False), the message runs again.
    await store.interrupt_running_messages(T0 + 2)
    assert not await store.begin_turn("m1", "A", "m1", T0 + 3)
    message = await store.message("m1")
    assert message is not None
    assert message.state is MessageState.RUNNING
    assert await store.end_turn("m1", "m1", TurnOutcome.COMPLETED, T0 + 4)
    assert not await store.end_turn("m1", "m1", TurnOutcome.FAILED, T0 + 5)  # first wins
    turn, message = await store.turn("m1"), await store.message("m1")
    assert turn is not None
    assert (turn.outcome, turn.finished_at) == (TurnOutcome.COMPLETED, T0 + 4)
    assert message is not None
    assert (message.state, message.updated_at) == (MessageState.DONE, T0 + 4)
    assert await store.running_turns() == []


async def test_concurrent_end_turns_have_exactly_one_winner(store: Store) -> None:
    await _journal(store, "A", "m1", T0)
    await store.begin_turn("m1", "A", "m1", T0)
    outcomes = [TurnOutcome.COMPLETED, TurnOutcome.FAILED, TurnOutcome.CANCELLED] * 4
    results = await asyncio.gather(*(store.end_turn("m1", "m1", o, T0 + 1) for o in outcomes))
    assert results.count(True) == 1
    turn = await store.turn("m1")
    assert turn is not None
    assert turn.outcome is outcomes[results.index(True)]


async def test_finish_unknown_turn_is_false(store: Store) -> None:
    assert not await store.finish_turn("nope", TurnOutcome.COMPLETED, T0)
    assert await store.turn("nope") is None


async def test_running_turns_in_start_order(store: Store) -> None:
    for i, tid in enumerate(["t3", "t1", "t2"]):
        await store.start_turn(tid, f"conv{i}", f"m{i}", T0 + i)
    await store.finish_turn("t1", TurnOutcome.COMPLETED, T0 + 9)
    running = await store.running_turns()
    assert [t.turn_id for t in running] == ["t3", "t2"]
    assert all(t.outcome is None and t.finished_at is None for t in running)


async def test_a_turn_is_marked_prompted_once(store: Store) -> None:
    """Issue 35: recovery tells a cut turn's user only if its prompt went out."""
    await store.start_turn("t1", "A", "m1", T0)
    assert (await store.running_turns())[0].prompted_at is None
    assert await store.mark_prompted("t1", T0 + 1)
    assert not await store.mark_prompted("t1", T0 + 2)  # the first mark stays
    assert not await store.mark_prompted("nope", T0)
    assert (await store.running_turns())[0].prompted_at == T0 + 1
    turn = await store.turn("t1")
    assert turn is not None
    assert turn.prompted_at == T0 + 1


async def test_outcome_must_be_a_known_value(store: Store) -> None:
    await store.start_turn("t1", "A", "m1", T0)
    with pytest.raises(ValueError, match="done"):
        await store.finish_turn("t1", "done", T0)  # type: ignore[arg-type]
    assert await store.finish_turn("t1", "completed", T0)  # type: ignore[arg-type]


# -- 5. trace ------------------------------------------------------------------------------


async def test_trace_is_append_only_in_order(store: Store) -> None:
    await store.start_turn("t1", "A", "m1", T0)
    await store.start_turn("t2", "A", "m2", T0)
    await store.trace("t1", "prompt_sent", "", T0)
    await store.trace("t2", "prompt_sent", "", T0)
    await store.trace("t1", "tool_call", "Read file", T0 + 2)
    await store.trace("t1", "tool_call", "Read file", T0 + 1)  # same content twice is kept
    entries = await store.trace_for("t1")
    assert [(e.kind, e.detail, e.at) for e in entries] == [
        ("prompt_sent", "", T0),
        ("tool_call", "Read file", T0 + 2),
        ("tool_call", "Read file", T0 + 1),
    ]
    assert all(e.turn_id == "t1" for e in entries)
    assert [e.seq for e in entries] == sorted(e.seq for e in entries)
    assert len(await store.trace_for("t2")) == 1
    assert await store.trace_for("nope") == []


async def test_trace_for_unknown_turn_raises(store: Store) -> None:
    with pytest.raises(UnknownTurn):
        await store.trace("nope", "x", "", T0)


async def test_trace_many_appends_in_order_and_skips_unknown_turns(store: Store) -> None:
    await store.start_turn("t1", "A", "m1", T0)
    await store.trace("t1", "start", "", T0)
    await store.trace_many(
        [
            ("t1", "prompt_sent", "", T0 + 1),
            ("nope", "line", "access.refused", T0 + 1),  # a line outside any turn
            ("t1", "end", "12 chars", T0 + 2),
        ]
    )
    entries = await store.trace_for("t1")
    assert [(e.kind, e.detail, e.at) for e in entries] == [
        ("start", "", T0),
        ("prompt_sent", "", T0 + 1),
        ("end", "12 chars", T0 + 2),
    ]
    assert await store.trace_for("nope") == []


async def test_preferences_are_kept_per_conversation_and_replaced(store: Store) -> None:
    assert await store.preferences("A") == {}
    await store.set_preference("A", "mode", "plan", T0)
    await store.set_preference("A", "config:model", "deep", T0)
    await store.set_preference("B", "mode", "yolo", T0)
    await store.set_preference("A", "mode", "default", T0 + 1)
    assert await store.preferences("A") == {"mode": "default", "config:model": "deep"}
    assert await store.preferences("B") == {"mode": "yolo"}


async def test_one_preference_is_read_across_conversations(store: Store) -> None:
    assert await store.preference_everywhere("ops:display_name") == {}
    await store.set_preference("A", "ops:display_name", "release chat", T0)
    await store.set_preference("B", "mode", "yolo", T0)
    await store.set_preference("C", "ops:display_name", "old", T0)
    await store.set_preference("C", "ops:display_name", "", T0 + 1)  # cleared: kept as ""
    assert await store.preference_everywhere("ops:display_name") == {
        "A": "release chat",
        "C": "",
    }


async def test_sessions_are_listed_newest_activity_first_and_keep_their_title(
    store: Store,
) -> None:
    def record(sid: str, title: str, started: float, active: float) -> SessionRecord:
        return SessionRecord("A", sid, "claude", "/srv/app", title, started, active)

    assert await store.sessions_of("A") == []
    await store.note_session(record("s1", "", T0, T0))
    await store.note_session(record("s2", "Fix the build", T0 + 1, T0 + 1))
    await store.note_session(record("s1", "Refactor", T0 + 5, T0 + 5))  # newer activity
    await store.note_session(record("s2", "", T0 + 2, T0 + 2))  # no title: keeps its own
    await store.note_session(SessionRecord("B", "s9", "codex", "/srv", "", T0, T0 + 9))
    listed = await store.sessions_of("A")
    assert [(r.session_id, r.title, r.started_at, r.active_at) for r in listed] == [
        ("s1", "Refactor", T0, T0 + 5),
        ("s2", "Fix the build", T0 + 1, T0 + 2),
    ]
    assert [r.session_id for r in await store.sessions_of("A", limit=1)] == ["s1"]
    await store.note_session(record("s1", "", T0 + 3, T0 + 3))  # older activity: kept
    assert (await store.sessions_of("A"))[0].active_at == T0 + 5


# -- 6. approvals --------------------------------------------------------------------------


async def test_first_decision_wins_for_approvals(store: Store) -> None:
    await store.start_turn("t1", "A", "m1", T0)
    assert await store.save_approval("p1", "t1", "A", "om_card", "ou_alice", T0)
    assert not await store.save_approval("p1", "t1", "B", "om_other", "ou_bob", T0 + 1)
    a = await store.approval("p1")
    assert a is not None
    assert (a.status, a.decided_by, a.decided_at) == (ApprovalStatus.OPEN, None, None)
    assert (a.turn_id, a.conversation_key, a.card_message_id) == ("t1", "A", "om_card")
    assert (a.requester_open_id, a.created_at) == ("ou_alice", T0)

    assert await store.resolve_approval("p1", ApprovalStatus.ALLOWED_ONCE, "ou_alice", T0 + 2)
    assert not await store.resolve_approval("p1", ApprovalStatus.REJECTED, "ou_bob", T0 + 3)
    assert not await store.resolve_approval("p1", ApprovalStatus.EXPIRED, None, T0 + 4)
    a = await store.approval("p1")
    assert a is not None
    assert (a.status, a.decided_by, a.decided_at) == (
        ApprovalStatus.ALLOWED_ONCE,
        "ou_alice",
        T0 + 2,
    )


async def test_concurrent_decisions_have_exactly_one_winner(store: Store) -> None:
    await store.start_turn("t1", "A", "m1", T0)
    await store.save_approval("p1", "t1", "A", "om_card", "ou_alice", T0)
    results = await asyncio.gather(
        *(
            store.resolve_approval("p1", ApprovalStatus.REJECTED, f"ou_{i}", T0 + 1)
            for i in range(10)
        )
    )
    assert results.count(True) == 1
    a = await store.approval("p1")
    assert a is not None
    assert a.decided_by == f"ou_{results.index(True)}"


async def test_approval_edge_cases(store: Store) -> None:
    assert not await store.resolve_approval("nope", ApprovalStatus.REJECTED, "ou_a", T0)
    assert await store.approval("nope") is None
    with pytest.raises(UnknownTurn):
        await store.save_approval("p1", "no-turn", "A", "om", "ou_a", T0)
    await store.start_turn("t1", "A", "m1", T0)
    await store.save_approval("p1", "t1", "A", "om", "ou_a", T0)
    with pytest.raises(ValueError, match="open"):
        await store.resolve_approval("p1", ApprovalStatus.OPEN, "ou_a", T0)
    assert (await store.approval("p1")) is not None


async def test_open_approvals_in_creation_order(store: Store) -> None:
    await store.start_turn("t1", "A", "m1", T0)
    for rid in ["p3", "p1", "p2"]:
        await store.save_approval(rid, "t1", "A", f"om_{rid}", "ou_a", T0)
    await store.resolve_approval("p1", ApprovalStatus.ALLOWED_ALWAYS, "ou_a", T0 + 1)
    assert [a.request_id for a in await store.open_approvals()] == ["p3", "p2"]


# -- 7. outbox -----------------------------------------------------------------------------


async def test_outbox_marks(store: Store, restart: Restart) -> None:
    assert await store.sent("k1") is None
    assert await store.mark_sent("k1", ["om_1", "om_2"], T0)
    assert not await store.mark_sent("k1", ["om_3"], T0 + 1)  # first mark wins
    assert await store.mark_sent("k-empty", [], T0)
    store = await restart()
    assert await store.sent("k1") == ["om_1", "om_2"]
    assert await store.sent("k-empty") == []


async def test_end_turn_writes_the_end_signals_mark_with_it(store: Store, restart: Restart) -> None:
    await _journal(store, "A", "m1", T0)
    await store.begin_turn("m1", "A", "m1", T0)
    await store.mark_sent("m1:end-old", ["om_0"], T0)
    assert await store.end_turn(
        "m1", "m1", TurnOutcome.COMPLETED, T0 + 1, sent=("m1:end", ["om_9"])
    )
    # The mark is written even when the turn had ended already; the first mark still wins.
    assert not await store.end_turn(
        "m1", "m1", TurnOutcome.FAILED, T0 + 2, sent=("m1:end-old", ["om_x"])
    )
    store = await restart()
    assert await store.sent("m1:end") == ["om_9"]
    assert await store.sent("m1:end-old") == ["om_0"]
    turn = await store.turn("m1")
    assert turn is not None
    assert turn.outcome is TurnOutcome.COMPLETED


async def test_sent_returns_a_fresh_list(store: Store) -> None:
    ids = ["om_1"]
    await store.mark_sent("k1", ids, T0)
    ids.append("om_x")
    got = await store.sent("k1")
    assert got == ["om_1"]
    assert got is not None
    got.append("om_y")
    assert await store.sent("k1") == ["om_1"]


# -- prune ---------------------------------------------------------------------------------


async def test_prune_drops_only_old_finished_records(store: Store) -> None:
    old, fresh = T0, T0 + 500  # the retention is 1000 s; we prune at T0 + 1000.5
    now = T0 + RETENTION + 0.5

    await store.claim_event("ev-old", "om-old", old)
    await store.claim_event("ev-fresh", "om-fresh", fresh)

    await _journal(store, "A", "m-done-old", old)
    await store.set_message_state("m-done-old", MessageState.DONE, old)
    await _journal(store, "A", "m-done-fresh", old)
    await store.set_message_state("m-done-fresh", MessageState.DONE, fresh)
    await _journal(store, "A", "m-queued-old", old)  # unfinished: never pruned
    await _journal(store, "A", "m-interrupted-old", old)
    await store.set_message_state("m-interrupted-old", MessageState.INTERRUPTED, old)

    await store.start_turn("t-old", "A", "m-done-old", old)
    await store.trace("t-old", "prompt_sent", "", old)
    await store.save_approval("p-old-open", "t-old", "A", "om", "ou_a", old)
    await store.finish_turn("t-old", TurnOutcome.COMPLETED, old)
    await store.start_turn("t-fresh", "A", "m-done-fresh", old)
    await store.finish_turn("t-fresh", TurnOutcome.COMPLETED, fresh)
    await store.start_turn("t-running", "A", "m-queued-old", old)
    await store.trace("t-running", "prompt_sent", "", old)
    await store.save_approval("p-decided-old", "t-running", "A", "om", "ou_a", old)
    await store.resolve_approval("p-decided-old", ApprovalStatus.REJECTED, "ou_a", old)
    await store.save_approval("p-open-old", "t-running", "A", "om", "ou_a", old)

    await store.mark_sent("k-old", ["om_1"], old)
    await store.mark_sent("k-fresh", ["om_2"], fresh)
    await store.bind_session("A", "s1", old)

    # events 1 + messages 1 + decided approvals 1 + finished turns 1 + marks 1
    assert await store.prune(now) == 5
    assert await store.prune(now) == 0

    assert await store.claim_event("ev-old", "om-old", now)  # forgotten: claimable again
    assert not await store.claim_event("ev-fresh", None, now)
    assert not await store.claim_event("ev-x", "om-fresh", now)

    assert await store.message("m-done-old") is None
    for mid in ("m-done-fresh", "m-queued-old", "m-interrupted-old"):
        assert await store.message(mid) is not None

    assert await store.turn("t-old") is None
    assert await store.trace_for("t-old") == []  # went with its turn
    assert await store.approval("p-old-open") is None  # went with its turn
    assert await store.turn("t-fresh") is not None
    assert await store.turn("t-running") is not None
    assert len(await store.trace_for("t-running")) == 1
    assert await store.approval("p-decided-old") is None
    assert await store.approval("p-open-old") is not None

    assert await store.sent("k-old") is None
    assert await store.sent("k-fresh") == ["om_2"]
    assert await store.session_for("A") == "s1"  # bindings are never pruned


async def test_prune_keeps_records_exactly_at_the_cutoff(store: Store) -> None:
    await store.claim_event("ev", "om", T0)
    await store.mark_sent("k", ["om_1"], T0)
    assert await store.prune(T0 + RETENTION) == 0
    assert await store.prune(T0 + RETENTION + 0.001) == 2


# -- lifecycle -----------------------------------------------------------------------------


async def test_closed_store_refuses_use_and_can_reopen(store: Store) -> None:
    await store.open()  # idempotent
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreClosed):
        await store.claim_event("ev", None, T0)
    with pytest.raises(StoreClosed):
        await store.set_message_state("m", MessageState.QUEUED, T0)
    with pytest.raises(StoreClosed):
        await store.sent("k")
    async with store as same:
        assert same is store
        assert await store.claim_event("ev", None, T0)
    with pytest.raises(StoreClosed):
        await store.running_turns()


# -- 8. schedules --------------------------------------------------------------------------


async def _every(store: Store, conv: str = "oc_a", *, config_key: str = "") -> Schedule | None:
    return await store.add_schedule(
        conv,
        conv,
        "ou_alice",
        ScheduleKind.EVERY,
        3600.0,
        "check the build",
        T0 + 3600,
        T0,
        anchor_message_id="om_cmd",
        config_key=config_key,
    )


async def test_schedules_are_numbered_listed_per_conversation_and_survive_restart(
    store: Store, restart: Restart
) -> None:
    first = await _every(store)
    assert first is not None
    assert first.schedule_id >= 1
    assert first.kind is ScheduleKind.EVERY
    assert first.every_seconds == 3600.0
    assert (first.prompt, first.next_due_at, first.created_at) == ("check the build", T0 + 3600, T0)
    assert (first.anchor_message_id, first.config_key, first.last_run_at) == ("om_cmd", "", None)
    once = await store.add_schedule(
        "oc_b", "oc_b", "ou_bob", ScheduleKind.AT, None, "deploy", T0 + 60, T0
    )
    assert once is not None
    assert once.schedule_id > first.schedule_id
    assert once.every_seconds is None

    store = await restart()
    assert [s.schedule_id for s in await store.schedules()] == [
        first.schedule_id,
        once.schedule_id,
    ]
    assert await store.schedules("oc_a") == [first]
    assert await store.schedule(once.schedule_id) == once
    assert await store.schedule(999) is None
    assert "check the build" not in repr(first)  # a prompt is never logged


async def test_schedule_runs_and_skips_are_recorded(store: Store) -> None:
    made = await _every(store)
    assert made is not None
    sid = made.schedule_id
    assert await store.note_schedule_skip(sid, "running", T0 + 3600)
    assert await store.note_schedule_run(sid, T0 + 3600, T0 + 3700, T0 + 7200)
    got = await store.schedule(sid)
    assert got is not None
    assert (got.last_skip_at, got.last_skip_reason) == (T0 + 3600, "running")
    assert (got.last_run_at, got.next_due_at) == (T0 + 3700, T0 + 7200)
    assert not await store.note_schedule_run(999, T0, T0, T0)


async def test_an_occurrence_is_recorded_as_run_once(store: Store) -> None:
    """Issue 34: a second writer of the same slot (a stale decision, another instance)
    finds it taken and writes nothing; the run it would have posted does not happen."""
    made = await _every(store)
    assert made is not None
    sid, slot = made.schedule_id, made.next_due_at
    assert await store.note_schedule_run(sid, slot, slot + 1, slot + 3600)
    assert not await store.note_schedule_run(sid, slot, slot + 2, slot + 3600)
    got = await store.schedule(sid)
    assert got is not None
    assert (got.last_run_at, got.next_due_at) == (slot + 1, slot + 3600)
    assert await store.note_schedule_run(sid, slot + 3600, slot + 3601, slot + 7200)
    assert not await store.note_schedule_skip(999, "running", T0)


async def test_removed_schedules_are_gone_and_their_numbers_not_reused(store: Store) -> None:
    first = await _every(store)
    assert first is not None
    assert await store.remove_schedule(first.schedule_id)
    assert not await store.remove_schedule(first.schedule_id)
    assert await store.schedules() == []
    second = await _every(store)
    assert second is not None
    assert second.schedule_id > first.schedule_id


async def test_an_operator_schedule_is_recorded_once_by_its_key(store: Store) -> None:
    first = await _every(store, config_key="cfg:1")
    assert first is not None
    assert first.config_key == "cfg:1"
    assert await _every(store, config_key="cfg:1") is None
    assert len(await store.schedules()) == 1


async def test_prune_keeps_schedules(store: Store) -> None:
    made = await _every(store)
    await store.prune(T0 + 10 * RETENTION)
    assert await store.schedules() == [made]


async def test_prune_drops_instances_silent_past_the_retention(store: Store) -> None:
    await store.heartbeat("gone-1a2b3c", "e1", T0)
    await store.heartbeat("alive", "e2", T0 + 500)
    assert await store.prune(T0 + RETENTION + 0.5) >= 1
    assert [i.instance_id for i in await store.instances(T0 + RETENTION + 1)] == ["alive"]
