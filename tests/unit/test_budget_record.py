"""The call budget's record of what it spent of Feishu's minutes, as a restart reads it
(bridge/feishu/budget_record.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.core.delivery import Lane
from bridge.feishu.budget import SEND, BudgetPolicy, CallBudget
from bridge.feishu.budget_record import BudgetRecord


@dataclass
class Clocks:
    """A process's monotonic time (`now`) and the wall clock, moved by hand."""

    mono: float
    at: float

    def now(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.at

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        raise AssertionError("not called")


REACTION = "POST im/v1/messages/:id/reactions"


def test_a_first_start_finds_no_record_and_nothing_spent(tmp_path: Path) -> None:
    spent = BudgetRecord(tmp_path / "call-budget.json", Clocks(5.0, 1000.0)).load()
    assert (dict(spent.by_api), spent.unseen_since) == ({}, None)


def test_a_killed_bridge_leaves_its_grants_and_the_time_since_its_record_unseen(
    tmp_path: Path,
) -> None:
    """Grants are kept by whole wall-clock seconds, each until its second's end; the next
    process (another monotonic time) finds them at the same wall-clock time, and the 3 s
    since the record as unseen."""
    path = tmp_path / "call-budget.json"
    first = Clocks(mono=1000.0, at=5000.0)
    BudgetRecord(path, first).save({SEND: [990.2, 990.4, 995.7], REACTION: [999.9]})
    second = Clocks(mono=20.0, at=5003.0)
    spent = BudgetRecord(path, second).load()
    # 990.2 is wall 4990.2: counted until 4991, 12 s before the second's 5003.
    assert dict(spent.by_api) == {SEND: [8.0, 8.0, 13.0], REACTION: [17.0]}
    assert spent.unseen_since == 17.0


def test_a_clean_stop_leaves_nothing_unseen(tmp_path: Path) -> None:
    path = tmp_path / "call-budget.json"
    BudgetRecord(path, Clocks(100.0, 5000.0)).save({SEND: [99.5]}, closed=True)
    spent = BudgetRecord(path, Clocks(7.0, 5001.5)).load()
    assert dict(spent.by_api) == {SEND: [5.5]}
    assert spent.unseen_since is None


def test_a_successor_keeps_its_predecessors_minute(tmp_path: Path) -> None:
    """End to end: a budget that spent its burst, recorded, and the budget after it on
    the record: it has no burst left, only what the minute's room allows."""
    path = tmp_path / "call-budget.json"
    policy = BudgetPolicy(app_per_second=1e6, sends_per_minute=900.0)
    first = Clocks(0.0, 5000.0)
    before = CallBudget(policy, now=first.now)
    took = sum(before.try_take(Lane.ANSWER, SEND) for _ in range(300))
    assert took == 180  # the burst: a fifth of the minute
    BudgetRecord(path, first).save(before.spent(), closed=True)
    second = Clocks(0.0, 5001.0)
    after = CallBudget(policy, now=second.now, before=BudgetRecord(path, second).load())
    assert sum(after.try_take(Lane.ANSWER, SEND) for _ in range(300)) < 20
    fresh = CallBudget(policy, now=second.now)
    assert sum(fresh.try_take(Lane.ANSWER, SEND) for _ in range(300)) == 180


def test_an_unreadable_record_takes_the_last_minute_as_spent_at_the_pace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "call-budget.json"
    path.write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        spent = BudgetRecord(path, Clocks(70.0, 5000.0)).load()
    assert (dict(spent.by_api), spent.unseen_since) == ({}, 10.0)
    assert "cannot be read" in caplog.text


def test_a_record_is_written_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "call-budget.json"
    record = BudgetRecord(path, Clocks(10.0, 5000.0))
    record.save({SEND: [9.0]})
    path.unlink()
    record.save({SEND: [9.0]})
    assert not path.exists()
    record.save({SEND: [9.0, 9.5]})
    assert json.loads(path.read_text())["apis"] == {SEND: [[4999, 1], [5000, 1]]}
    record.save({SEND: [9.0, 9.5]}, closed=True)  # the last: written whatever it holds
    assert json.loads(path.read_text())["closed"] is True


def test_a_record_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    record = BudgetRecord(blocker / "call-budget.json", Clocks(10.0, 5000.0))
    with caplog.at_level(logging.WARNING):
        record.save({SEND: [9.0]})
    assert "cannot write the call budget's record" in caplog.text
