"""`/turns/{id}` with several apps: one message in a group with two bots is a turn of each;
`?app=` picks whose, else the first app's that has it; the view names its app and its
conversation as the projection keys it."""

from __future__ import annotations

from bridge.ops.turns import TurnView, app_turn_view


def _view(turns: dict[str, str]) -> TurnView:
    async def view(turn_id: str) -> dict[str, object] | None:
        chat = turns.get(turn_id)
        return None if chat is None else {"turn_id": turn_id, "conversation": chat}

    return view


APPS = [
    ("claude", "", _view({"om_both": "oc_group", "om_claude": "oc_c"})),
    ("codex", "codex/", _view({"om_both": "oc_group", "om_codex": "oc_x"})),
]


async def test_the_app_named_is_asked_else_the_first_that_has_it() -> None:
    assert await app_turn_view(APPS, "om_both", "codex") == {
        "turn_id": "om_both",
        "conversation": "codex/oc_group",
        "app": "codex",
    }
    assert await app_turn_view(APPS, "om_both") == {
        "turn_id": "om_both",
        "conversation": "oc_group",
        "app": "claude",
    }
    found = await app_turn_view(APPS, "om_codex")
    assert found == {"turn_id": "om_codex", "conversation": "codex/oc_x", "app": "codex"}
    assert await app_turn_view(APPS, "om_claude", "codex") is None  # not a turn of Codex
    assert await app_turn_view(APPS, "om_both", "nobody") is None
