"""Card style in the core: when the status card appears, what each view says, that every
end finalizes it, and that a refused card hands the turn back to lines losing nothing."""

from __future__ import annotations

from bridge.core.effects import CardPhase, PostText, RelayAgentText, ShowStatusCard
from bridge.core.inputs import Command, CommandName, StatusCardFailed, TurnInterruptedByRestart
from bridge.core.pages import page_end, weight
from bridge.core.state import Conversation, Options, PresenceStyle
from bridge.core.status_card import MAX_PAGES, PAGE_CHARS, PAGE_WEIGHT
from bridge.runtime.events import (
    AnswerRewound,
    MessageChunk,
    PermissionKind,
    PermissionOption,
    PermissionRequested,
    PlanEntry,
    PlanUpdated,
    RuntimeExited,
    StopReason,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
)
from tests.unit.core.core_driver import ALICE, SID, Driver, keys, of_type

CARD = Options(presence_style=PresenceStyle.CARD)
ALLOW = (PermissionOption("allow", "Allow", PermissionKind.ALLOW_ONCE),)


def driver() -> Driver:
    return Driver(Conversation(options=CARD))


def cards(effects: list[object]) -> list[ShowStatusCard]:
    return [e for e in effects if isinstance(e, ShowStatusCard)]


def test_a_fast_answer_gets_no_card_only_its_answer() -> None:
    d = driver()
    d.start()
    d.feed(MessageChunk(SID, "quick"), at=1.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=1.5)
    assert cards(d.effects) == []
    assert [(e.text, e.final) for e in of_type(out, RelayAgentText)] == [("quick", True)]


def test_the_card_appears_at_the_first_hint_instead_of_the_hint_line() -> None:
    d = driver()
    d.start()
    out = d.advance(5.0)
    assert keys(out) == []
    (card,) = cards(out)
    assert (card.view.phase, card.view.elapsed, card.final) == (CardPhase.WORKING, 5.0, False)
    assert card.card_key == "m1:status"
    assert card.reply_to == "m1"


def test_the_first_real_progress_brings_the_card_earlier_and_lists_tools_and_plan() -> None:
    d = driver()
    d.start()
    d.feed(MessageChunk(SID, "let me look"), at=1.0)
    out = d.feed(ToolCallStarted(SID, tool_call_id="t1", title="Read a.py"), at=1.2)
    assert keys(out) == []  # neither the commentary nor the progress line is a message
    view = cards(out)[-1].view
    assert view.text == "let me look"
    assert [(t.title, t.status) for t in view.tools] == [("Read a.py", "pending")]
    d.feed(ToolCallUpdated(SID, tool_call_id="t1", status="completed"), at=1.3)
    plan = (PlanEntry("A", "completed"), PlanEntry("B", "in_progress"))
    d.feed(PlanUpdated(SID, entries=plan), at=1.4)
    last = cards(d.effects)[-1].view
    assert [(t.title, t.status) for t in last.tools] == [("Read a.py", "completed")]
    assert last.plan == plan


def test_the_answer_streams_into_the_card_and_ends_there() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    d.feed(MessageChunk(SID, "hello "), at=6.0)
    d.feed(MessageChunk(SID, "world"), at=6.5)
    assert [c.view.text for c in cards(d.effects)] == ["", "hello", "hello world"]
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=7.0)
    (last,) = cards(out)
    assert last.final
    assert (last.view.phase, last.view.text, last.view.end_key) == (
        CardPhase.ENDED,
        "hello world",
        None,
    )
    assert of_type(out, RelayAgentText) == []  # the card is the answer
    assert of_type(out, PostText) == []


def on_cards(effects: list[object]) -> tuple[list[str], dict[str, ShowStatusCard]]:
    """The cards in the order they first appeared, and each one's last view."""
    order: list[str] = []
    last: dict[str, ShowStatusCard] = {}
    for card in cards(effects):
        if card.card_key not in last:
            order.append(card.card_key)
        last[card.card_key] = card
    return order, last


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_a_long_answer_continues_on_cards_below_and_is_shown_once() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    answer = words(6000)  # 33,000 characters: six pages
    chunks = [answer[i : i + 40] for i in range(0, len(answer), 40)]
    for n, chunk in enumerate(chunks):
        out = d.feed(MessageChunk(SID, chunk), at=6.0 + n / 100)
        assert cards(out), "every chunk changes the page being written"
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=30.0)
    order, last = on_cards(d.effects)
    assert order == ["m1:status", *(f"m1:status:{n}" for n in range(2, len(order) + 1))]
    assert 4 <= len(order) <= MAX_PAGES
    assert all(last[key].final for key in order)
    assert "".join(last[key].view.text for key in order) == answer
    assert all(weight(last[key].view.text) <= PAGE_WEIGHT for key in order)
    assert all(len(last[key].view.text) <= PAGE_CHARS for key in order)
    assert [last[key].view.page for key in order] == list(range(len(order)))
    assert not any(last[key].view.cut for key in order)
    assert of_type(out, RelayAgentText) == []  # nothing shown twice


def test_a_closed_page_never_changes_again() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    answer = words(4000)
    for n in range(0, len(answer), 40):
        d.feed(MessageChunk(SID, answer[n : n + 40]), at=6.0 + n / 4000)
        d.advance(d.now)  # heartbeats and the like refresh the status card meanwhile
    shown = cards(d.effects)
    opened = next(i for i, c in enumerate(shown) if c.card_key == "m1:status:2")
    status_after = {c.view.text for c in shown[opened:] if c.card_key == "m1:status"}
    assert len(status_after) == 1  # its page closed: only its own lines may change
    (head,) = status_after
    assert answer.startswith(head)
    assert answer[len(head) :].startswith(shown[opened].view.text)
    later = [c.card_key for c in shown[opened:]]
    assert later.count("m1:status:2") > 100  # the chunks after it change the card below


def test_one_huge_chunk_fills_several_pages_at_once() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    answer = words(7000)
    d.feed(MessageChunk(SID, answer), at=6.0)
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=7.0)
    order, last = on_cards(d.effects)
    assert len(order) >= 3
    assert "".join(last[key].view.text for key in order) == answer


def test_past_the_last_card_the_rest_follows_as_messages_as_it_fills() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    answer = "字" * (PAGE_WEIGHT // 3 * (MAX_PAGES + 2))  # two pages more than the cards hold
    relays: list[RelayAgentText] = []
    for n in range(0, len(answer), 500):
        out = d.feed(MessageChunk(SID, answer[n : n + 500]), at=6.0 + n / 10_000)
        relays += of_type(out, RelayAgentText)
    assert len(relays) == 1, "a page's worth past the cards goes out before the end"
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=30.0)
    order, last = on_cards(d.effects)
    assert len(order) == MAX_PAGES
    assert last[order[-1]].view.cut
    shown = "".join(last[key].view.text for key in order)
    (end,) = of_type(out, RelayAgentText)
    assert (end.final, end.idempotency_key) == (True, "m1:end")
    assert shown + relays[0].text + end.text == answer  # the rest, once, in order


def test_a_page_closes_after_a_paragraph_outside_a_code_block() -> None:
    para = "a sentence of prose.\n" * 100 + "\n"
    code = "```python\n" + "x = 1\n" * 2000 + "```\n"
    text = para * 3 + code
    end = page_end(text, PAGE_CHARS, PAGE_WEIGHT)
    assert text[:end].endswith("\n\n")
    assert "```" not in text[:end]
    assert weight(text[:end]) <= PAGE_WEIGHT


def test_a_page_of_one_endless_line_is_cut_where_it_fills() -> None:
    assert page_end("z" * PAGE_WEIGHT * 2, PAGE_CHARS, PAGE_WEIGHT) == PAGE_CHARS
    assert page_end("字" * PAGE_WEIGHT, PAGE_CHARS, PAGE_WEIGHT) == PAGE_WEIGHT // 3


def test_a_refused_continuation_card_hands_the_rest_to_messages() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    answer = words(4000)
    d.feed(MessageChunk(SID, answer[:11000]), at=6.0)
    live = cards(d.effects)[-1]
    assert live.card_key == "m1:status:2"
    d.feed(StatusCardFailed("m1", "m1", live.view, final=False), at=6.5)
    d.feed(MessageChunk(SID, answer[11000:]), at=7.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=8.0)
    status = [c for c in cards(out) if c.card_key == "m1:status"][-1]
    assert status.final
    assert status.view.cut
    relayed = "".join(r.text for r in of_type(d.effects, RelayAgentText))
    assert status.view.text + relayed == answer


def test_stop_and_faults_finalize_the_card_and_still_say_so_as_a_message() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    d.feed(Command("m2", ALICE, CommandName.STOP), at=6.0)
    out = d.feed(TurnEnded(SID, StopReason.CANCELLED), at=6.5)
    (last,) = cards(out)
    assert (last.final, last.view.end_key) == (True, "presence.stopped")
    assert keys(out) == ["presence.stopped"]


def test_an_empty_end_finalizes_the_card_with_the_empty_line() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=6.0)
    assert cards(out)[0].view.end_key == "presence.ended_empty"
    assert keys(out) == ["presence.ended_empty"]


def test_waiting_on_a_person_pauses_the_card_and_keeps_the_waiting_line() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    out = d.feed(
        PermissionRequested(SID, request_id="r1", title="rm -rf build", options=ALLOW), at=8.0
    )
    assert keys(out) == ["presence.waiting_approval"]
    assert cards(out)[-1].view.phase is CardPhase.WAITING_APPROVAL
    # No heartbeat and no elapsed counter while the person decides.
    assert cards(d.advance(600.0)) == []


def test_a_crash_shows_recovering_on_the_card() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    out = d.feed(RuntimeExited(SID, returncode=1), at=6.0)
    assert keys(out) == ["presence.recovering"]
    assert cards(out)[-1].view.phase is CardPhase.RECOVERING


def test_a_restart_finalizes_the_card_of_a_turn_that_died_with_the_process() -> None:
    d = driver()
    out = d.feed(TurnInterruptedByRestart("m1", "m1", ALICE), at=1.0)
    (card,) = cards(out)
    assert (card.final, card.existing_only, card.view.end_key) == (
        True,
        True,
        "presence.unrecoverable",
    )


def test_a_refused_card_hands_the_turn_back_to_lines_losing_nothing() -> None:
    d = driver()
    d.start()
    d.feed(MessageChunk(SID, "looking"), at=1.0)
    d.feed(ToolCallStarted(SID, tool_call_id="t1", title="Read a.py"), at=1.2)
    view = cards(d.effects)[-1].view
    out = d.feed(StatusCardFailed("m1", "m1", view, final=False), at=1.3)
    assert [e.text for e in of_type(out, RelayAgentText)] == ["looking"]
    assert keys(out) == ["<reply>", "presence.running_hint"]
    d.feed(MessageChunk(SID, "done"), at=2.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.5)
    assert cards(out) == []
    assert [(e.text, e.final) for e in of_type(out, RelayAgentText)] == [("done", True)]


def test_a_refused_final_card_posts_the_answer_it_carried() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    d.feed(MessageChunk(SID, "the answer"), at=6.0)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=7.0)
    last = cards(out)[0]
    out = d.feed(StatusCardFailed("m1", "m1", last.view, final=True), at=7.1)
    assert [(e.text, e.reply_to) for e in of_type(out, RelayAgentText)] == [("the answer", "m1")]


def test_while_the_agent_only_thinks_the_cards_elapsed_time_moves_on_every_tick() -> None:
    """No line and no new view from the agent: the card is still re-shown every card tick
    (3 s), its elapsed time moving on, so a thinking agent never looks stuck; waiting on a
    person stops the ticks, as it stops heartbeats."""
    d = driver()
    d.start()
    shown = [card.view.elapsed for card in cards(d.advance(5.0))]
    for at in (8.0, 11.0, 14.0):
        shown += [card.view.elapsed for card in cards(d.advance(at))]
    assert shown == [5.0, 8.0, 11.0, 14.0]
    assert keys(d.effects) == []  # no line in the chat
    ask = PermissionRequested(SID, "r1", "Run tests", ALLOW)
    d.feed(ask, at=15.0)
    assert [c.view.phase for c in cards(d.advance(30.0))] == []


def test_an_answer_that_streams_gets_its_card_a_second_after_its_first_words() -> None:
    d = driver()
    d.start()
    d.feed(MessageChunk(SID, "Let me explain"), at=0.5)
    out = d.advance(1.6)
    (card,) = cards(out)
    assert d.now == 1.6
    assert card.view.text == "Let me explain"
    assert card.view.elapsed == 1.5  # shown at 0.5 + 1 s, not at the 5-s first hint


def test_a_page_that_begins_inside_a_code_block_opens_it_again() -> None:
    d = driver()
    d.start()
    d.advance(5.0)
    answer = (
        "Here it is:\n\n```python\n" + "".join(f"x{i} = [{i}]\n" for i in range(2000)) + "```\n"
    )
    d.feed(MessageChunk(SID, answer), at=6.0)
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=7.0)
    order, last = on_cards(d.effects)
    assert len(order) >= 3
    assert last[order[0]].view.code == ""
    assert all(last[key].view.code == "```python" for key in order[1:])
    assert "".join(last[key].view.text for key in order) == answer.strip()


def test_a_rewound_answer_is_shown_as_the_run_sent_again_writes_it() -> None:
    """The prompt goes again on a restarted agent (its first run's answer was a cancelled
    turn's leftover): what the first run streamed meanwhile leaves the card, and the card
    ends with the answer once (seed 82280: its first chunk twice)."""
    d = driver()
    d.start()
    d.advance(5.0)
    d.feed(MessageChunk(SID, "chunk "), at=6.0)
    d.feed(AnswerRewound(SID), at=6.5)
    d.feed(MessageChunk(SID, "chunk "), at=7.0)
    d.feed(MessageChunk(SID, "answer"), at=7.5)
    out = d.feed(TurnEnded(SID, StopReason.END_TURN), at=8.0)
    assert [c.view.text for c in cards(d.effects)][-4:] == [
        "",
        "chunk",
        "chunk answer",
        "chunk answer",
    ]
    (last,) = cards(out)
    assert (last.final, last.view.text) == (True, "chunk answer")
