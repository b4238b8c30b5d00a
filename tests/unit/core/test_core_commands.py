"""/status, /help, unknown commands, the operator snapshot and the elapsed-time helper."""

from __future__ import annotations

import pytest

from bridge.core.effects import AskStatus, MarkMessageDone, PostText, React, StartTurn
from bridge.core.inputs import Command, CommandName, StatusAnswered
from bridge.core.snapshot import NEXT_MOVES, PHASES, snapshot
from bridge.core.state import RUNNING_STATES, ExecState
from bridge.core.text import Text, format_elapsed
from bridge.runtime.events import (
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    RuntimeExited,
    SessionFacts,
    StopReason,
    ToolCallStarted,
    TurnEnded,
    Usage,
)
from tests.unit.core.core_driver import ALICE, SID, Driver, of_type


def command(name: CommandName, mid: str = "c1", raw: str = "") -> Command:
    return Command(name, mid, ALICE, raw)


FACTS = SessionFacts("claude", "/srv/app", "plan", "deep", "Fix the build", Usage(12_345, 200_000))


def status(d: Driver, at: float = 0.0) -> list[object]:
    """/status, then the runtime's answer: what the user is shown."""
    asked = d.feed(command(CommandName.STATUS), at=at)
    assert of_type(asked, AskStatus) == [AskStatus("c1", d.conv.session_id)]
    return [*asked, *d.feed(StatusAnswered("c1", FACTS), at=at)]


def test_status_when_idle_names_the_agent_folder_mode_model_title_and_context() -> None:
    out = status(Driver())
    assert [e for e in out if not isinstance(e, AskStatus)] == [
        React("c1"),
        MarkMessageDone("c1"),
        PostText(
            "command.status",
            {
                "state": Text("status.idle", {}),
                "agent": "claude",
                "folder": "/srv/app",
                "mode": "plan",
                "model": "deep",
                "title": "Fix the build",
                "usage": Text("usage.context", {"used": "12.3k", "size": "200k", "percent": 6}),
            },
            "c1",
            "c1:status",
        ),
    ]


def test_status_says_unknown_for_what_the_agent_never_told() -> None:
    d = Driver()
    d.feed(command(CommandName.STATUS))
    out = d.feed(StatusAnswered("c1", SessionFacts("claude", "/srv/app")))
    params = of_type(out, PostText)[0].params
    assert params["title"] == Text("status.no_session")  # the next message opens one
    d.start()
    d.feed(command(CommandName.STATUS))
    out = d.feed(StatusAnswered("c1", SessionFacts("claude", "/srv/app")))
    params = of_type(out, PostText)[0].params
    assert [params[k] for k in ("mode", "model", "title", "usage")] == [Text("status.unknown")] * 4


def test_status_while_running_says_elapsed_activity_and_queue() -> None:
    d = Driver()
    d.start()
    d.feed(ToolCallStarted(SID, "t1", "pytest -q"), at=100.0)
    d.message("m2", at=110.0)
    out = status(d, at=130.0)
    assert [p.params["state"] for p in of_type(out, PostText)] == [
        Text(
            "status.streaming",
            {"elapsed": Text("time.minutes", {"n": 2}), "activity": "pytest -q", "queue": 1},
        )
    ]
    assert of_type(out, StartTurn) == []  # a command is never a turn


def test_status_while_waiting_for_approval_names_it_and_how_long() -> None:
    d = Driver()
    d.start()
    opts = (PermissionOption("ok", "OK", PermissionKind.ALLOW_ONCE),)
    d.feed(PermissionRequested(SID, "r1", "Push to main", opts), at=10.0)
    state = of_type(status(d, at=70.0), PostText)[0].params["state"]
    assert state == Text(
        "status.waiting_approval",
        {"title": "Push to main", "waited": Text("time.minutes", {"n": 1}), "queue": 0},
    )


def test_status_does_not_change_the_state() -> None:
    d = Driver()
    d.start()
    before = d.conv
    d.feed(command(CommandName.STATUS), at=1.0)
    assert d.conv == before


def test_help_lists_the_commands() -> None:
    out = Driver().feed(command(CommandName.HELP))
    assert [p.key for p in of_type(out, PostText)] == ["command.help"]


def test_an_unknown_command_gets_help_not_a_turn() -> None:
    d = Driver()
    out = d.feed(command(CommandName.UNKNOWN, raw="/deploy"))
    assert out == [
        React("c1"),
        PostText("command.unknown", {"command": "/deploy"}, "c1", "c1:help"),
        MarkMessageDone("c1"),
    ]
    assert d.conv.state is ExecState.IDLE


def test_snapshot_of_a_running_turn() -> None:
    d = Driver()
    d.start(at=100.0)
    d.feed(ToolCallStarted(SID, "t1", "Read"), at=110.0)
    d.message("m2", at=115.0)
    snap = snapshot(d.conv)
    assert snap["state"] == "streaming"
    assert (snap["phase"], snap["next_move"]) == ("executing", "agent")
    assert snap["turn_id"] == "m1"
    assert snap["session_id"] == SID
    assert snap["started_at"] == 100.0
    assert snap["last_activity_at"] == 110.0
    assert "elapsed" not in snap  # ages are derived at read time, never frozen in
    assert "silent_for" not in snap
    assert snap["queue_length"] == 1
    assert snap["last_activity"] == {"kind": "tool", "title": "Read"}
    assert snap["pending_approval"] is None
    assert "hello" not in repr(snap)  # no message text in an operator view


def test_snapshot_after_the_end_keeps_the_last_outcome() -> None:
    d = Driver()
    d.start()
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=5.0)
    snap = snapshot(d.conv)
    assert snap["state"] == "idle"
    assert (snap["phase"], snap["next_move"]) == ("idle", "user")
    assert snap["turn_id"] is None
    assert snap["last_terminal"] == {
        "turn_id": "m1",
        "outcome": "completed",
        "ending": "completed",
        "ended_at": 5.0,
    }


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-3, Text("time.seconds", {"n": 0})),
        (45.9, Text("time.seconds", {"n": 45})),
        (60, Text("time.minutes", {"n": 1})),
        (119, Text("time.minutes", {"n": 1})),
        (3599, Text("time.minutes", {"n": 59})),
        (3600, Text("time.hours", {"n": 1})),
        (3900, Text("time.hours_minutes", {"h": 1, "m": 5})),
    ],
)
def test_format_elapsed_floors_to_the_unit_a_person_says(seconds: float, expected: Text) -> None:
    assert format_elapsed(seconds) == expected


@pytest.mark.parametrize("name", [CommandName.STOP, CommandName.NEW])
def test_a_bystander_cannot_stop_or_reset_someone_elses_round(name: CommandName) -> None:
    d = Driver()
    d.start()  # Alice's round is running
    out = d.feed(Command(name, "c9", "ou_bob", f"/{name.value}"), at=5.0)
    assert [(p.key, p.reply_to) for p in of_type(out, PostText)] == [("command.not_yours", "c9")]
    assert d.conv.state in RUNNING_STATES
    assert d.conv.turn is not None
    assert not d.conv.turn.terminal


def test_the_requester_can_stop_their_own_round() -> None:
    d = Driver()
    d.start()
    d.feed(command(CommandName.STOP), at=5.0)
    out = d.feed(TurnEnded(SID, StopReason.CANCELLED), at=5.1)
    assert "presence.stopped" in [p.key for p in of_type(out, PostText)]


def test_every_state_has_a_phase_and_a_next_move() -> None:
    assert set(PHASES) == set(ExecState) == set(NEXT_MOVES)
    assert set(PHASES.values()) == {
        "idle",
        "executing",
        "finishing",
        "cancelling",
        "closed",
        "unsynced",
    }


def test_the_phase_says_cancelling_from_the_stop_until_it_lands() -> None:
    d = Driver()
    d.start(at=1.0)
    d.feed(ToolCallStarted(SID, "t1", "Read"), at=2.0)
    d.feed(command(CommandName.STOP), at=3.0)
    snap = snapshot(d.conv)
    assert (snap["phase"], snap["next_move"]) == ("cancelling", "agent")
    d.feed(TurnEnded(SID, StopReason.CANCELLED), at=4.0)
    assert snapshot(d.conv)["phase"] == "idle"


def test_an_agent_restarting_is_unsynced_and_the_bridges_move() -> None:
    d = Driver()
    d.start(at=1.0)
    d.feed(RuntimeExited(SID, returncode=-9), at=2.0)
    snap = snapshot(d.conv)
    assert (snap["state"], snap["phase"], snap["next_move"]) == ("recovering", "unsynced", "bridge")
