"""Presence while the assistant is moving: hint, progress, heartbeat, replies."""

from __future__ import annotations

from bridge.core.effects import PostText, RecordTerminal, RelayAgentText, StartTurn
from bridge.core.state import Conversation, Ending, ExecState, Options, Outcome
from bridge.core.text import Text
from bridge.runtime.events import (
    MessageChunk,
    PlanEntry,
    PlanUpdated,
    StopReason,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
)
from tests.unit.core.core_driver import ALICE, SID, Driver, T, finals, keys, of_type, posts


def test_message_starts_a_turn_in_waiting_response() -> None:
    d = Driver()
    out = d.message("m1", "fix the bug", at=10.0)
    assert of_type(out, StartTurn) == [StartTurn("m1", "fix the bug", None)]
    assert d.conv.state is ExecState.WAITING_RESPONSE
    assert posts(out) == []  # the ack reaction is the receiver's; no "received" text by default


def test_received_text_only_when_the_flag_is_on() -> None:
    d = Driver(Conversation(options=Options(received_text=True)))
    out = d.message("m1")
    assert keys(out) == ["presence.received"]
    assert posts(out)[0].reply_to == "m1"
    assert out.index(posts(out)[0]) < out.index(of_type(out, StartTurn)[0])


def test_one_running_hint_when_no_real_progress_within_first_hint() -> None:
    d = Driver()
    d.start()
    d.feed(ThoughtChunk(SID, "hmm"), at=1.0)  # thinking is a sign of life, not visible progress
    assert keys(d.advance(4.9)) == []
    assert keys(d.advance(5.0)) == ["presence.running_hint"]
    assert keys(d.advance(30.0)) == []
    assert d.conv.state is ExecState.STREAMING


def test_no_running_hint_when_the_turn_answers_before() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "Done."), at=1.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    assert keys(out) == ["<reply>"]
    assert keys(d.advance(1000.0)) == []
    assert d.conv.state is ExecState.IDLE


def test_no_running_hint_when_real_progress_arrives_first() -> None:
    d = Driver()
    d.start()
    out = d.feed(ToolCallStarted(SID, "t1", "Read main.py"), at=1.0)
    assert [(p.key, p.params) for p in of_type(out, PostText)] == [
        ("progress.tool", {"title": "Read main.py"})
    ]
    assert "presence.running_hint" not in keys(d.advance(59.0))


def test_progress_is_throttled_and_the_latest_line_wins_the_next_slot() -> None:
    d = Driver()
    d.start()
    assert keys(d.feed(ToolCallStarted(SID, "t1", "A"), at=1.0)) == ["progress.tool"]
    assert keys(d.feed(ToolCallStarted(SID, "t2", "B"), at=2.0)) == []
    assert keys(d.feed(ToolCallStarted(SID, "t3", "C"), at=3.0)) == []
    out = d.advance(4.0)
    assert [p.params for p in of_type(out, PostText)] == [{"title": "C"}]
    assert keys(d.feed(ToolCallStarted(SID, "t4", "D"), at=7.5)) == ["progress.tool"]


def test_a_repeated_tool_title_is_not_posted_again() -> None:
    d = Driver()
    d.start()
    d.feed(ToolCallStarted(SID, "t1", "Run tests"), at=1.0)
    assert keys(d.feed(ToolCallStarted(SID, "t2", "Run tests"), at=10.0)) == []


def test_tool_updates_are_signs_of_life_but_not_lines() -> None:
    d = Driver()
    d.start()
    d.feed(ToolCallStarted(SID, "t1", "Build"), at=1.0)
    out = d.feed(ToolCallUpdated(SID, "t1", title="Build (step 2)", status="in_progress"), at=9.0)
    assert keys(out) == []
    assert d.conv.turn is not None
    assert d.conv.turn.last_activity_at == 9.0


def test_plan_progress_names_the_current_step() -> None:
    d = Driver()
    d.start()
    plan = (
        PlanEntry("read code", "completed"),
        PlanEntry("write fix", "in_progress"),
        PlanEntry("run tests", "pending"),
    )
    out = d.feed(PlanUpdated(SID, plan), at=1.0)
    assert [(p.key, p.params) for p in of_type(out, PostText)] == [
        ("progress.plan", {"done": 1, "total": 3, "current": "write fix"})
    ]
    done = tuple(PlanEntry(e.content, "completed") for e in plan)
    assert keys(d.feed(PlanUpdated(SID, done), at=10.0)) == []  # nothing current: nothing to say


def test_heartbeat_only_after_heartbeat_seconds_of_silence_and_says_elapsed() -> None:
    d = Driver()
    d.start()
    assert keys(d.advance(5.0)) == ["presence.running_hint"]
    assert keys(d.advance(64.9)) == []
    out = d.advance(65.0)
    assert [(p.key, p.params) for p in of_type(out, PostText)] == [
        ("presence.heartbeat", {"elapsed": Text("time.minutes", {"n": 1})})
    ]
    assert keys(d.advance(124.9)) == []
    assert keys(d.advance(125.0)) == ["presence.heartbeat"]


def test_real_progress_postpones_the_heartbeat() -> None:
    d = Driver()
    d.start()
    d.advance(5.0)  # hint
    d.feed(ToolCallStarted(SID, "t1", "Compile"), at=50.0)
    assert keys(d.advance(109.9)) == []
    assert keys(d.advance(110.0)) == ["presence.heartbeat"]


def test_commentary_between_tool_calls_is_relayed_at_the_boundary() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "Let me look "), at=1.0)
    assert keys(d.feed(MessageChunk(SID, "at the tests."), at=1.5)) == []
    out = d.feed(ToolCallStarted(SID, "t1", "Read tests"), at=2.0)
    relays = of_type(out, RelayAgentText)
    assert [(r.text, r.final, r.reply_to) for r in relays] == [
        ("Let me look at the tests.", False, "m1")
    ]
    # The tool title right after commentary waits for its progress slot.
    assert keys(out) == ["<reply>"]
    assert keys(d.advance(5.0)) == ["progress.tool"]


def test_the_final_reply_is_the_text_after_the_last_tool_and_ends_the_round() -> None:
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "Checking."), at=1.0)
    d.feed(ToolCallStarted(SID, "t1", "Grep"), at=2.0)
    d.feed(MessageChunk(SID, "Found it: "), at=3.0)
    d.feed(MessageChunk(SID, "line 42."), at=3.5)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=4.0)
    assert [(type(e).__name__, getattr(e, "final", None)) for e in out if not _timer(e)] == [
        ("RelayAgentText", True),
        ("RecordTerminal", None),
        ("Supersede", None),
    ]
    reply = of_type(out, RelayAgentText)[0]
    assert (reply.text, reply.idempotency_key) == ("Found it: line 42.", "m1:end")
    assert of_type(out, RecordTerminal) == [
        RecordTerminal("m1", Outcome.COMPLETED, Ending.COMPLETED, "end_turn")
    ]
    assert d.conv.state is ExecState.IDLE


def test_a_turn_that_ends_with_nothing_visible_gets_the_ended_line() -> None:
    d = Driver()
    d.start()
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=1.0)
    assert [(p.key, p.final, p.idempotency_key) for p in of_type(out, PostText)] == [
        ("presence.ended_empty", True, "m1:end")
    ]


def test_a_turn_ending_right_after_commentary_and_tools_gets_the_ended_line() -> None:
    # The commentary went out mid-round; without an end line the user could not tell it ended.
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "Running the migration."), at=1.0)
    d.feed(ToolCallStarted(SID, "t1", "migrate"), at=2.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=30.0)
    assert [p.key for p in finals(out) if isinstance(p, PostText)] == ["presence.ended_empty"]


def test_every_post_of_a_turn_has_its_own_deterministic_idempotency_key() -> None:
    def run() -> list[str]:
        d = Driver()
        d.start()
        d.advance(5.0)
        d.feed(MessageChunk(SID, "a"), at=6.0)
        d.feed(ToolCallStarted(SID, "t1", "x"), at=7.0)
        d.advance(200.0)
        d.feed(TurnEnded(SID, StopReason.END_TURN), at=201.0)
        return [p.idempotency_key for p in posts(d.effects)]

    first = run()
    assert len(first) == len(set(first)) >= 5
    assert run() == first  # same inputs, same keys: a replay cannot double-post
    assert first[-1] == "m1:end"


def test_requester_is_kept_for_the_turn() -> None:
    d = Driver()
    d.start()
    assert d.conv.turn is not None
    assert d.conv.turn.requester == ALICE


def _timer(effect: object) -> bool:
    return type(effect).__name__ in {"SetTimer", "ClearTimer"}


def test_timers_follow_the_state() -> None:
    d = Driver()
    d.start()
    # No heartbeat timer yet: a heartbeat only ever follows the hint or real progress.
    assert dict(d.conv.timers) == {"stale": 600.0, "first_hint": 5.0}
    d.advance(5.0)
    assert dict(d.conv.timers) == {"stale": 600.0, "heartbeat": 65.0}
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=6.0)
    assert d.conv.timers == ()
    assert T.first_hint == 5.0


def test_commentary_between_rapid_tool_calls_is_held_for_the_next_progress_slot() -> None:
    from bridge.core.effects import RelayAgentText as Relay
    from bridge.runtime.events import MessageChunk as Chunk

    d = Driver()
    d.start()
    out = []
    for i in range(20):  # words, a tool, words, a tool… all within one progress interval
        out += d.feed(Chunk(SID, f"step {i}"), at=1.0 + i * 0.01)
        out += d.feed(ToolCallStarted(SID, f"t{i}", f"tool {i}"), at=1.0 + i * 0.01)
    relays = [e for e in out if isinstance(e, Relay)]
    assert [r.text for r in relays] == ["step 0"]  # the first slot; the rest waits
    later = d.advance(4.0)  # the next progress slot (interval 3 s)
    held = [e.text for e in later if isinstance(e, Relay)]
    assert held == ["\n\n".join(f"step {i}" for i in range(1, 20))]


def test_a_long_answer_in_tiny_chunks_arrives_whole_as_one_reply() -> None:
    from bridge.core.effects import RelayAgentText as Relay
    from bridge.runtime.events import MessageChunk as Chunk
    from bridge.runtime.events import StopReason, TurnEnded

    d = Driver()
    d.start()
    for _ in range(5_000):
        d.feed(Chunk(SID, "ab"), at=1.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    (reply,) = [e for e in out if isinstance(e, Relay)]
    assert reply.text == "ab" * 5_000
    assert reply.final
