"""Which call brings a status card to its newest view (bridge/feishu/cards/parts.py): the
answer streamed when only it grew; under load, one element at a time, the most telling
first, and a whole update whenever the card's shape changed."""

from __future__ import annotations

from collections.abc import Callable

from bridge.core.effects import CardPhase, CardView
from bridge.core.state import ToolLine
from bridge.feishu.cards.parts import (
    BATCH_API,
    ELEMENT_API,
    PATCH_API,
    PATCH_ELEMENT_API,
    STREAM_API,
    UPDATE_API,
    all_parts,
    api_of_change,
    one_part,
)
from bridge.feishu.cards.status import elements_of
from bridge.i18n import Translator

T = Translator("zh_CN")
BUILD = ToolLine("t1", "Build", "in_progress")
SHOWN = CardView(CardPhase.WORKING, elapsed=3.0, tools=(BUILD,), text="Hello")


def test_under_load_the_answer_goes_first_then_the_tools_then_the_elapsed_time() -> None:
    newest = CardView(
        CardPhase.WORKING,
        elapsed=8.0,
        tools=(ToolLine("t1", "Build", "completed"),),
        text="Hello, world",
    )
    shown, steps = SHOWN, []
    while (part := one_part(T, shown, newest)) is not None:
        element, content, shown = part
        steps.append(element)
        assert content == dict(elements_of(T, shown))[element]
    assert steps == ["answer", "tools", "status"]
    assert elements_of(T, shown) == elements_of(T, newest)  # the card ends up as the view


def test_a_new_element_or_another_phase_needs_a_whole_update() -> None:
    planned = CardView(CardPhase.WORKING, elapsed=3.0, tools=(BUILD,), text="Hello", plan=())
    assert one_part(T, SHOWN, planned) is None  # nothing the card words changed
    no_tools = CardView(CardPhase.WORKING, elapsed=3.0, text="Hello there")
    assert one_part(T, SHOWN, no_tools) is None
    waiting = CardView(CardPhase.WAITING_APPROVAL, elapsed=3.0, tools=(BUILD,), text="Hello")
    assert one_part(T, SHOWN, waiting) is None
    assert api_of_change("c", SHOWN, waiting, room=_none) == UPDATE_API


def _none(api: str) -> bool:
    return False


def _all_but(*full: str) -> Callable[[str], bool]:
    return lambda api: api not in full


def test_the_api_of_the_next_change() -> None:
    """The whole update is the last way a live card's change takes: it is the one way to
    end a card, and turns ending together need its minute."""
    grown = CardView(CardPhase.WORKING, elapsed=3.2, tools=(BUILD,), text="Hello, world")
    assert api_of_change("c", SHOWN, grown, room=_all_but()) == STREAM_API  # typed out
    # The stream's minute spent: the answer as its element, else patched, else in a batch.
    assert api_of_change("c", SHOWN, grown, room=_all_but(STREAM_API)) == ELEMENT_API
    two = _all_but(STREAM_API, ELEMENT_API)
    assert api_of_change("c", SHOWN, grown, room=two) == PATCH_ELEMENT_API
    three = _all_but(STREAM_API, ELEMENT_API, PATCH_ELEMENT_API)
    assert api_of_change("c", SHOWN, grown, room=three) == BATCH_API
    assert api_of_change("c", SHOWN, grown, room=lambda api: api == UPDATE_API) == UPDATE_API
    assert api_of_change("c", SHOWN, grown, room=_none) == STREAM_API  # waits for the stream
    later = CardView(CardPhase.WORKING, elapsed=9.0, tools=(BUILD,), text="Hello, world")
    # Every changed element in one batch, else the most telling one, else the card whole.
    assert api_of_change("c", SHOWN, later, room=_all_but()) == BATCH_API
    assert api_of_change("c", SHOWN, later, room=_all_but(BATCH_API)) == STREAM_API
    no_stream = _all_but(BATCH_API, STREAM_API)
    assert api_of_change("c", SHOWN, later, room=no_stream) == ELEMENT_API
    only_whole = _all_but(BATCH_API, STREAM_API, ELEMENT_API, PATCH_ELEMENT_API)
    assert api_of_change("c", SHOWN, later, room=only_whole) == UPDATE_API
    assert api_of_change("c", SHOWN, later, room=_none) == BATCH_API
    assert api_of_change(None, SHOWN, later, room=_none) == PATCH_API  # the fallback card


def test_a_batch_carries_every_changed_element_of_the_same_shape() -> None:
    later = CardView(CardPhase.WORKING, elapsed=9.0, tools=(BUILD,), text="Hello, world")
    parts = dict(all_parts(T, SHOWN, later) or [])
    assert set(parts) == {"status", "answer"}  # the tools did not change
    assert parts == {e: c for e, c in elements_of(T, later) if e in parts}
    waiting = CardView(CardPhase.WAITING_APPROVAL, elapsed=9.0, tools=(BUILD,), text="Hello")
    assert all_parts(T, SHOWN, waiting) is None  # another shape: a whole update
