"""Every effect the core can return has exactly one handler in the executor's table, or is
one of the few the actor performs itself the moment it is fed."""

from __future__ import annotations

from typing import get_args

from bridge.core.delivery import Supersede
from bridge.core.effects import ClearTimer, Dropped, Effect, SetTimer
from bridge.engine.actor import Owe, Owed, Trace
from tests.unit.engine.engine_fakes import Harness

# Performed by the actor as it feeds the core: timers, supersession, a log line.
BY_THE_ACTOR = {SetTimer, ClearTimer, Supersede, Dropped}


def test_every_effect_has_one_handler(harness: Harness) -> None:
    handled = harness.engine.executor.handled
    effects = set(get_args(Effect))
    assert effects - BY_THE_ACTOR <= handled, sorted(t.__name__ for t in effects - handled)
    assert not BY_THE_ACTOR & handled
    # The engine's own work: the outbox's records and the turn's timeline.
    assert {Owe, Owed, Trace} <= handled
    assert handled <= effects | {Owe, Owed, Trace}
