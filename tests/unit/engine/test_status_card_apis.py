"""A live card's change takes whichever of CardKit's APIs has room: the answer's growth
streams while the stream's minute lasts, then goes whole, then as its element replaced,
patched, or batched; a change of several elements without room for a whole update goes as
one batch; an API Feishu does not know (404) is left for the others."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest

from bridge.core.delivery import Lane
from bridge.core.effects import CardPhase, CardView, ShowStatusCard
from bridge.core.state import ToolLine
from bridge.devtools.emulator.codes import NOT_FOUND
from bridge.engine.actor import ConversationActor
from bridge.engine.status_cards import StatusCards
from bridge.feishu.budget import BudgetPolicy, CallBudget
from bridge.feishu.cards.parts import (
    BATCH_API,
    ELEMENT_API,
    PATCH_ELEMENT_API,
    STREAM_API,
    UPDATE_API,
)
from bridge.feishu.delivery import FeishuGate
from bridge.i18n import Translator
from bridge.store import MemoryStore
from bridge.store.steady import StoreRetry
from bridge.tasks import TaskTracker
from tests.fakes.feishu import FakeFeishu
from tests.fakes.feishu_calls import ELEMENT

T = Translator("zh_CN")


def changes(feishu: FakeFeishu) -> list[tuple[str, str, str]]:
    """Each call as (op, the element it changes, its content), a batch as one row for each of
    its actions; the card's post (create_card, reply_card_entity) as (op, "", "")."""
    rows = []
    for call in feishu.calls:
        element = ELEMENT.search(call.path)
        if call.op == "update_card_entity":
            assert call.card is not None
            answer = next(
                e for e in call.card["body"]["elements"] if e.get("element_id") == "answer"
            )
            rows.append((call.op, "answer", answer["content"]))
        elif call.op == "batch_update_card":
            for action in json.loads(call.body["actions"]):
                assert action["action"] == "partial_update_element"
                params = action["params"]
                rows.append((call.op, params["element_id"], params["partial_element"]["content"]))
        elif element is not None:  # one element's text, element or properties
            rows.append((call.op, element["element"], call.text))
        else:
            rows.append((call.op, "", ""))
    return rows


class Straight:
    """The delivery gate with Feishu up: the call, once."""

    async def attempt(self, call: Callable[[], Awaitable[Any]], *, owed_since: float) -> Any:
        return await call()


class Chat:
    key = "oc_chat"

    def feed(self, event: object) -> None:
        raise AssertionError(f"the card fell back to lines: {event}")


class Now:
    def __init__(self) -> None:
        self.at = 1000.0

    def __call__(self) -> float:
        return self.at


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    await store.open()
    yield store
    await store.close()


def status_cards(
    feishu: FakeFeishu, now: Now, budget: CallBudget, store: MemoryStore
) -> StatusCards:
    return StatusCards(
        feishu=feishu.client(clock=now),
        store=store,
        translator=T,
        clock=now,
        tasks=TaskTracker("test"),
        interval=0.5,
        gate=cast(FeishuGate, Straight()),
        retry=StoreRetry(),
        budget=budget,
    )


def view(
    text: str, elapsed: float = 3.0, tools: tuple[ToolLine, ...] = (), *, closed: bool = False
) -> ShowStatusCard:
    shown = CardView(CardPhase.WORKING, elapsed=elapsed, text=text, tools=tools, closed=closed)
    return ShowStatusCard("t1", "om_user", "t1:card", shown)


def spend(budget: CallBudget, api: str) -> None:
    while budget.try_take(Lane.REFRESH, api):
        pass


async def test_the_answer_grows_through_whichever_api_has_room(store: MemoryStore) -> None:
    feishu, now = FakeFeishu(), Now()
    budget = CallBudget(now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    await cards.show(actor, view("Hello"))  # posted
    now.at += 1.0
    await cards.show(actor, view("Hello, w"))
    ways = (STREAM_API, ELEMENT_API, PATCH_ELEMENT_API, BATCH_API)
    for text, spent in zip(
        ("Hello, wor", "Hello, world", "Hello, world!", "Hello, world!!"), range(1, 5), strict=True
    ):
        now.at += 1.0
        for api in ways[:spent]:
            spend(budget, api)
        await cards.show(actor, view(text))
    made = [(op, content) for op, _, content in changes(feishu)[2:]]
    # The whole update last: it is the way a card ends.
    assert made == [
        ("stream_card_text", "Hello, w"),
        ("update_card_element", "Hello, wor"),
        ("patch_card_element", "Hello, world"),
        ("batch_update_card", "Hello, world!"),
        ("update_card_entity", "Hello, world!!"),
    ]


async def test_a_batch_carries_every_change_of_a_card_that_keeps_its_shape(
    store: MemoryStore,
) -> None:
    feishu, now = FakeFeishu(), Now()
    budget = CallBudget(now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    build = ToolLine("t1", "Build", "in_progress")
    await cards.show(actor, view("Hello", tools=(build,)))
    now.at += 1.0
    done = ToolLine("t1", "Build", "completed")
    await cards.show(actor, view("Hello, world", elapsed=9.0, tools=(done,)))
    assert sorted(element for _, element, _ in changes(feishu)[2:]) == ["answer", "status", "tools"]
    assert {op for op, _, _ in changes(feishu)[2:]} == {"batch_update_card"}


async def test_a_refresh_passes_over_an_api_whose_minute_is_kept_for_the_lanes_above(
    store: MemoryStore,
) -> None:
    """An API whose minute holds only what the budget keeps for the lanes above a refresh
    has no room for one: the change goes at once through the next API with room, not
    after a token the lanes above are owed first."""
    feishu, now = FakeFeishu(), Now()
    # The minute binds, not the second: 6 sends' burst, of which 3.5 are not a refresh's.
    budget = CallBudget(BudgetPolicy(app_per_second=1000.0, sends_per_minute=120.0), now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    build = ToolLine("t1", "Build", "in_progress")
    await cards.show(actor, view("Hello", tools=(build,)))
    now.at += 1.0
    spend(budget, BATCH_API)
    assert budget.may_go(BATCH_API)  # an ending would still find a token there
    done = ToolLine("t1", "Build", "completed")
    await cards.show(actor, view("Hello, world", elapsed=9.0, tools=(done,)))
    assert {op for op, _, _ in changes(feishu)[2:]} == {"stream_card_text"}  # one part


async def test_an_element_api_feishu_lacks_is_not_asked_again(store: MemoryStore) -> None:
    feishu, now = FakeFeishu(), Now()
    feishu.fail("update_card_element", NOT_FOUND)
    budget = CallBudget(now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    await cards.show(actor, view("a"))
    now.at += 1.0
    spend(budget, STREAM_API)
    await cards.show(actor, view("ab"))  # the element's 404, then the card whole
    now.at += 1.0
    spend(budget, STREAM_API)
    await cards.show(actor, view("abc"))  # patched: the element is not tried again
    ops = [(op, content) for op, _, content in changes(feishu)[2:]]
    assert ops == [
        ("update_card_element", "ab"),
        ("update_card_entity", "ab"),
        ("patch_card_element", "abc"),
    ]
    assert [c.status for c in feishu.calls[2:]] == [404, 200, 200]
    assert budget.may_go(ELEMENT_API)  # the API had room: it was passed over, not spent


async def test_a_status_card_whose_page_is_closed_changes_half_as_often(store: MemoryStore) -> None:
    """Once a status card shows its page of the answer whole (the answer goes on in a
    continuation card below it), only its status moves: it changes at twice the spacing,
    and the card APIs go to the page being written. The view that closes the page is not
    held back: until it shows, the chat's answer has a gap."""
    feishu, now = FakeFeishu(), Now()
    cards = status_cards(feishu, now, CallBudget(now=now), store)
    actor = cast(ConversationActor, Chat())
    await cards.show(actor, view("Hello"))  # posted
    now.at += 0.6  # past the spacing (0.5)
    await cards.show(actor, view("Hello, world", closed=True))  # the page, whole
    now.at += 0.6  # past the spacing, not twice it
    await cards.show(actor, view("Hello, world", elapsed=9.0, closed=True))
    assert [op for op, _, _ in changes(feishu)[2:]] == ["stream_card_text"]
    now.at += 0.5  # twice the spacing since the page closed
    await cards.show(actor, view("Hello, world", elapsed=10.0, closed=True))
    assert [op for op, _, _ in changes(feishu)[2:]] == ["stream_card_text", "batch_update_card"]


def page(turn: str, text: str, *, final: bool = False) -> ShowStatusCard:
    """A continuation card's view: its page of the answer only."""
    shown = CardView(CardPhase.WORKING, 0.0, text=text, page=1)
    return ShowStatusCard(turn, "om_user", f"{turn}:card:2", shown, final=final)


async def test_a_card_that_only_grew_ends_through_an_element_api_when_the_whole_has_no_room(
    store: MemoryStore,
) -> None:
    """Turns ending together queue on the whole update's minute: a card whose last view
    only grew its text ends through an element API with room, then the settings call turns
    streaming off. With room for it, one whole update ends the card."""
    feishu, now = FakeFeishu(), Now()
    budget = CallBudget(now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    await cards.show(actor, page("t1", "Hello"))
    await cards.show(actor, page("t2", "Hi"))
    now.at += 1.0
    await cards.show(actor, page("t1", "Hello, world", final=True))  # room: whole
    while budget.try_take(Lane.ENDING, UPDATE_API):
        pass
    await cards.show(actor, page("t2", "Hi there", final=True))
    made = [(op, content) for op, _, content in changes(feishu)[4:]]
    assert made == [
        ("update_card_entity", "Hello, world"),
        ("stream_card_text", "Hi there"),
        ("card_settings", ""),
    ]
    assert json.loads(feishu.calls[-1].body["settings"]) == {"config": {"streaming_mode": False}}


async def test_a_card_a_predecessor_changed_goes_on_above_its_sequences(
    store: MemoryStore,
) -> None:
    """A kill just after Feishu took a change: the process after it finds the card in the
    store and must change it with a larger sequence than any before, though the last one
    went unrecorded and ran past the clock's tenth of a second (seed 111011)."""
    feishu, now = FakeFeishu(), Now()
    now.at = 1_780_000_000.0  # the sequences' floor is the wall clock's tenths since 2026
    actor = cast(ConversationActor, Chat())
    before = status_cards(feishu, now, CallBudget(now=now), store)
    await before.show(actor, view("Hello"))
    now.at += 1.0
    await before.show(actor, view("Hello, w"))
    final = ShowStatusCard("t1", "om_user", "t1:card", view("Hello, world").view, final=True)
    await before.show(actor, final)  # at once, in the same tenth of a second
    taken = [int(c.body["sequence"]) for c in feishu.calls if "sequence" in c.body]
    assert taken == sorted(set(taken))
    assert len(taken) == 2

    after = status_cards(feishu, now, CallBudget(now=now), store)  # the restarted process
    await after.show(actor, final)
    sequences = [int(c.body["sequence"]) for c in feishu.calls if "sequence" in c.body]
    assert len(sequences) == 3
    assert sequences[-1] > max(taken)
