"""The approval card's buttons, as the engine draws them from an agent's options."""

from __future__ import annotations

from typing import Any

from bridge.core.effects import PostApprovalCard
from bridge.engine.card_views import CardViews
from bridge.i18n import Translator
from bridge.runtime.events import PermissionKind, PermissionOption


def labels(options: tuple[PermissionOption, ...], locale: str = "zh_CN") -> list[str]:
    work = PostApprovalCard(
        turn_id="t",
        card_key="c",
        request_id="r",
        title="Exit plan mode",
        detail=None,
        options=options,
        requester="ou_1",
        reply_to="om_1",
        idempotency_key="k",
    )
    card: dict[str, Any] = CardViews(Translator(locale)).open_card(work)
    return [
        action["text"]["content"]
        for element in card["elements"]
        if element.get("tag") == "action"
        for action in element["actions"]
    ]


def option(option_id: str, name: str, kind: PermissionKind) -> PermissionOption:
    return PermissionOption(option_id=option_id, name=name, kind=kind)


def test_each_kind_once_is_labelled_in_the_users_language() -> None:
    options = (
        option("allow-once", "Yes", PermissionKind.ALLOW_ONCE),
        option("allow-with-updates", "Yes, and don't ask again", PermissionKind.ALLOW_ALWAYS),
        option("reject", "No", PermissionKind.REJECT_ONCE),
    )
    assert labels(options) == ["允许一次", "始终允许", "拒绝"]


def test_options_of_the_same_kind_are_told_apart_by_the_agents_words() -> None:
    """Claude Code's plan exit offers several "always" options (found with the real agent):
    two buttons both reading 始终允许 would leave the user guessing."""
    options = (
        option("exit-plan-auto", "Yes, and use auto mode", PermissionKind.ALLOW_ALWAYS),
        option("exit-plan-bypass", "Yes, and bypass permissions", PermissionKind.ALLOW_ALWAYS),
        option("exit-plan-default", "Yes, manually approve edits", PermissionKind.ALLOW_ONCE),
        option("reject", "No, keep planning", PermissionKind.REJECT_ONCE),
    )
    assert labels(options) == [
        "始终允许（Yes, and use auto mode）",
        "始终允许（Yes, and bypass permissions）",
        "允许一次",
        "拒绝",
    ]
    assert labels(options, "en_US")[:2] == [
        "Always allow (Yes, and use auto mode)",
        "Always allow (Yes, and bypass permissions)",
    ]
