"""Timelines written behind: one store call for the entries of many turns, a moment after
the first of them; all of them at shutdown; readers see what is not written yet."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bridge.store import MemoryStore
from bridge.store.port import TraceRecord
from bridge.store.trace_buffer import FLUSH_AT, TraceBuffer


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    async def trace_many(self, records: Sequence[TraceRecord]) -> None:
        self.calls.append(len(records))
        await super().trace_many(records)


async def _store_with_turns(*turn_ids: str) -> CountingStore:
    store = CountingStore()
    await store.open()
    for turn_id in turn_ids:
        await store.start_turn(turn_id, "oc_1", turn_id, 0.0)
    return store


async def test_entries_of_several_turns_are_written_in_one_call_after_the_delay() -> None:
    store = await _store_with_turns("t1", "t2")
    timers: list[tuple[float, Callable[[], None]]] = []

    class Timer:
        def cancel(self) -> None:
            timers.clear()

    def later(delay: float, callback: Callable[[], None]) -> Timer:
        timers.append((delay, callback))
        return Timer()

    buffer = TraceBuffer(store, lambda: 5.0, flush_after=1.5, later=later)
    await buffer.add("t1", "start", "")
    await buffer.add("t2", "start", "")
    await buffer.add("t1", "terminal", "completed completed: end_turn")
    assert store.calls == []  # nothing written yet ...
    assert [e.kind for e in buffer.pending("t1")] == ["start", "terminal"]  # ... yet readable
    assert [delay for delay, _ in timers] == [1.5]  # one timer, from the first entry
    timers[0][1]()  # it fires
    await buffer.close()  # waits for that write; nothing else is left
    assert store.calls == [3]
    assert [e.kind for e in await store.trace_for("t1")] == ["start", "terminal"]
    assert buffer.pending("t1") == []


async def test_many_waiting_entries_are_written_at_once() -> None:
    store = await _store_with_turns("t1")
    buffer = TraceBuffer(store, lambda: 5.0, flush_after=3600)
    for i in range(FLUSH_AT):
        await buffer.add("t1", "output", str(i))
    assert store.calls == [FLUSH_AT]


async def test_close_writes_what_waits() -> None:
    store = await _store_with_turns("t1")
    buffer = TraceBuffer(store, lambda: 5.0, flush_after=3600)
    await buffer.add("t1", "start", "")
    await buffer.close()
    assert store.calls == [1]
    assert [e.kind for e in await store.trace_for("t1")] == ["start"]
