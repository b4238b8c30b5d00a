from __future__ import annotations

import random

import pytest

from tests.unit.core.core_chaos import ChaosRun


@pytest.fixture(scope="session")
def chaos_runs() -> list[ChaosRun]:
    """Seeded random conversations, shared by the property and diagram tests."""
    return [ChaosRun(random.Random(seed)).run(250) for seed in range(80)]
