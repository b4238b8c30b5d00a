"""Event payloads in Feishu's schema 2.0, as pushed to a webhook (plaintext, before sealing).
Each is one app's: its header names the app, and the people in it are that app's open_ids."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from bridge.devtools.emulator.records import ChatMessage


def _header(
    event_type: str, *, token: str, app_id: str, tenant_key: str, create_ms: int
) -> dict[str, Any]:
    return {
        "event_id": secrets.token_hex(16),
        "event_type": event_type,
        "create_time": str(create_ms),
        "token": token,
        "app_id": app_id,
        "tenant_key": tenant_key,
    }


def message_receive(
    message: ChatMessage,
    *,
    token: str,
    app_id: str,
    tenant_key: str,
    sender_open_id: str,
    union_id: str,
    user_id: str,
    mentions: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """`im.message.receive_v1` for a user's message already in the chat, as the app sees it:
    the sender and `mentions` by their open_ids in that app."""
    body: dict[str, Any] = {
        "message_id": message.message_id,
        "create_time": str(message.create_time_ms),
        "update_time": str(message.update_time_ms),
        "chat_id": message.chat_id,
        "chat_type": message.chat_type,
        "message_type": message.msg_type,
        "content": message.content,
    }
    # Feishu only sends these for replies / threads, and `mentions` only when someone is @-ed.
    if message.root_id:
        body["root_id"] = message.root_id
    if message.parent_id:
        body["parent_id"] = message.parent_id
    if message.thread_id:
        body["thread_id"] = message.thread_id
    if mentions:
        body["mentions"] = [dict(m) for m in mentions]
    return {
        "schema": "2.0",
        "header": _header(
            "im.message.receive_v1",
            token=token,
            app_id=app_id,
            tenant_key=tenant_key,
            create_ms=message.create_time_ms,
        ),
        "event": {
            "sender": {
                "sender_id": {
                    "union_id": union_id,
                    "user_id": user_id,
                    "open_id": sender_open_id,
                },
                "sender_type": "user",
                "tenant_key": tenant_key,
            },
            "message": body,
        },
    }


def message_recalled(
    message: ChatMessage, *, token: str, app_id: str, tenant_key: str
) -> dict[str, Any]:
    """`im.message.recalled_v1` for a message its sender took back."""
    return {
        "schema": "2.0",
        "header": _header(
            "im.message.recalled_v1",
            token=token,
            app_id=app_id,
            tenant_key=tenant_key,
            create_ms=message.update_time_ms,
        ),
        "event": {
            "message_id": message.message_id,
            "chat_id": message.chat_id,
            "recall_time": str(message.update_time_ms),
            "recall_type": "message_owner",
        },
    }


def card_action(
    *,
    message: ChatMessage,
    value: Mapping[str, Any],
    operator_open_id: str,
    tag: str,
    form_value: Mapping[str, Any] | None,
    token: str,
    app_id: str,
    tenant_key: str,
    create_ms: int,
) -> dict[str, Any]:
    """`card.action.trigger` for a click on a card the bot posted."""
    action: dict[str, Any] = {"value": dict(value), "tag": tag}
    if form_value is not None:
        action["form_value"] = dict(form_value)
    return {
        "schema": "2.0",
        "header": _header(
            "card.action.trigger",
            token=token,
            app_id=app_id,
            tenant_key=tenant_key,
            create_ms=create_ms,
        ),
        "event": {
            "operator": {
                "tenant_key": tenant_key,
                "user_id": "",
                "open_id": operator_open_id,
                "union_id": "",
            },
            # The card's update token (for the delayed-update API), not the verification token.
            "token": "c-" + secrets.token_hex(16),
            "action": action,
            "host": "im_message",
            "context": {"open_message_id": message.message_id, "open_chat_id": message.chat_id},
        },
    }


def bot_menu(
    *,
    event_key: str,
    operator_open_id: str,
    operator_name: str,
    union_id: str,
    user_id: str,
    token: str,
    app_id: str,
    tenant_key: str,
    create_ms: int,
) -> dict[str, Any]:
    """`application.bot.menu_v6` for a click in the bot's custom menu: no chat, no message,
    only who clicked and the item's event_key."""
    return {
        "schema": "2.0",
        "header": _header(
            "application.bot.menu_v6",
            token=token,
            app_id=app_id,
            tenant_key=tenant_key,
            create_ms=create_ms,
        ),
        "event": {
            "operator": {
                "operator_name": operator_name,
                "operator_id": {
                    "union_id": union_id,
                    "user_id": user_id,
                    "open_id": operator_open_id,
                },
            },
            "event_key": event_key,
            "timestamp": str(create_ms // 1000),
        },
    }


def url_verification(challenge: str, token: str) -> dict[str, Any]:
    return {"challenge": challenge, "token": token, "type": "url_verification"}


def mention_entry(key: str, open_id: str, name: str, tenant_key: str, **ids: str) -> dict[str, Any]:
    return {
        "key": key,
        "id": {
            "union_id": ids.get("union_id", ""),
            "user_id": ids.get("user_id", ""),
            "open_id": open_id,
        },
        "name": name,
        "tenant_key": tenant_key,
    }
