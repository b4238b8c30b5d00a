"""A live card's change takes whichever of CardKit's APIs has room: the answer's growth
streams while the stream's minute lasts, then goes whole, then as its element replaced,
patched, or batched; a change of several elements without room for a whole update goes as
one batch; an API Feishu does not know (404) is left for the others."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest

from bridge.core.delivery import Lane
from bridge.core.effects import CardPhase, CardView, ShowStatusCard
from bridge.core.state import ToolLine
from bridge.engine.actor import ConversationActor
from bridge.engine.status_cards import StatusCards
from bridge.feishu.budget import BudgetPolicy, CallBudget
from bridge.feishu.cards.parts import (
    ELEMENT_API,
    PATCH_ELEMENT_API,
    STREAM_API,
    UPDATE_API,
)
from bridge.feishu.delivery import FeishuGate
from bridge.feishu.errors import FeishuError
from bridge.i18n import Translator
from bridge.store import MemoryStore
from bridge.tasks import TaskTracker

T = Translator("zh_CN")


class CardKitCalls:
    """The CardKit part of the Feishu client, recording each call (op, element, content)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.missing: set[str] = set()  # ops answered 404

    def _call(self, op: str, element: str = "", content: str = "") -> None:
        if op in self.missing:
            raise FeishuError(404, "404 page not found", http_status=404)
        self.calls.append((op, element, content))

    async def create_card(self, card: dict[str, Any]) -> str:
        self._call("create_card")
        return "c1"

    async def reply_card_entity(
        self, message_id: str, card_id: str, *, uuid: str, in_thread: bool = False
    ) -> str:
        self._call("reply_card_entity")
        return "om_card"

    async def update_card_entity(
        self, card_id: str, card: dict[str, Any], *, sequence: int
    ) -> None:
        answer = next(e for e in card["body"]["elements"] if e.get("element_id") == "answer")
        self._call("update_card_entity", "answer", answer["content"])

    async def stream_card_text(
        self, card_id: str, element_id: str, text: str, *, sequence: int
    ) -> None:
        self._call("stream_card_text", element_id, text)

    async def update_card_element(
        self, card_id: str, element: dict[str, Any], *, sequence: int
    ) -> None:
        self._call("update_card_element", element["element_id"], element["content"])

    async def patch_card_element(
        self, card_id: str, element_id: str, partial: dict[str, Any], *, sequence: int
    ) -> None:
        self._call("patch_card_element", element_id, partial["content"])

    async def batch_update_card(
        self, card_id: str, actions: list[dict[str, Any]], *, sequence: int
    ) -> None:
        for action in actions:
            assert action["action"] == "partial_update_element"
            params = action["params"]
            self._call(
                "batch_update_card", params["element_id"], params["partial_element"]["content"]
            )


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
    feishu: CardKitCalls, now: Now, budget: CallBudget, store: MemoryStore
) -> StatusCards:
    return StatusCards(
        feishu=cast(Any, feishu),
        store=store,
        translator=T,
        clock=now,
        tasks=TaskTracker("test"),
        interval=0.5,
        gate=cast(FeishuGate, Straight()),
        budget=budget,
    )


def view(text: str, elapsed: float = 3.0, tools: tuple[ToolLine, ...] = ()) -> ShowStatusCard:
    shown = CardView(CardPhase.WORKING, elapsed=elapsed, text=text, tools=tools)
    return ShowStatusCard("t1", "om_user", "t1:card", shown)


def spend(budget: CallBudget, api: str) -> None:
    while budget.try_take(Lane.REFRESH, api):
        pass


async def test_the_answer_grows_through_whichever_api_has_room(store: MemoryStore) -> None:
    feishu, now = CardKitCalls(), Now()
    budget = CallBudget(now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    await cards.show(actor, view("Hello"))  # posted
    now.at += 1.0
    await cards.show(actor, view("Hello, w"))
    now.at += 1.0
    spend(budget, STREAM_API)
    await cards.show(actor, view("Hello, wor"))
    now.at += 1.0
    spend(budget, STREAM_API)
    spend(budget, UPDATE_API)
    await cards.show(actor, view("Hello, world"))
    now.at += 1.0
    for api in (STREAM_API, UPDATE_API, ELEMENT_API):
        spend(budget, api)
    await cards.show(actor, view("Hello, world!"))
    now.at += 1.0
    for api in (STREAM_API, UPDATE_API, ELEMENT_API, PATCH_ELEMENT_API):
        spend(budget, api)
    await cards.show(actor, view("Hello, world!!"))
    changes = [(op, content) for op, _, content in feishu.calls[2:]]
    assert changes == [
        ("stream_card_text", "Hello, w"),
        ("update_card_entity", "Hello, wor"),
        ("update_card_element", "Hello, world"),
        ("patch_card_element", "Hello, world!"),
        ("batch_update_card", "Hello, world!!"),
    ]


async def test_without_room_for_a_whole_update_a_batch_carries_every_change(
    store: MemoryStore,
) -> None:
    feishu, now = CardKitCalls(), Now()
    budget = CallBudget(now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    build = ToolLine("t1", "Build", "in_progress")
    await cards.show(actor, view("Hello", tools=(build,)))
    now.at += 1.0
    spend(budget, UPDATE_API)
    done = ToolLine("t1", "Build", "completed")
    await cards.show(actor, view("Hello, world", elapsed=9.0, tools=(done,)))
    assert sorted(element for _, element, _ in feishu.calls[2:]) == ["answer", "status", "tools"]
    assert {op for op, _, _ in feishu.calls[2:]} == {"batch_update_card"}


async def test_a_refresh_passes_over_an_api_whose_minute_is_kept_for_the_lanes_above(
    store: MemoryStore,
) -> None:
    """An API whose minute holds only what the budget keeps for the lanes above a refresh
    has no room for one: the change goes at once through the next API with room, not
    after a token the lanes above are owed first."""
    feishu, now = CardKitCalls(), Now()
    # The minute binds, not the second: 6 sends' burst, of which 3.5 are not a refresh's.
    budget = CallBudget(BudgetPolicy(app_per_second=1000.0, sends_per_minute=120.0), now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    build = ToolLine("t1", "Build", "in_progress")
    await cards.show(actor, view("Hello", tools=(build,)))
    now.at += 1.0
    spend(budget, UPDATE_API)
    assert budget.may_go(UPDATE_API)  # an ending would still find a token there
    done = ToolLine("t1", "Build", "completed")
    await cards.show(actor, view("Hello, world", elapsed=9.0, tools=(done,)))
    assert {op for op, _, _ in feishu.calls[2:]} == {"batch_update_card"}


async def test_an_element_api_feishu_lacks_is_not_asked_again(store: MemoryStore) -> None:
    feishu, now = CardKitCalls(), Now()
    feishu.missing.add("update_card_element")
    budget = CallBudget(now=now)
    cards = status_cards(feishu, now, budget, store)
    actor = cast(ConversationActor, Chat())
    await cards.show(actor, view("a"))
    now.at += 1.0
    spend(budget, STREAM_API)
    spend(budget, UPDATE_API)
    await cards.show(actor, view("ab"))  # the element's 404, then the card whole
    now.at += 1.0
    spend(budget, STREAM_API)
    await cards.show(actor, view("abc"))  # whole: the element is not tried again
    ops = [(op, content) for op, _, content in feishu.calls[2:]]
    assert ops == [("update_card_entity", "ab"), ("update_card_entity", "abc")]
    assert budget.may_go(ELEMENT_API)  # the API had room: it was passed over, not spent
