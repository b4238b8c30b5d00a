"""What the Feishu client makes of the bridge's answer to a card click: the toast it shows,
and the card that replaces the clicked one (`{"card": {"type": "raw", "data": …}}`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bridge.devtools.emulator.chats import ChatWorld
from bridge.devtools.emulator.records import CardCallbackResult, DeliveryAttempt, Toast

# What the Feishu client shows when a card callback fails or is late.
CALLBACK_ERROR_TOAST = "出错了，请稍后重试"


def apply_callback_answer(
    world: ChatWorld,
    message_id: str,
    operator: str,
    value: Mapping[str, Any],
    attempt: DeliveryAttempt,
    body: str,
) -> CardCallbackResult:
    def failed(error: str, response: Any = None) -> CardCallbackResult:
        return CardCallbackResult(
            event_id=attempt.event_id,
            message_id=message_id,
            operator_open_id=operator,
            value=dict(value),
            ok=False,
            status=attempt.status,
            latency_ms=attempt.latency_ms,
            toast=Toast("error", CALLBACK_ERROR_TOAST),
            card_replaced=False,
            response=response,
            error=error,
        )

    if not attempt.ok:
        return failed(f"{attempt.outcome} (status {attempt.status})")
    try:
        response = json.loads(body) if body.strip() else {}
    except ValueError:
        return failed("the answer is not JSON")
    if not isinstance(response, dict):
        return failed("the answer is not a JSON object", response)
    toast = _toast(response.get("toast"))
    replaced = False
    card = response.get("card")
    if isinstance(card, Mapping) and card.get("type") == "raw":
        data = card.get("data")
        if not isinstance(data, Mapping):
            return failed("card.data must be a card JSON object", response)
        world.replace_card(message_id, json.dumps(data, ensure_ascii=False))
        replaced = True
    return CardCallbackResult(
        event_id=attempt.event_id,
        message_id=message_id,
        operator_open_id=operator,
        value=dict(value),
        ok=True,
        status=attempt.status,
        latency_ms=attempt.latency_ms,
        toast=toast,
        card_replaced=replaced,
        response=response,
    )


def _toast(raw: Any) -> Toast | None:
    if not isinstance(raw, Mapping):
        return None
    content = raw.get("content")
    if not isinstance(content, str):
        i18n = raw.get("i18n")
        if isinstance(i18n, Mapping) and i18n:
            content = str(i18n.get("zh_cn") or next(iter(i18n.values())))
        else:
            content = ""
    return Toast(str(raw.get("type") or "info"), content)
