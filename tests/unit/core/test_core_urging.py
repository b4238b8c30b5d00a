"""A card left unanswered reaches whoever may answer it: Feishu's urgent notification once
(`Urge`), or without the scope an @-mention on the reminder line; in a group the pause line
names whose turn it is."""

from __future__ import annotations

from dataclasses import replace

from bridge.core.effects import PostText, Urge
from bridge.core.inputs import (
    ApprovalClicked,
    QuestionAnswered,
    UrgentUnavailable,
    UrgeRefused,
    UserMessage,
)
from bridge.core.presence import Timings
from bridge.core.state import Conversation, Options, Urgency
from bridge.runtime.events import PermissionRequested, PromptSent
from tests.unit.core.core_driver import ALICE, SID, Driver, T, keys, of_type
from tests.unit.core.test_core_waiting import ASK, OPTIONS, QUESTION

BOSS, CHIEF = "ou_boss", "ou_chief"
APP = Options(urgency=Urgency.APP, approvers=frozenset({CHIEF, BOSS}))
HALF = T.approval_timeout / 2  # the reminder, and by default the urge
CARD = "om_m1:card:r1"  # the message Feishu gave the card (core_driver.Driver.shown)


def waiting(options: Options = APP, conv: Conversation | None = None, t: Timings = T) -> Driver:
    d = Driver(conv or Conversation(options=options), t)
    d.start()
    d.ask(ASK, at=10.0)  # shown at 10
    return d


def urges(d: Driver) -> list[Urge]:
    return of_type(d.effects, Urge)


def lines(d: Driver, key: str) -> list[PostText]:
    return [e for e in of_type(d.effects, PostText) if e.key == key]


def test_one_urge_with_the_reminder_to_the_requester_and_the_approvers() -> None:
    d = waiting()
    assert keys(d.advance(10.0 + HALF - 0.1)) == []
    assert urges(d) == []
    out = d.advance(10.0 + HALF)
    assert keys(out) == ["presence.approval_reminder"]
    assert of_type(out, Urge) == [Urge("m1", ("r1",), (CARD,), (ALICE, BOSS, CHIEF))]
    # The reminder line is as it always was (no mentions: the urge is the notification).
    assert lines(d, "presence.approval_reminder")[0].mentions == ()
    # Once: nothing more until the timeout, which urges no one.
    d.advance(10.0 + T.approval_timeout)
    assert len(urges(d)) == 1
    assert d.conv.turn is None or d.conv.turn.terminal


def test_four_eyes_urges_only_the_approvers() -> None:
    d = waiting(replace(APP, requester_may_approve=False))
    d.advance(10.0 + HALF)
    assert [u.open_ids for u in urges(d)] == [(BOSS, CHIEF)]


def test_the_urge_comes_when_set_counted_from_the_card_being_shown() -> None:
    d = Driver(Conversation(options=APP), replace(T, urge=60.0))
    d.start()
    out = d.feed(ASK, at=10.0)
    d.advance(200.0)  # the card waits for Feishu: nobody is urged about a card not seen
    assert urges(d) == []
    d.shown(out, at=200.0)
    d.advance(259.9)
    assert urges(d) == []
    d.advance(260.0)
    assert len(urges(d)) == 1
    d.advance(10.0 + HALF + 200.0)  # the reminder later urges nobody again
    assert len(urges(d)) == 1
    assert len(lines(d, "presence.approval_reminder")) == 1


def test_nothing_urges_an_approval_already_answered() -> None:
    d = waiting()
    d.feed(ApprovalClicked("r1", "allow", ALICE), at=20.0)
    d.advance(10.0 + T.approval_timeout + 10)
    assert urges(d) == []


def test_nothing_urges_after_the_round_ended() -> None:
    d = waiting(t=replace(T, urge=T.approval_timeout + 5))  # later than the timeout
    d.advance(10.0 + T.approval_timeout + 100)
    assert urges(d) == []
    assert keys(d.effects)[-1] == "presence.approval_timed_out"


def test_off_keeps_today_s_reminder_alone() -> None:
    d = waiting(Options(approvers=frozenset({BOSS})))
    d.advance(10.0 + T.approval_timeout)
    assert urges(d) == []
    assert [p.mentions for p in lines(d, "presence.approval_reminder")] == [()]


def test_a_question_urges_its_requester_and_the_approvers() -> None:
    d = Driver(Conversation(options=APP))
    d.start()
    d.ask(QUESTION, at=10.0)
    d.advance(10.0 + HALF)
    assert urges(d) == [
        Urge("m1", ("q1",), ("om_m1:question:q1",), (ALICE, BOSS, CHIEF)),
    ]
    assert keys(of_type(d.effects, PostText))[-1] == "presence.reply_reminder"


def test_a_question_answered_is_not_urged() -> None:
    d = Driver(Conversation(options=APP))
    d.start()
    d.ask(QUESTION, at=10.0)
    d.feed(QuestionAnswered("q1", "main", ALICE), at=30.0)
    d.advance(10.0 + T.approval_timeout)
    assert urges(d) == []


def test_without_the_scope_the_reminder_line_mentions_them_instead() -> None:
    d = waiting(replace(APP, urgency=Urgency.MENTION))
    out = d.advance(10.0 + HALF)
    assert of_type(out, Urge) == []
    reminders = lines(d, "presence.approval_reminder")
    assert [r.mentions for r in reminders] == [(ALICE, BOSS, CHIEF)]  # one line, not two
    d.advance(10.0 + T.approval_timeout - 1)
    assert [r.mentions for r in lines(d, "presence.approval_reminder")] == [(ALICE, BOSS, CHIEF)]


def test_without_the_scope_an_earlier_urge_is_a_line_of_its_own() -> None:
    d = waiting(replace(APP, urgency=Urgency.MENTION), t=replace(T, urge=60.0))
    out = d.advance(70.0)
    assert [(p.key, p.mentions) for p in of_type(out, PostText)] == [
        ("presence.approval_reminder", (ALICE, BOSS, CHIEF))
    ]
    d.advance(10.0 + HALF)
    assert [r.mentions for r in lines(d, "presence.approval_reminder")] == [
        (ALICE, BOSS, CHIEF),
        (),  # the reminder itself, as always
    ]


def test_a_refusal_for_the_scope_mentions_them_once_and_from_then_on() -> None:
    d = waiting()
    d.advance(10.0 + HALF)
    out = d.feed(UrgeRefused("m1", ("r1",)), at=10.0 + HALF + 1)
    assert [(p.key, p.mentions) for p in of_type(out, PostText)] == [
        ("presence.approval_reminder", (ALICE, BOSS, CHIEF))
    ]
    assert d.conv.options.urgency is Urgency.MENTION
    # Answered meanwhile: a late refusal says nothing.
    d.feed(ApprovalClicked("r1", "allow", ALICE), at=10.0 + HALF + 2)
    assert of_type(d.feed(UrgeRefused("m1", ("r1",))), PostText) == []


def test_told_the_scope_is_missing_a_conversation_mentions_but_off_stays_off() -> None:
    d = Driver(Conversation(options=APP))
    d.feed(UrgentUnavailable())
    assert d.conv.options.urgency is Urgency.MENTION
    off = Driver()
    off.feed(UrgentUnavailable())
    assert off.conv.options.urgency is Urgency.OFF


def test_in_a_group_the_pause_line_names_whose_turn_it_is() -> None:
    d = Driver(Conversation(options=replace(APP, urgency=Urgency.OFF)))
    d.feed(UserMessage("m1", ALICE, "hello", in_group=True), at=0.0)
    d.feed(PromptSent(SID))
    out = d.ask(ASK, at=10.0)
    pause = [p for p in of_type(out, PostText) if p.key == "presence.waiting_approval"]
    assert [p.mentions for p in pause] == [(ALICE, BOSS, CHIEF)]
    second = PermissionRequested(SID, "r2", "Run `make`", OPTIONS)
    d.feed(second, at=11.0)  # already paused: no second pause line
    assert len(lines(d, "presence.waiting_approval")) == 1


def test_in_a_private_chat_the_pause_line_is_unchanged() -> None:
    d = waiting()
    pause = lines(d, "presence.waiting_approval")
    assert [p.mentions for p in pause] == [()]


def test_a_topic_thread_is_a_group() -> None:
    d = Driver(Conversation(options=Options(), key="oc_1:omt_1"))
    d.start()
    d.ask(QUESTION, at=10.0)
    assert [p.mentions for p in lines(d, "presence.waiting_reply")] == [(ALICE,)]
