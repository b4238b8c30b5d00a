"""Property tests over seeded random conversations (hypothesis is not installed)."""

from __future__ import annotations

from collections import Counter

import pytest

from bridge.core import presence
from bridge.core.effects import (
    AnswerQuestion,
    Dropped,
    PostApprovalCard,
    PostQuestion,
    PostText,
    RecordTerminal,
    RelayAgentText,
)
from bridge.core.inputs import Posted, TurnNotStarted, UserMessage
from bridge.core.state import RUNNING_STATES
from tests.unit.core.core_chaos import ChaosRun
from tests.unit.core.core_driver import T


@pytest.fixture
def runs(chaos_runs: list[ChaosRun]) -> list[ChaosRun]:
    return chaos_runs


def test_no_running_line_unless_the_assistant_is_moving(runs: list[ChaosRun]) -> None:
    """Hard rule 1: no heartbeat / hint while waiting for the user, recovering, or after the end."""
    for run in runs:
        for s in run.steps:
            for e in s.effects:
                if isinstance(e, PostText) and e.key in {
                    "presence.heartbeat",
                    "presence.running_hint",
                }:
                    assert s.before.state in RUNNING_STATES, (s.before.state, s.event)
                    assert s.after.state in RUNNING_STATES, (s.after.state, s.event)


def test_every_user_message_gets_exactly_one_end_signal(runs: list[ChaosRun]) -> None:
    """Hard rule 3 (the ack is the receiver's): answers and duplicates belong to another turn."""
    for run in runs:
        ends: Counter[str] = Counter()
        owed: set[str] = set()
        for s in run.steps:
            if isinstance(s.event, UserMessage):
                answered = any(isinstance(e, AnswerQuestion) for e in s.effects)
                dropped = any(isinstance(e, Dropped) for e in s.effects)
                if not answered and not dropped:
                    owed.add(s.event.message_id)
            let_go = isinstance(s.event, TurnNotStarted) and s.after.turn is None
            if let_go and s.before.turn is not None and not s.before.turn.terminal:
                # Handed on, still journaled: whoever runs the conversation next ends it.
                owed.discard(s.before.turn.message_id)
                owed.difference_update(q.message_id for q in s.before.queue)
            for e in s.effects:
                if isinstance(e, PostText | RelayAgentText) and e.final:
                    ends[e.reply_to] += 1
        assert set(ends) == owed
        assert all(count == 1 for count in ends.values()), ends


def test_nothing_is_posted_for_a_turn_after_its_end_signal(runs: list[ChaosRun]) -> None:
    for run in runs:
        ended: set[str] = set()
        for s in run.steps:
            for e in s.effects:
                if isinstance(e, PostText | RelayAgentText | PostApprovalCard | PostQuestion):
                    assert e.reply_to not in ended, (e, s.event)
                    if isinstance(e, PostText | RelayAgentText) and e.final:
                        ended.add(e.reply_to)


def test_one_terminal_per_turn_recorded_right_after_its_end_signal(runs: list[ChaosRun]) -> None:
    for run in runs:
        recorded: Counter[str] = Counter()
        for s in run.steps:
            for i, e in enumerate(s.effects):
                if isinstance(e, RecordTerminal):
                    recorded[e.turn_id] += 1
                    before = s.effects[i - 1]
                    assert isinstance(before, PostText | RelayAgentText)
                    assert before.final
                    assert before.idempotency_key == f"{e.turn_id}:end"
        assert all(count == 1 for count in recorded.values()), recorded


def test_idempotency_keys_are_never_reused(runs: list[ChaosRun]) -> None:
    """Hard rule 4: one key per post, so the Feishu uuid dedups retries and nothing else."""
    for run in runs:
        seen: list[str] = []
        for s in run.steps:
            for e in s.effects:
                if isinstance(e, PostText | RelayAgentText | PostApprovalCard | PostQuestion):
                    seen.append(e.idempotency_key)
        assert len(seen) == len(set(seen))


def test_timers_always_mirror_the_deadlines_of_the_state(runs: list[ChaosRun]) -> None:
    for run in runs:
        for s in run.steps:
            assert dict(s.after.timers) == presence.deadlines(s.after, T)


def test_a_turn_is_either_running_waiting_recovering_stale_or_finishing(
    runs: list[ChaosRun],
) -> None:
    for run in runs:
        for s in run.steps:
            conv = s.after
            assert (conv.turn is None) == (conv.state.value in {"idle", "closed"})
            if conv.approvals:
                assert conv.state.value == "waiting_approval"
            assert not conv.queue or conv.turn is not None


def test_no_request_times_out_before_its_card_was_shown_for_the_whole_timeout(
    runs: list[ChaosRun],
) -> None:
    """A card waiting for its turn (the budget, an outage) has asked nobody yet: the
    reminder comes half the timeout after a card was shown, the timeout a whole one after."""
    half, whole = T.approval_timeout / 2, T.approval_timeout
    waits = {
        "presence.approval_reminder": half,
        "presence.reply_reminder": half,
        "presence.approval_timed_out": whole,
        "presence.reply_timed_out": whole,
    }
    checked = 0
    for run in runs:
        shown: dict[str, float] = {}  # card key -> when Feishu took it
        for s in run.steps:
            if isinstance(s.event, Posted):
                shown.setdefault(s.event.idempotency_key, s.now)
            for e in s.effects:
                if isinstance(e, PostText) and e.key in waits:
                    asking = [*s.before.approvals, *filter(None, [s.before.question])]
                    since = [shown[r.card_key] for r in asking if r.card_key in shown]
                    assert since, (e.key, "no card shown", s.event)
                    assert s.now >= min(since) + waits[e.key], (e.key, s.now, since)
                    checked += 1
    assert checked > 0  # the runs do reach reminders and timeouts
