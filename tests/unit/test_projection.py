from __future__ import annotations

from typing import Any

from bridge.ops.projection import Frame, Projection, Subscription


def projection(**options: Any) -> Projection:
    """A projection of the run `epoch-1`, its clock standing at 0."""
    return Projection(**{"epoch": "epoch-1", "clock": lambda: 0.0, **options})


def test_revision_is_monotonic_and_unchanged_snapshots_are_not_republished() -> None:
    p = projection()
    first = p.publish("chat-a", {"state": "idle"})
    assert first is not None
    assert p.publish("chat-a", {"state": "idle"}) is None
    second = p.publish("chat-b", {"state": "streaming"})
    assert second is not None
    assert (first["revision"], second["revision"]) == (1, 2)
    assert p.snapshot()["revision"] == 2
    assert p.snapshot()["conversations"]["chat-b"] == {"revision": 2, "state": "streaming"}


def test_every_frame_names_the_epoch_of_its_run() -> None:
    p = projection(epoch="run-7")
    frame = p.publish("chat", {"state": "idle"})
    assert frame is not None
    assert frame["projection_epoch"] == p.snapshot()["projection_epoch"] == "run-7"
    assert [f.id for f in p.open(p.subscribe(), "run-7:0")] == ["run-7:1"]


def _queued(sub: Subscription) -> list[Frame]:
    frames = []
    while not sub.queue.empty():
        frames.append(sub.queue.get_nowait())
    return frames


async def test_a_subscriber_that_falls_too_far_behind_is_evicted_with_a_terminal_frame() -> None:
    p = projection(queue_size=2)
    sub = p.subscribe("slow")
    p.open(sub)
    for n in range(5):
        p.publish("chat", {"n": n})
    # Not thinned silently: what was queued goes, one terminal frame says why, and the
    # subscriber is gone (it reconnects with its last id and gets the rest replayed).
    [evicted] = _queued(sub)
    assert evicted.event == "client_evicted"
    assert evicted.id is None  # its last id stays the last frame it read
    assert evicted.data["reason"] == "queue_full"
    assert p.subscribers() == []
    assert p.publish("chat", {"n": 9}) is not None
    assert sub.queue.empty()  # nothing after its terminal frame


async def test_an_evicted_subscriber_reconnecting_with_its_last_id_gets_the_rest() -> None:
    p = projection(queue_size=2)
    sub = p.subscribe()
    [snap] = p.open(sub)
    p.publish("chat", {"n": 0})
    read = await p.next(sub)
    for n in range(1, 6):
        p.publish("chat", {"n": n})
    assert _queued(sub)[-1].event == "client_evicted"
    again = p.subscribe()
    missed = p.open(again, read.id)
    assert [f.data["snapshot"]["n"] for f in missed] == [1, 2, 3, 4, 5]
    assert snap.id is not None


async def test_close_sends_an_explicit_terminal_frame() -> None:
    p = projection(queue_size=1)
    sub = p.subscribe()
    p.publish("chat", {"n": 1})
    p.close()
    [end] = _queued(sub)
    assert (end.event, end.data) == ("end", {"projection_epoch": p.epoch})
    assert p.publish("chat", {"n": 2}) is not None  # publishing after close reaches nobody


async def test_a_frame_published_between_subscribe_and_snapshot_is_neither_lost_nor_doubled() -> (
    None
):
    p = projection()
    p.publish("a", {"n": 0})
    sub = p.subscribe()
    p.publish("b", {"n": 1})  # between subscribing and the opening snapshot
    [snap] = p.open(sub)
    assert snap.event == "snapshot"
    assert snap.data["conversations"]["b"]["n"] == 1
    assert snap.id == f"{p.epoch}:2"
    p.publish("a", {"n": 2})
    frame = await p.next(sub)  # the queued "b" frame is covered by the snapshot: skipped
    assert (frame.event, frame.revision, frame.data["conversation"]) == ("runtime_state", 3, "a")
    assert sub.queue.empty()


async def test_every_ring_frame_has_an_id_and_a_replay_is_exactly_the_missed_frames() -> None:
    p = projection(ring_size=4)
    first = p.subscribe()
    [snap] = p.open(first)
    last_read = snap.id
    for n in range(3):
        p.publish("chat", {"n": n})
    replay = p.open(p.subscribe(), last_read)
    assert [f.revision for f in replay] == [1, 2, 3]
    assert [f.id for f in replay] == [f"{p.epoch}:{r}" for r in (1, 2, 3)]
    assert all(f.event == "runtime_state" for f in replay)
    # Up to date: nothing to replay, no snapshot either.
    assert p.open(p.subscribe(), f"{p.epoch}:3") == []


async def test_a_last_event_id_out_of_the_ring_or_of_another_epoch_gets_a_snapshot() -> None:
    p = projection(ring_size=2)
    for n in range(5):
        p.publish("chat", {"n": n})
    for stale in (
        f"{p.epoch}:1",  # its next frames left the ring
        f"{p.epoch}:99",  # from the future
        "epoch-2:5",  # another run of the bridge: never replayed across it
        "5",
        "garbage",
    ):
        [frame] = p.open(p.subscribe(), stale)
        assert frame.event == "snapshot", stale
    assert [f.revision for f in p.open(p.subscribe(), f"{p.epoch}:3")] == [4, 5]


async def test_session_terminal_frames_are_in_the_stream_and_a_death_is_a_fault() -> None:
    p = projection(clock=lambda: 50.0)
    sub = p.subscribe()
    p.open(sub)
    p.session_ended("session_closed", "chat", "s-1", "operator")
    p.session_ended("session_died", "chat", "s-2", "agent_exit")
    frames = _queued(sub)
    assert [f.event for f in frames] == ["session_closed", "session_died", "fault"]
    assert frames[0].data["conversation"] == "chat"
    assert (frames[0].data["session_id"], frames[0].data["reason"]) == ("s-1", "operator")
    assert frames[2].data["fault"] == {
        "at": 50.0,
        "conversation": "chat",
        "kind": "session_died",
        "detail": "agent_exit",
    }
    assert len({f.revision for f in frames}) == 3


def test_faults_are_read_from_snapshots_and_kept_bounded() -> None:
    p = projection(fault_limit=2, clock=lambda: 7.0)
    p.publish("chat", {"state": "streaming", "turn_id": "t1", "last_terminal": None})
    p.publish("chat", {"state": "recovering", "turn_id": "t1", "last_terminal": None})
    ended = {"turn_id": "t1", "outcome": "interrupted", "ending": "agent_exit", "ended_at": 7.0}
    p.publish("chat", {"state": "idle", "turn_id": None, "last_terminal": ended})
    fine = {"turn_id": "t2", "outcome": "completed", "ending": "completed", "ended_at": 8.0}
    p.publish("chat", {"state": "idle", "turn_id": None, "last_terminal": fine})
    assert [(f["kind"], f["detail"]) for f in p.snapshot()["faults"]] == [
        ("recovering", "turn t1"),
        ("turn_interrupted", "turn t1 agent_exit"),
    ]
    p.fault("agent_exit", None, "agent pid 9")
    assert [f["kind"] for f in p.snapshot()["faults"]] == ["turn_interrupted", "agent_exit"]


def test_a_process_seen_alive_and_then_gone_is_a_fault_and_its_view_a_frame() -> None:
    p = projection()
    alive = {"agent": "claude", "workspace": "w", "slot": 0, "pid": 10, "alive": True}
    assert p.processes([alive]) is not None
    assert p.processes([alive]) is None  # unchanged: not re-published
    gone = {**alive, "alive": False, "returncode": -9}
    frame = p.processes([gone])
    assert frame is not None
    assert frame["processes"] == [gone]
    [fault] = p.snapshot()["faults"]
    assert (fault["kind"], fault["detail"], fault["conversation"]) == (
        "agent_exit",
        "claude pid 10 code -9",
        None,
    )
    assert p.snapshot()["processes"] == [gone]


def test_a_display_name_shows_in_the_snapshot_and_is_republished() -> None:
    p = projection()
    p.publish("chat", {"state": "idle"})
    p.set_display_name("chat", "Release <b>room</b>")
    assert p.get("chat") == {"state": "idle", "display_name": "Release <b>room</b>"}
    assert p.revision == 2
    p.publish("chat", {"state": "idle"})  # the engine's snapshot has no name: still kept
    assert p.revision == 2
    p.set_display_name("chat", None)
    assert p.get("chat") == {"state": "idle"}
    p.set_display_name("later", "named before its first snapshot")
    p.publish("later", {"state": "idle"})
    assert p.get("later") == {"state": "idle", "display_name": "named before its first snapshot"}


def test_ages_are_derived_when_read_and_quiet_republishing_is_deduplicated() -> None:
    now = [1000.0]
    p = projection(clock=lambda: now[0])
    snap = {"state": "streaming", "started_at": 900.0, "last_activity_at": 990.0}
    assert p.publish("chat", snap) is not None
    assert p.publish("chat", dict(snap)) is None  # nothing changed: no new revision
    now[0] = 1060.0
    conv = p.snapshot()["conversations"]["chat"]
    assert (conv["elapsed"], conv["silent_for"]) == (160.0, 70.0)
    assert p.revision == 1


def test_each_apps_processes_are_kept_beside_the_others() -> None:
    """Several apps, each its own agents: one app's new view leaves the others' rows as they
    were, every row names its app, and a process lost is a fault of its app."""
    p = projection()
    claude = {"agent": "scripted", "workspace": "w", "slot": 0, "pid": 10, "alive": True}
    codex = {**claude, "pid": 20}
    p.processes([claude], "claude")
    frame = p.processes([codex], "codex")
    assert frame is not None
    assert frame["processes"] == [{**claude, "app": "claude"}, {**codex, "app": "codex"}]
    assert p.processes([codex], "codex") is None  # unchanged
    gone = {**codex, "alive": False, "returncode": 1}
    frame = p.processes([gone], "codex")
    assert frame is not None
    assert frame["processes"] == [{**claude, "app": "claude"}, {**gone, "app": "codex"}]
    [fault] = p.snapshot()["faults"]
    assert (fault["kind"], fault["detail"], fault["app"]) == (
        "agent_exit",
        "scripted pid 20 code 1",
        "codex",
    )
