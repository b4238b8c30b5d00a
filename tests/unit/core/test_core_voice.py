"""Voice messages in the core: a voice is words to come (never held; it takes what is held
and starts its own turn), what was heard is one quoted line before the prompt, a voice that
cannot be heard ends its round with one line and no prompt, and voice off is refused."""

from __future__ import annotations

from bridge.core.effects import MarkMessageDone, PostText, RecordTerminal, SendPrompt, StartTurn
from bridge.core.inputs import MessageRecalled, SessionOpened, UserMessage, VoiceHeard
from bridge.core.state import Attachment, Ending, ExecState, Outcome
from tests.unit.core.core_driver import ALICE, SID, Driver, finals, keys, of_type

VOICE = Attachment("m1", "voice", "file_v3_a", "file")
IMAGE = Attachment("m0", "image", "img_v3_b", "image")


def voice(d: Driver, mid: str = "m1") -> list[object]:
    return list(d.feed(UserMessage(mid, ALICE, "", (Attachment(mid, "voice", "k", "file"),))))


def test_a_voice_starts_its_own_turn_and_takes_the_held_image() -> None:
    d = Driver()
    d.feed(UserMessage("m0", ALICE, "", (IMAGE,)))
    assert d.conv.held  # an image alone waits for words
    out = d.feed(UserMessage("m1", ALICE, "", (VOICE,)))
    (start,) = of_type(out, StartTurn)
    assert start.attachments == (IMAGE, VOICE)
    assert start.text == ""
    assert d.conv.held == ()
    assert "attachment.held" not in keys(out)
    assert MarkMessageDone("m0") in out


def test_what_was_heard_is_one_quoted_line_before_the_prompt() -> None:
    d = Driver()
    voice(d)
    out = d.feed(VoiceHeard("m1", "fix the\nlogin  page"))
    (line,) = of_type(out, PostText)
    assert (line.key, line.params, line.reply_to) == (
        "voice.heard",
        {"text": "fix the login page"},
        "m1",
    )
    assert not line.final
    assert of_type(d.feed(SessionOpened("m1", SID)), SendPrompt)


def test_a_voice_that_cannot_be_heard_ends_the_round_with_its_line_and_no_prompt() -> None:
    d = Driver()
    voice(d)
    out = d.feed(VoiceHeard("m1", "", "too_long", 300))
    (end,) = finals(out)
    assert isinstance(end, PostText)
    assert (end.key, end.params) == ("voice.too_long", {"limit": 300})
    assert of_type(out, RecordTerminal) == [
        RecordTerminal("m1", Outcome.FAILED, Ending.VOICE, "voice too_long")
    ]
    assert d.conv.state is ExecState.IDLE
    assert d.conv.turn is None


def test_each_failure_has_its_own_line() -> None:
    for failure, key in [
        ("refused", "voice.refused"),
        ("failed", "voice.failed"),
        ("silent", "voice.silent"),
        ("undecodable", "voice.undecodable"),
        ("unfetched", "voice.unfetched"),
    ]:
        d = Driver()
        voice(d)
        assert keys(d.feed(VoiceHeard("m1", "", failure))) == [key]


def test_the_next_message_runs_after_a_voice_that_could_not_be_heard() -> None:
    d = Driver()
    voice(d)
    d.message("m2", "after")  # queued behind the voice
    out = d.feed(VoiceHeard("m1", "", "silent"))
    assert [s.turn_id for s in of_type(out, StartTurn)] == ["m2"]


def test_a_voice_recalled_while_heard_ends_once_and_what_was_heard_is_not_shown() -> None:
    d = Driver()
    voice(d)
    recalled = d.feed(MessageRecalled("m1"))
    assert keys(recalled) == ["presence.recalled"]
    assert keys(d.feed(VoiceHeard("m1", "words"))) == []
    assert of_type(d.feed(SessionOpened("m1", SID)), SendPrompt) == []


def test_a_voice_recalled_before_its_failure_settles_without_a_second_line() -> None:
    d = Driver()
    voice(d)
    d.feed(MessageRecalled("m1"))
    assert keys(d.feed(VoiceHeard("m1", "", "failed"))) == []
    assert d.conv.state is ExecState.IDLE


def test_voice_off_is_refused_politely_and_never_runs() -> None:
    d = Driver()
    out = d.feed(UserMessage("m1", ALICE, "", (Attachment("m1", "voice_off", "k", "file"),)))
    assert keys(out) == ["voice.off"]
    assert MarkMessageDone("m1") in out
    assert of_type(out, StartTurn) == []
    assert d.conv.held == ()


def test_a_late_answer_for_another_turn_is_dropped() -> None:
    d = Driver()
    voice(d)
    assert keys(d.feed(VoiceHeard("m9", "words"))) == []
