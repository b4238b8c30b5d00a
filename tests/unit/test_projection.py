from __future__ import annotations

from bridge.ops.projection import TERMINAL, Projection


def test_revision_is_monotonic_and_unchanged_snapshots_are_not_republished() -> None:
    p = Projection()
    first = p.publish("chat-a", {"state": "idle"})
    assert first is not None
    assert p.publish("chat-a", {"state": "idle"}) is None
    second = p.publish("chat-b", {"state": "streaming"})
    assert second is not None
    assert (first["revision"], second["revision"]) == (1, 2)
    assert p.snapshot()["revision"] == 2
    assert p.snapshot()["conversations"]["chat-b"] == {"revision": 2, "state": "streaming"}


def test_each_process_has_its_own_epoch() -> None:
    assert Projection().epoch != Projection().epoch


async def test_a_slow_subscriber_loses_the_oldest_frames_and_is_told() -> None:
    p = Projection(queue_size=2)
    sub = p.subscribe()
    for n in range(5):
        p.publish("chat", {"n": n})
    assert sub.dropped == 3
    kept = [sub.queue.get_nowait(), sub.queue.get_nowait()]
    assert [f["snapshot"]["n"] for f in kept] == [3, 4]  # type: ignore[index]


async def test_close_sends_an_explicit_terminal_frame() -> None:
    p = Projection(queue_size=1)
    sub = p.subscribe()
    p.publish("chat", {"n": 1})
    p.close()
    assert sub.queue.get_nowait() is TERMINAL
    assert p.publish("chat", {"n": 2}) is not None  # publishing after close reaches nobody


def test_ages_are_derived_when_read_and_quiet_republishing_is_deduplicated() -> None:
    now = [1000.0]
    p = Projection(clock=lambda: now[0])
    snap = {"state": "streaming", "started_at": 900.0, "last_activity_at": 990.0}
    assert p.publish("chat", snap) is not None
    assert p.publish("chat", dict(snap)) is None  # nothing changed: no new revision
    now[0] = 1060.0
    conv = p.snapshot()["conversations"]["chat"]
    assert (conv["elapsed"], conv["silent_for"]) == (160.0, 70.0)
    assert p.revision == 1
