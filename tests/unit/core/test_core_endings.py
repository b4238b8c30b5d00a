"""How a round ends: stop reasons, grace window, first terminal wins, /stop, /new, queue."""

from __future__ import annotations

import pytest

from bridge.core.delivery import Supersede
from bridge.core.effects import (
    AbandonTurn,
    AnswerPermission,
    CancelTurn,
    Dropped,
    MarkMessageDone,
    NewSession,
    PostText,
    React,
    RecordTerminal,
    RelayAgentText,
    StartTurn,
)
from bridge.core.inputs import Command, CommandName
from bridge.core.state import Ending, ExecState, Outcome
from bridge.runtime.events import (
    MessageChunk,
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    PromptSent,
    StopReason,
    ToolCallStarted,
    TurnEnded,
)
from tests.unit.core.core_driver import SID, Driver, finals, keys, of_type, posts

STOP = Command(CommandName.STOP, "c1", "ou_alice", "/stop")
NEW = Command(CommandName.NEW, "c2", "ou_alice", "/new")


@pytest.mark.parametrize(
    ("reason", "key"),
    [
        (StopReason.MAX_TOKENS, "presence.max_tokens"),
        (StopReason.MAX_TURN_REQUESTS, "presence.max_turn_requests"),
        (StopReason.REFUSAL, "presence.refusal"),
    ],
)
def test_non_final_stop_reasons_get_their_own_line_after_the_grace_window(
    reason: StopReason, key: str
) -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "Partial answer"), at=1.0)
    out = d.feed(TurnEnded(SID, reason), at=2.0)
    assert posts(out) == []
    assert d.conv.state is ExecState.FINISHING
    assert keys(d.advance(4.9)) == []
    out = d.advance(5.0)
    assert keys(out) == ["<reply>", key]
    assert [p.final for p in posts(out)] == [False, True]
    assert of_type(out, RecordTerminal) == [
        RecordTerminal("m1", Outcome.COMPLETED, Ending.COMPLETED, reason.value)
    ]
    assert d.conv.state is ExecState.IDLE


def test_the_grace_window_absorbs_text_that_raced_the_response() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "Part one, "), at=1.0)
    d.feed(TurnEnded(SID, StopReason.MAX_TOKENS), at=2.0)
    d.feed(MessageChunk(SID, "part two."), at=2.5)
    out = d.advance(5.0)
    assert [r.text for r in of_type(out, RelayAgentText)] == ["Part one, part two."]


def test_a_follow_up_during_the_grace_window_closes_the_round_and_runs_at_once() -> None:
    d = Driver()
    d.start()
    d.feed(TurnEnded(SID, StopReason.MAX_TOKENS), at=2.0)
    out = d.message("m2", "continue", at=3.0)
    assert keys(out) == ["presence.max_tokens"]  # no "queued" line: it starts right away
    assert of_type(out, StartTurn) == [StartTurn("m2", "continue", SID)]
    assert d.conv.state is ExecState.WAITING_RESPONSE


def test_first_terminal_wins_and_later_events_are_dropped_not_posted() -> None:
    d = Driver()
    d.start()
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=1.0)
    for late in (
        MessageChunk(SID, "late text"),
        ToolCallStarted(SID, "t9", "late tool"),
        TurnEnded(SID, StopReason.END_TURN),
    ):
        out = d.feed(late, at=2.0)
        assert posts(out) == []
        assert [type(e) for e in out] == [Dropped]
    assert len(of_type(d.effects, RecordTerminal)) == 1


def test_a_late_permission_request_is_answered_cancelled_so_the_agent_never_hangs() -> None:
    d = Driver()
    d.start()
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=1.0)
    opts = (PermissionOption("ok", "OK", PermissionKind.ALLOW_ONCE),)
    out = d.feed(PermissionRequested(SID, "r9", "late", opts), at=2.0)
    assert of_type(out, AnswerPermission) == [AnswerPermission("r9", None)]
    assert posts(out) == []


def test_events_of_another_session_are_dropped() -> None:
    d = Driver()
    d.start()
    out = d.feed(MessageChunk("s-old", "stray"), at=1.0)
    assert [type(e) for e in out] == [Dropped]
    assert d.conv.turn is not None
    assert d.conv.turn.text == ""


def test_stop_cancels_the_running_turn_and_says_so() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "half a thought"), at=1.0)
    out = d.feed(STOP, at=3.0)
    body = [e for e in out if type(e).__name__ not in {"SetTimer", "ClearTimer"}]
    assert body == [React("c1"), CancelTurn("m1", SID), MarkMessageDone("c1")]
    assert d.conv.state is ExecState.CANCELLING  # the round ends when the agent confirms
    out = d.feed(TurnEnded(SID, StopReason.CANCELLED), at=4.0)
    body = [e for e in out if type(e).__name__ not in {"SetTimer", "ClearTimer"}]
    assert body == [
        RelayAgentText("half a thought", "m1", "m1:reply:1", turn_id="m1"),
        PostText("presence.stopped", {}, "m1", "m1:end", final=True, turn_id="m1"),
        RecordTerminal(
            "m1", Outcome.CANCELLED, Ending.USER_STOP, "stopped by user (agent said cancelled)"
        ),
        Supersede(("m1:presence",)),
    ]
    assert d.conv.state is ExecState.IDLE


def test_stop_when_nothing_runs() -> None:
    d = Driver()
    out = d.feed(STOP, at=1.0)
    assert [(p.key, p.reply_to) for p in of_type(out, PostText)] == [("command.stop_idle", "c1")]


def test_a_cancel_the_agent_makes_itself_ends_with_the_stopped_line() -> None:
    d = Driver()
    d.start()
    out = d.feed(TurnEnded(SID, StopReason.CANCELLED), at=1.0)
    assert [p.key for p in finals(out) if isinstance(p, PostText)] == ["presence.stopped"]


def test_a_message_during_a_turn_is_queued_with_its_position_and_runs_after_the_end() -> None:
    d = Driver()
    d.start()
    out2 = d.message("m2", "second", at=1.0)
    out3 = d.message("m3", "third", at=2.0)
    assert [(p.key, p.params, p.idempotency_key) for p in of_type(out2 + out3, PostText)] == [
        ("presence.queued", {"position": 1}, "m2:queued"),
        ("presence.queued", {"position": 2}, "m3:queued"),
    ]
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=3.0)
    assert of_type(out, StartTurn) == [StartTurn("m2", "second", SID)]
    # The new turn's own posts come after the old turn's end signal.
    assert out.index(finals(out)[0]) < out.index(of_type(out, StartTurn)[0])
    assert d.conv.turn is not None
    assert d.conv.turn.turn_id == "m2"
    assert [q.message_id for q in d.conv.queue] == ["m3"]


def test_the_queue_waits_until_the_runtime_has_returned_from_a_cancel() -> None:
    d = Driver()
    d.start()
    d.message("m2", at=1.0)
    out = d.feed(STOP, at=2.0)
    assert of_type(out, StartTurn) == []
    out = d.feed(TurnEnded(SID, StopReason.CANCELLED), at=2.5)
    assert of_type(out, StartTurn) == [StartTurn("m2", "hello", SID)]


def test_a_stop_the_runtime_never_confirms_is_told_then_ended_and_the_agent_restarted() -> None:
    d = Driver()
    d.start()
    d.message("m2", at=1.0)
    d.feed(STOP, at=2.0)
    assert keys(d.advance(6.9)) == []
    assert keys(d.advance(7.0)) == ["presence.stopping"]  # cancel_notice: 5 s
    out = d.advance(31.9)
    assert keys(out) == []
    assert of_type(out, StartTurn) == []
    out = d.advance(32.0)  # cancel_limit: 30 s
    assert of_type(out, AbandonTurn) == [AbandonTurn("m1", SID)]
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [("presence.stop_forced", True)]
    assert of_type(out, RecordTerminal)[0].outcome is Outcome.CANCELLED
    assert of_type(out, StartTurn) == [StartTurn("m2", "hello", SID)]


def test_a_cancel_after_the_end_line_that_never_lands_restarts_the_agent() -> None:
    d = Driver()
    d.start()
    d.message("m2", at=1.0)
    d.feed(NEW, at=2.0)  # /new ends the round at once; the agent still has to confirm
    assert of_type(d.advance(31.9), StartTurn) == []
    out = d.advance(32.0)
    assert of_type(out, Dropped)[0].reason == "runtime never confirmed the cancel"
    assert of_type(out, AbandonTurn) == [AbandonTurn("m1", SID)]
    assert keys(out) == []  # the end line went out already
    assert of_type(out, StartTurn) == [StartTurn("m2", "hello", None)]


def test_a_stopped_turn_is_stopped_whatever_stop_reason_the_agent_gives() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "partial"), at=1.0)
    d.feed(STOP, at=2.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.5)  # copilot-cli, opencode
    assert [p.key if isinstance(p, PostText) else p.text for p in posts(out)] == [
        "partial",
        "presence.stopped",
    ]
    assert of_type(out, RecordTerminal)[0].outcome is Outcome.CANCELLED


def test_new_cancels_the_running_turn_first_then_starts_a_fresh_session() -> None:
    d = Driver()
    d.start()
    out = d.feed(NEW, at=2.0)
    names = [type(e).__name__ for e in out if type(e).__name__ not in {"SetTimer", "ClearTimer"}]
    assert names == [
        "React",
        "CancelTurn",
        "PostText",
        "RecordTerminal",
        "Supersede",
        "NewSession",
        "PostText",
        "MarkMessageDone",
    ]
    assert [p.key for p in of_type(out, PostText)] == ["presence.stopped", "command.new_session"]
    assert d.conv.session_id is None
    d.feed(TurnEnded(SID, StopReason.CANCELLED), at=3.0)
    out = d.message("m2", at=4.0)
    assert of_type(out, StartTurn) == [StartTurn("m2", "hello", None)]
    d.feed(PromptSent("s2"))
    assert d.conv.session_id == "s2"


def test_new_when_idle_only_starts_a_fresh_session() -> None:
    d = Driver()
    d.start()
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=1.0)
    out = d.feed(NEW, at=2.0)
    assert of_type(out, NewSession) == [NewSession()]
    assert keys(out) == ["command.new_session"]


def test_a_redelivered_message_is_dropped_not_run_twice() -> None:
    d = Driver()
    d.start()
    assert [type(e) for e in d.message("m1", at=1.0)] == [Dropped]
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    assert [type(e) for e in d.message("m1", at=3.0)] == [Dropped]
