"""CardKit calls of `FeishuClient`: card entities that stream (the live status card).

A card entity is created from card JSON 2.0 and posted as a message that names it
(`{"type": "card", "data": {"card_id": …}}`); from then on it is changed through CardKit
with a `sequence` that must grow with every change of that card, never through the message.
Feishu allows 10 changes a second per card; the caller throttles.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Final, Protocol
from urllib.parse import quote

from bridge.feishu.errors import ServerError
from bridge.feishu.json_out import dumps

CARDS: Final = "/open-apis/cardkit/v1/cards"


def _uuid(card_id: str, sequence: int) -> str:
    return f"{card_id[-32:]}-{sequence}"  # one change, whatever the retries


class _Requests(Protocol):
    def _request(
        self, op: str, method: str, path: str, *, body: dict[str, Any] | None = ...
    ) -> Awaitable[dict[str, Any]]: ...


class CardKitCalls:
    """Mixed into FeishuClient, whose `_request` does the retries and the logging."""

    async def create_card(self: _Requests, card: dict[str, Any]) -> str:
        body = {"type": "card_json", "data": dumps(card)}
        data = await self._request("create_card", "POST", CARDS, body=body)
        card_id = (data.get("data") or {}).get("card_id")
        if not isinstance(card_id, str) or not card_id:
            raise ServerError(0, "card create response without data.card_id")
        return card_id

    async def update_card_entity(
        self: _Requests, card_id: str, card: dict[str, Any], *, sequence: int
    ) -> None:
        path = f"{CARDS}/{quote(card_id, safe='')}"
        body = {
            "card": {"type": "card_json", "data": dumps(card)},
            "sequence": sequence,
            "uuid": _uuid(card_id, sequence),
        }
        await self._request("update_card_entity", "PUT", path, body=body)

    async def stream_card_text(
        self: _Requests, card_id: str, element_id: str, text: str, *, sequence: int
    ) -> None:
        path = f"{CARDS}/{quote(card_id, safe='')}/elements/{quote(element_id, safe='')}/content"
        body = {"content": text, "sequence": sequence, "uuid": _uuid(card_id, sequence)}
        await self._request("stream_card_text", "PUT", path, body=body)

    async def card_settings(
        self: _Requests, card_id: str, settings: dict[str, Any], *, sequence: int
    ) -> None:
        path = f"{CARDS}/{quote(card_id, safe='')}/settings"
        body = {
            "settings": dumps(settings),
            "sequence": sequence,
            "uuid": _uuid(card_id, sequence),
        }
        await self._request("card_settings", "PATCH", path, body=body)
