from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bridge.store import MemoryStore
from tests.unit.engine.engine_fakes import Harness


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    store = MemoryStore()
    await store.open()
    h = Harness(store)
    yield h
    h.feishu.release()
    await h.engine.drain(0.1)
    await store.close()
