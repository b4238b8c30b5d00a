"""A bot-menu click (`application.bot.menu_v6`) through the parser and the receiver: the
typed model, the clicker's private chat learnt from their messages, the allow-lists as for a
message, one hand-over per event id, and nothing with BRIDGE_BOT_MENU off."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.feishu.errors import EventParseError
from bridge.feishu.events import BotIdentity, InboundMessage, MenuClick, parse_event
from bridge.receiver import AccessPolicy, Receiver
from bridge.store import MemoryStore
from tests.unit.receiver_fakes import AcceptingSink, FateList

NOW = 1_800_000_000.0
APP = "cli_app"


def menu_payload(
    event_key: str = "stop", open_id: str = "ou_alice", **header: Any
) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": "ev_m",
            "event_type": "application.bot.menu_v6",
            "create_time": str(int(NOW * 1000)),
            "token": "t",
            "app_id": APP,
            "tenant_key": "tk",
            **header,
        },
        "event": {
            "operator": {
                "operator_name": "Alice",
                "operator_id": {"union_id": "on_a", "user_id": "u_a", "open_id": open_id},
            },
            "event_key": event_key,
            "timestamp": "1800000000",
        },
    }


def test_the_menu_event_parses_to_its_model() -> None:
    assert parse_event(menu_payload("new_session")) == MenuClick(
        event_id="ev_m",
        operator_open_id="ou_alice",
        event_key="new_session",
        app_id=APP,
        create_time_ms=int(NOW * 1000),
    )


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (menu_payload(open_id=""), "event.operator.operator_id.open_id is missing"),
        (menu_payload(event_key="  "), "event.event_key is missing"),
        (menu_payload(event_id=""), "header.event_id is missing"),
    ],
)
def test_a_menu_event_without_who_or_what_is_malformed(
    payload: dict[str, Any], reason: str
) -> None:
    with pytest.raises(EventParseError) as refused:
        parse_event(payload)
    assert refused.value.reason == reason


def click(event_id: str = "ev_m", open_id: str = "ou_alice", **fields: Any) -> MenuClick:
    values: dict[str, Any] = {"event_key": "status", "app_id": APP, "create_time_ms": 0}
    return MenuClick(event_id=event_id, operator_open_id=open_id, **{**values, **fields})


def message(
    open_id: str, chat_id: str, chat_type: str = "p2p", mid: str = "om_1"
) -> InboundMessage:
    return InboundMessage(
        event_id=f"ev_{mid}",
        message_id=mid,
        chat_id=chat_id,
        chat_type=chat_type,
        sender_open_id=open_id,
        message_type="text",
        text="hello",
        mentions_bot=True,
    )


def receiver(store: MemoryStore, sink: AcceptingSink, fates: FateList, **options: Any) -> Receiver:
    policy = options.pop("policy", AccessPolicy(allow_all=True))
    return Receiver(
        store=store,
        sink=sink,
        policy=policy,
        bot=BotIdentity("ou_bot"),
        clock=lambda: NOW,
        fates=fates,
        app_id=APP,
        max_event_age=60.0,
        **options,
    )


async def test_a_click_goes_to_the_private_chat_its_user_writes_from() -> None:
    sink, fates = AcceptingSink(), FateList()
    async with MemoryStore() as store:
        first = receiver(store, sink, fates)
        await first.on_menu(click("ev_1"))  # never wrote: the engine finds the chat
        await first.on_message(message("ou_alice", "oc_group", "group", "om_g"))
        await first.on_message(message("ou_alice", "oc_alice"))
        await first.on_menu(click("ev_2"))
        # Another process (a restart, another instance) knows it from the store.
        await receiver(store, sink, fates).on_menu(click("ev_3"))
    assert sink.clicks == [
        ("ev_1", None, True),
        ("ev_2", "oc_alice", True),
        ("ev_3", "oc_alice", True),
    ]
    assert fates.count("menu") == 3


async def test_a_redelivered_click_is_handed_over_once() -> None:
    sink, fates = AcceptingSink(), FateList()
    async with MemoryStore() as store:
        intake = receiver(store, sink, fates)
        await intake.on_menu(click())
        await intake.on_menu(click())
    assert sink.clicks == [("ev_m", None, True)]
    assert fates == ["menu", "duplicate"]


async def test_the_allow_lists_judge_a_click_as_they_judge_a_message() -> None:
    sink, fates = AcceptingSink(), FateList()
    users = AccessPolicy(allowed_users=frozenset({"ou_friend"}))
    chats = AccessPolicy(allowed_chats=frozenset({"oc_friend"}))
    async with MemoryStore() as store:
        await store.remember_p2p_chat("ou_friend", "oc_friend", NOW)
        await receiver(store, sink, fates, policy=users).on_menu(click("ev_1", "ou_friend"))
        await receiver(store, sink, fates, policy=users).on_menu(click("ev_2", "ou_stranger"))
        await receiver(store, sink, fates, policy=chats).on_menu(click("ev_3", "ou_friend"))
        # A chat allow-list cannot admit a chat it has never seen.
        await receiver(store, sink, fates, policy=chats).on_menu(click("ev_4", "ou_other"))
    assert sink.clicks == [
        ("ev_1", "oc_friend", True),
        ("ev_2", None, False),
        ("ev_3", "oc_friend", True),
        ("ev_4", None, False),
    ]
    assert fates == ["menu", "refused", "menu", "refused"]


async def test_with_the_menu_off_or_for_another_app_or_too_old_a_click_is_dropped() -> None:
    sink, fates = AcceptingSink(), FateList()
    async with MemoryStore() as store:
        await receiver(store, sink, fates, bot_menu=False).on_menu(click("ev_1"))
        on = receiver(store, sink, fates)
        await on.on_menu(click("ev_2", app_id="cli_other"))
        await on.on_menu(click("ev_3", create_time_ms=int((NOW - 3600) * 1000)))
        await on.on_menu(click("ev_1"))  # the click dropped while off was never claimed
    assert sink.clicks == [("ev_1", None, True)]
    assert fates == ["ignored", "foreign", "too_old", "menu"]
