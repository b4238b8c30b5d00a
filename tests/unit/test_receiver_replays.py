"""The receiver drops a message event that is too old to be anything but a replay, or that
was delivered for another app, before it is journaled or answered (in-process fakes)."""

from __future__ import annotations

from typing import Any

from bridge.feishu.events import BotIdentity, InboundMessage
from bridge.receiver import AccessPolicy, Receiver
from tests.unit.receiver_fakes import AcceptingSink, FateList

NOW = 1_800_000_000.0
APP = "cli_ours"


class Journal:
    """The store calls the receiver makes for a message; every message is new."""

    async def journal_message(self, *args: Any) -> bool:
        return True

    async def remember_p2p_chat(self, *args: Any) -> None:
        return None

    async def claim_event(self, *args: Any) -> bool:
        return True


def message(message_id: str, *, age: float, app_id: str | None = APP) -> InboundMessage:
    return InboundMessage(
        event_id=f"ev_{message_id}",
        message_id=message_id,
        chat_id="oc_1",
        chat_type="p2p",
        sender_open_id="ou_alice",
        message_type="text",
        text="hello",
        create_time_ms=int((NOW - age) * 1000),
        app_id=app_id,
    )


def receiver(sink: AcceptingSink, fates: FateList, max_age: float = 43200.0) -> Receiver:
    return Receiver(
        store=Journal(),  # type: ignore[arg-type]
        sink=sink,
        policy=AccessPolicy(frozenset(), frozenset(), allow_all=True),
        bot=BotIdentity("ou_bot"),
        clock=lambda: NOW,
        fates=fates,
        app_id=APP,
        max_event_age=max_age,
    )


async def test_an_event_older_than_the_limit_is_dropped_and_counted() -> None:
    sink, fates = AcceptingSink(), FateList()
    handler = receiver(sink, fates)
    await handler.on_message(message("om_recent", age=43000))
    await handler.on_message(message("om_replayed", age=43300))
    assert sink.accepted == ["om_recent"]
    assert fates == ["accepted", "too_old"]


async def test_zero_turns_the_age_check_off() -> None:
    sink, fates = AcceptingSink(), FateList()
    await receiver(sink, fates, max_age=0).on_message(message("om_old", age=10 * 86400))
    assert sink.accepted == ["om_old"]


async def test_an_event_for_another_app_is_dropped() -> None:
    sink, fates = AcceptingSink(), FateList()
    handler = receiver(sink, fates)
    await handler.on_message(message("om_other", age=1, app_id="cli_someone_else"))
    await handler.on_message(message("om_ours", age=1))
    assert sink.accepted == ["om_ours"]
    assert fates == ["foreign", "accepted"]
