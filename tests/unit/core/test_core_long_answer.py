"""A long answer in lines style: each message's worth is posted as soon as the agent has
written past it, and the end posts only the rest; the answer is shown once, in order."""

from __future__ import annotations

from bridge.core.effects import RelayAgentText, SendFile
from bridge.core.long_answer import MAX_RELEASED, MESSAGE_WEIGHT
from bridge.core.pages import paragraph_end, weight
from bridge.runtime.events import (
    AnswerRewound,
    MessageChunk,
    StopReason,
    ToolCallStarted,
    TurnEnded,
)
from tests.unit.core.core_driver import SID, Driver, of_type


def paragraphs(n: int, size: int = 300) -> list[str]:
    return [f"p{i} " + "x" * (size - 4 - len(str(i))) for i in range(n)]


def relays(d: Driver) -> list[RelayAgentText]:
    return of_type(d.effects, RelayAgentText)


def stream(d: Driver, text: str, piece: int = 40, at: float = 1.0) -> None:
    for i in range(0, len(text), piece):
        d.feed(MessageChunk(SID, text[i : i + piece]), at=at + i / 100_000)


def test_a_short_answer_waits_for_the_end_as_one_message() -> None:
    d = Driver()
    d.start()
    stream(d, "a short answer " * 100)
    assert relays(d) == []
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    (end,) = relays(d)
    assert end.final
    assert end.text == ("a short answer " * 100).strip()


def test_a_message_worth_is_weighed_in_bytes_not_characters() -> None:
    """20,000 characters of English are one message; 10,000 of Chinese (30,000 bytes) fill
    one while they stream."""
    english = "\n\n".join(paragraphs(66))  # 19,800 characters
    chinese = "\n\n".join("这是一个段落" * 50 for _ in range(33))  # 9,900 characters
    for answer, streamed in ((english, 0), (chinese, 1)):
        d = Driver()
        d.start()
        stream(d, answer)
        assert len(relays(d)) == streamed
        d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
        assert "\n\n".join(r.text for r in relays(d)) == answer
        assert len(relays(d)) == streamed + 1


def test_each_message_worth_goes_out_while_the_answer_streams_and_the_end_has_the_rest() -> None:
    d = Driver()
    d.start()
    answer = "\n\n".join(paragraphs(260))  # 78,000 characters in paragraphs of 300
    stream(d, answer)
    streamed = relays(d)
    assert len(streamed) == 3  # each message's worth (78 paragraphs) as the agent wrote past
    assert not any(r.final for r in streamed)
    assert all(weight(r.text) <= MESSAGE_WEIGHT for r in streamed)
    assert all(r.text.endswith("x") for r in streamed)  # cut after a paragraph, not in one
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    *parts, end = relays(d)
    assert parts == streamed
    assert end.final
    assert "\n\n".join(r.text for r in relays(d)) == answer  # once, whole, in order
    assert len({r.idempotency_key for r in relays(d)}) == 4


def test_a_long_code_block_is_never_cut_while_it_streams() -> None:
    """No paragraph ends inside a code block: it waits for the end, where the executor
    splits it with its fences balanced; the prose before it went out at once."""
    d = Driver()
    d.start()
    prose = "\n\n".join(paragraphs(70))  # 21,000 characters
    code = "```python\n" + "".join(f"x{i} = {i}\n" for i in range(1500)) + "```"  # 24,000 of weight
    stream(d, f"{prose}\n\n{code}\n\nDone.")
    (first,) = relays(d)
    assert first.text == prose
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    assert [r.text for r in relays(d)] == [prose, f"{code}\n\nDone."]


def test_a_tool_call_after_a_released_part_flushes_only_the_rest() -> None:
    d = Driver()
    d.start()
    answer = "\n\n".join(paragraphs(100))  # 30,000 characters: one part out, the rest held
    stream(d, answer)
    assert len(relays(d)) == 1
    d.feed(ToolCallStarted(SID, tool_call_id="t1", title="Read a.py"), at=2.0)
    first_and_rest = relays(d)
    assert len(first_and_rest) == 2
    assert "\n\n".join(r.text for r in first_and_rest) == answer


def test_after_the_cap_the_rest_waits_for_the_end() -> None:
    d = Driver()
    d.start()
    stream(d, "\n\n".join(paragraphs(800)), piece=400)  # 240,000 characters
    assert len(relays(d)) == MAX_RELEASED
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=4.0)
    assert len(relays(d)) == MAX_RELEASED + 1
    assert relays(d)[-1].final


def test_a_file_linked_in_a_released_part_is_still_sent_at_the_end() -> None:
    d = Driver()
    d.start()
    answer = "See [the log](file:///w/run.log).\n\n" + "\n\n".join(paragraphs(100))
    stream(d, answer)
    assert len(relays(d)) == 1
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.0)
    (sent,) = of_type(d.effects, SendFile)
    assert sent.path == "file:///w/run.log"


def test_a_list_item_is_not_cut_before_its_indented_paragraph() -> None:
    """A blank line followed by an indented line goes on the item above it: a message
    begun there would show the paragraph alone (as code, indented four spaces)."""
    item = "1. An item " + "y" * 3000
    text = f"{item}\n\n    {'z' * 3000}\n\n2. The next item {'w' * 3000}"
    end = paragraph_end(text, len(text), MESSAGE_WEIGHT)
    assert end == text.index("2. The next")
    assert paragraph_end(text[: text.index("2. The")] + "    more", 5000, 20000) is None


def test_a_rewound_answer_goes_out_as_the_run_sent_again_writes_it() -> None:
    """Lines style: the held text of the first run goes; the end posts the second run's."""
    d = Driver()
    d.start()
    d.feed(MessageChunk(SID, "chunk "), at=1.0)
    d.feed(AnswerRewound(SID), at=1.5)
    d.feed(MessageChunk(SID, "chunk answer"), at=2.0)
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.5)
    assert [r.text for r in relays(d)] == ["chunk answer"]


def test_a_rewind_after_a_message_worth_left_keeps_the_answer_as_it_is() -> None:
    """A part already posted cannot be taken back: the rewind is dropped (it comes right
    after a first run's first updates, so this is a guard, not a case seen)."""
    d = Driver()
    d.start()
    answer = "\n\n".join(paragraphs(100))  # 30,000 characters: one part goes at once
    stream(d, answer)
    assert len(relays(d)) == 1
    d.feed(AnswerRewound(SID), at=2.0)
    d.feed(TurnEnded(SID, StopReason.END_TURN), at=2.5)
    assert "\n\n".join(r.text for r in relays(d)) == answer
