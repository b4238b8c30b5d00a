"""Faults: runtime unavailable, failed, crashed and restarted; bridge restarts; stalls."""

from __future__ import annotations

from bridge.core.delivery import Supersede, presence_group
from bridge.core.effects import (
    CancelTurn,
    CardStatus,
    PostText,
    RecordTerminal,
    RelayAgentText,
    SendPrompt,
    StartTurn,
    UpdateApprovalCard,
)
from bridge.core.inputs import (
    Command,
    CommandName,
    ConversationClosed,
    RuntimeRestarted,
    RuntimeRestartFailed,
    RuntimeUnavailableAtStart,
    SessionOpened,
    StartFailed,
    TurnInterruptedByRestart,
    UserMessage,
)
from bridge.core.state import Activity, ActivityKind, Ending, ExecState, Outcome
from bridge.core.text import Text
from bridge.runtime.events import (
    MessageChunk,
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    RuntimeExited,
    RuntimeFailed,
    StopReason,
    ThoughtChunk,
    ToolCallStarted,
    TurnEnded,
)
from tests.unit.core.core_driver import ALICE, SID, Driver, finals, keys, of_type, posts


def test_runtime_unavailable_at_start_gets_a_fault_line_never_a_running_hint() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    out = d.feed(RuntimeUnavailableAtStart("m1", "spawn failed"), at=1.0)
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [
        ("presence.runtime_unavailable", True)
    ]
    assert of_type(out, RecordTerminal) == [
        RecordTerminal("m1", Outcome.FAILED, Ending.AGENT_ERROR, "spawn failed")
    ]
    assert keys(d.advance(1000.0)) == []
    assert d.conv.state is ExecState.IDLE


def test_the_process_limit_gets_its_own_busy_line() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    out = d.feed(RuntimeUnavailableAtStart("m1", "limit", limit_reached=True), at=1.0)
    assert keys(out) == ["presence.runtime_busy"]


def test_the_bridge_failing_before_the_prompt_asks_to_resend_not_blames_the_agent() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    out = d.feed(StartFailed("m1", "ValueError"), at=1.0)
    assert [(p.key, p.final) for p in posts(out)] == [("presence.unrecoverable", True)]
    assert d.conv.state is ExecState.IDLE


def test_a_prompt_failing_before_prompt_sent_is_its_turn_s_and_asks_to_resend() -> None:
    """Issues 34/35: the turn has no session yet (PromptSent never came), so the failure
    was dropped as another session's and the user heard nothing."""
    d = Driver()
    d.message("m1", at=0.0)
    assert of_type(d.feed(SessionOpened("m1", SID), at=0.5), SendPrompt)
    out = d.feed(RuntimeFailed(SID, "No previous sessions found"), at=1.0)
    assert [(p.key, p.final) for p in posts(out)] == [("presence.unrecoverable", True)]
    assert d.conv.state is ExecState.IDLE


def test_a_stopped_round_whose_prompt_fails_unsent_lets_the_next_message_run() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    d.feed(SessionOpened("m1", SID), at=0.5)
    assert keys(d.feed(Command(CommandName.STOP, "s1", ALICE, "/stop"), at=1.0)) == [
        "presence.stopped"
    ]
    d.message("m2", text="next", at=2.0)
    out = d.feed(RuntimeFailed(SID, "No previous sessions found"), at=3.0)
    assert keys(out) == []  # first terminal wins: the stopped line stands alone
    assert [e.turn_id for e in of_type(out, StartTurn)] == ["m2"]


def test_a_failed_prompt_relays_what_it_had_then_asks_to_resend() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "Partial"), at=1.0)
    out = d.feed(RuntimeFailed(SID, "internal error"), at=2.0)
    assert keys(out) == ["<reply>", "presence.unrecoverable"]
    assert [p.final for p in posts(out)] == [False, True]
    assert of_type(out, RecordTerminal)[0].outcome is Outcome.FAILED


def crashed() -> Driver:
    d = Driver()
    d.start()
    d.feed(ToolCallStarted(SID, "t1", "Build"), at=1.0)
    opts = (PermissionOption("ok", "OK", PermissionKind.ALLOW_ONCE),)
    d.feed(PermissionRequested(SID, "r1", "Deploy", opts), at=2.0)
    d.feed(RuntimeExited(SID, returncode=-9), at=3.0)
    return d


def test_a_crash_mid_turn_says_recovering_and_closes_the_open_card() -> None:
    d = Driver()
    d.start()
    opts = (PermissionOption("ok", "OK", PermissionKind.ALLOW_ONCE),)
    d.feed(PermissionRequested(SID, "r1", "Deploy", opts), at=2.0)
    out = d.feed(RuntimeExited(SID, returncode=-9), at=3.0)
    assert of_type(out, UpdateApprovalCard) == [
        UpdateApprovalCard("m1", "m1:card:r1", "r1", CardStatus.CANCELLED, "Deploy", None)
    ]
    assert keys(out) == ["presence.recovering"]
    assert d.conv.state is ExecState.RECOVERING


def test_a_crash_mid_turn_makes_a_waiting_still_working_line_moot() -> None:
    """A heartbeat decided while the agent ran, still waiting behind a slow call in its chat,
    is untrue once the agent is gone: the crash supersedes the turn's presence lines, before
    the recovering line (the simulator's seed 937 posted it 0.5 s after the crash)."""
    d = Driver()
    d.start()
    d.feed(ToolCallStarted(SID, "t1", "Build"), at=1.0)
    assert d.conv.turn is not None
    group = presence_group(d.conv.turn.turn_id)
    out = d.feed(RuntimeExited(SID, returncode=-9), at=3.0)
    assert of_type(out, Supersede) == [Supersede((group,))]
    supersede = next(i for i, e in enumerate(out) if isinstance(e, Supersede))
    recovering = next(i for i, e in enumerate(out) if isinstance(e, PostText))
    assert supersede < recovering


def test_no_running_hint_or_heartbeat_while_recovering() -> None:
    d = crashed()
    assert keys(d.advance(590.0)) == []


def test_recovered_with_the_session_reloaded_still_cannot_continue_the_cut_round() -> None:
    d = crashed()
    out = d.feed(RuntimeRestarted(SID, reloaded=True), at=10.0)
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [("presence.unrecoverable", True)]
    assert of_type(out, RecordTerminal)[0].outcome is Outcome.INTERRUPTED
    assert d.conv.state is ExecState.IDLE


def test_recovered_on_a_fresh_session_says_the_context_is_lost() -> None:
    d = crashed()
    out = d.feed(RuntimeRestarted("s9", reloaded=False), at=10.0)
    assert keys(out) == ["presence.unrecoverable_context_lost"]
    assert d.conv.session_id == "s9"


def test_a_round_the_runtime_resumes_goes_on_honestly() -> None:
    d = crashed()
    out = d.feed(RuntimeRestarted("s9", reloaded=True, turn_resumed=True), at=10.0)
    assert keys(out) == ["presence.recovered"]
    assert d.conv.state is ExecState.STREAMING
    d.feed(MessageChunk("s9", "Deployed."), at=11.0)
    out = d.feed(TurnEnded("s9", StopReason.END_TURN), at=12.0)
    assert [r.text for r in finals(out)] == ["Deployed."]  # type: ignore[union-attr]


def test_an_exit_without_restart_is_unrecoverable_at_once() -> None:
    d = Driver()
    d.start()
    out = d.feed(RuntimeExited("", returncode=1, restarting=False), at=2.0)
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [("presence.unrecoverable", True)]


def test_a_restart_that_fails_is_unrecoverable() -> None:
    d = crashed()
    out = d.feed(RuntimeRestartFailed("binary missing"), at=5.0)
    assert keys(out) == ["presence.unrecoverable"]


def test_a_recovery_that_never_ends_is_given_up_after_the_stale_window() -> None:
    d = crashed()
    out = d.advance(603.0)
    assert keys(out) == ["presence.unrecoverable"]
    assert of_type(out, RecordTerminal)[0].detail == "recovery timed out"


def test_an_exit_while_idle_tells_nobody() -> None:
    d = Driver()
    assert posts(d.feed(RuntimeExited(""), at=1.0)) == []


def test_stop_while_recovering_ends_the_round_without_cancelling_a_dead_process() -> None:
    from bridge.core.inputs import Command, CommandName

    d = crashed()
    out = d.feed(Command(CommandName.STOP, "c1", "ou_alice"), at=5.0)
    assert of_type(out, CancelTurn) == []
    assert keys(out) == ["presence.stopped"]
    assert d.conv.state is ExecState.IDLE


def test_a_turn_cut_by_a_bridge_restart_is_reported_under_its_end_key() -> None:
    d = Driver()
    out = d.feed(TurnInterruptedByRestart("m7", "m7", "ou_alice"), at=0.0)
    assert out == [
        PostText("presence.unrecoverable", {}, "m7", "m7:end", final=True),
        RecordTerminal("m7", Outcome.INTERRUPTED, Ending.BRIDGE_SHUTDOWN, "bridge restarted"),
    ]


def test_stall_is_told_once_with_silence_and_last_activity_and_the_turn_is_not_killed() -> None:
    d = Driver()
    d.start()
    d.feed(ToolCallStarted(SID, "t1", "npm install"), at=10.0)
    out = d.advance(610.0)
    stale = [p for p in of_type(out, PostText) if p.key == "presence.stale"]
    assert [p.params for p in stale] == [
        {"silent": Text("time.minutes", {"n": 10}), "activity": "npm install"}
    ]
    assert of_type(out, CancelTurn) == []
    assert d.conv.state is ExecState.STALE
    assert keys(d.advance(1209.9)) == []  # one line; no heartbeat pretending it still works


def test_a_turn_silent_for_two_stale_windows_is_ended_by_the_bridge() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "The whole answer."), at=10.0)  # ...and then no result, ever
    out = d.advance(610.0)
    assert [p.text for p in of_type(out, RelayAgentText)] == ["The whole answer."]
    out = d.advance(1210.0)
    assert of_type(out, CancelTurn) == [CancelTurn("m1", SID)]
    assert [(p.key, p.final) for p in of_type(out, PostText)] == [("presence.stalled_ended", True)]
    assert of_type(out, RecordTerminal)[0].outcome is Outcome.TIMED_OUT


def test_stall_without_any_sign_of_life_says_no_response() -> None:
    d = Driver()
    d.start()
    out = d.advance(600.0)
    assert "presence.stale_no_activity" in keys(out)


def test_a_sign_of_life_after_a_stall_resumes_streaming() -> None:
    d = Driver()
    d.start()
    d.advance(600.0)
    d.feed(ThoughtChunk(SID, "..."), at=700.0)
    assert d.conv.state is ExecState.STREAMING
    assert d.conv.turn is not None
    assert d.conv.turn.activity == Activity(ActivityKind.THINKING)
    # The user's last line said "no progress" 100 s ago: the next heartbeat says it moves again.
    assert keys(d.advance(700.0)) == ["presence.heartbeat"]
    assert keys(d.advance(759.9)) == []
    assert keys(d.advance(760.0)) == ["presence.heartbeat"]


def test_a_closed_conversation_cancels_silently_and_drops_everything_after() -> None:
    d = Driver()
    d.start()
    d.message("m2", at=1.0)
    out = d.feed(ConversationClosed("bot removed"), at=2.0)
    assert posts(out) == []
    assert of_type(out, CancelTurn) == [CancelTurn("m1", SID)]
    assert of_type(out, RecordTerminal)[0].outcome is Outcome.INTERRUPTED
    assert d.conv.state is ExecState.CLOSED
    assert posts(d.feed(UserMessage("m3", "ou_alice", "hi"), at=3.0)) == []
    assert keys(d.advance(5000.0)) == []


def test_no_running_hint_before_the_runtime_took_the_prompt() -> None:
    """Hard rule 2: a runtime still starting (or failing to) is not "working on it"."""
    from bridge.runtime.events import PromptSent

    d = Driver()
    d.message("m1", at=0.0)
    assert keys(d.advance(30.0)) == []
    d.feed(PromptSent(SID), at=30.0)
    # The hint is overdue, but the runtime gets half the delay to answer by itself first.
    assert keys(d.advance(32.4)) == []
    assert keys(d.advance(32.5)) == ["presence.running_hint"]


def test_a_quick_answer_after_a_slow_start_gets_no_hint() -> None:
    from bridge.runtime.events import MessageChunk, PromptSent, StopReason, TurnEnded

    d = Driver()
    d.message("m1", at=0.0)
    d.feed(PromptSent(SID), at=12.0)
    d.advance(12.3)  # the old deadline (5.0) is long past; the clock runs on
    d.feed(MessageChunk(SID, "hi"), at=12.3)
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=12.4)
    assert "presence.running_hint" not in keys(d.effects)


def test_a_slow_start_that_fails_shows_only_the_fault_line() -> None:
    d = Driver()
    d.message("m1", at=0.0)
    d.advance(20.0)
    out = d.feed(RuntimeUnavailableAtStart("m1", "spawn timed out"), at=20.0)
    assert keys(d.effects) == ["presence.runtime_unavailable"]
    assert finals(out)[0].reply_to == "m1"
