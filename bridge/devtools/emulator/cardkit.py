"""CardKit as Feishu runs it: card entities created from card JSON 2.0, posted as messages
that name them, and changed only through CardKit with a strictly growing `sequence`.

Checked as Feishu checks: the entity exists (200740), `sequence` is a positive int32 larger
than the last one (300317), streaming text needs streaming mode on (300309) and a markdown
or plain text element (300310), a replaced element exists and keeps its tag (300311,
300312), a card stays within 30 KB (200860) and keeps
`update_multi` (300302). Every message showing an entity is redrawn on each change, so the
chat (and the page) shows the card as it is now; `changes` keeps what was done, in order.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from bridge.devtools.emulator import codes

_INT32_MAX = 2_147_483_647


@dataclass(frozen=True)
class CardChange:
    card_id: str
    kind: str  # create, update, content, element, patch_element, batch, settings
    sequence: int | None
    streaming: bool  # streaming mode after the change
    element_id: str | None = None
    at: float = field(default_factory=time.time)  # wall clock, like ApiCall.at
    card: str = ""  # the card JSON right after the change


@dataclass
class CardEntity:
    card_id: str
    card: dict[str, Any]
    sequence: int = 0
    message_ids: list[str] = field(default_factory=list)
    app_id: str | None = None  # the app that made it, the only one that may use it

    @property
    def streaming(self) -> bool:
        return bool(self.card.get("config", {}).get("streaming_mode"))


class CardKit:
    def __init__(self, redraw: Callable[[str, str], object]) -> None:
        self._redraw = redraw  # (message_id, card JSON) → the chat shows it
        self._ids = itertools.count(7_355_372_766_134_157_313)
        self.entities: dict[str, CardEntity] = {}
        self.changes: list[CardChange] = []

    def create(self, body: Mapping[str, Any], *, app_id: str | None = None) -> str:
        if body.get("type") != "card_json":
            raise codes.FIELD_VALIDATION_FAILED.with_detail("type must be card_json")
        card = _card(body.get("data"))
        card_id = str(next(self._ids))
        entity = CardEntity(card_id, card, app_id=app_id)
        self.entities[card_id] = entity
        self.changes.append(CardChange(card_id, "create", None, entity.streaming))
        return card_id

    def referenced(self, msg_type: str, content: str) -> str | None:
        """The card id a message to be posted names, checked; None for any other message."""
        if msg_type != "interactive":
            return None
        try:
            data = json.loads(content)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("type") != "card":
            return None
        card_id = (data.get("data") or {}).get("card_id")
        if not isinstance(card_id, str) or card_id not in self.entities:
            raise codes.CARD_ENTITY_NOT_FOUND
        return card_id

    def bind(self, card_id: str, message_id: str) -> None:
        entity = self.entities[card_id]
        if message_id not in entity.message_ids:  # a uuid-deduplicated post names it again
            entity.message_ids.append(message_id)
        self._redraw(message_id, self.rendered(card_id))

    def update(self, card_id: str, body: Mapping[str, Any]) -> None:
        entity = self._entity(card_id)
        wrapper = body.get("card")
        if not isinstance(wrapper, Mapping) or wrapper.get("type") != "card_json":
            raise codes.FIELD_VALIDATION_FAILED.with_detail("card.type must be card_json")
        card = _card(wrapper.get("data"))
        self._advance(entity, body)
        entity.card = card
        self._changed(entity, "update")

    def content(self, card_id: str, element_id: str, body: Mapping[str, Any]) -> None:
        entity = self._entity(card_id)
        text = body.get("content")
        if not isinstance(text, str):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("content is required")
        if not entity.streaming:
            raise codes.CARD_STREAMING_CLOSED
        element = next(
            (e for e in _elements(entity.card) if e.get("element_id") == element_id), None
        )
        if element is None or element.get("tag") not in ("markdown", "plain_text"):
            raise codes.CARD_ONLY_TEXT
        self._advance(entity, body)
        element["content"] = text
        self._changed(entity, "content", element_id)

    def element(self, card_id: str, element_id: str, body: Mapping[str, Any]) -> None:
        """`PUT …/elements/:element_id`: the element replaced whole by `body.element`."""
        entity = self._entity(card_id)
        try:
            new = json.loads(body.get("element") or "")
        except (TypeError, ValueError):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("element must be JSON") from None
        if not isinstance(new, dict) or not isinstance(new.get("tag"), str):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("element needs a tag")
        card = self._apply(entity, [("update_element", element_id, new)], body)
        self._changed(entity, "element", element_id, card)

    def patch_element(self, card_id: str, element_id: str, body: Mapping[str, Any]) -> None:
        """`PATCH …/elements/:element_id`: some of the element's properties changed."""
        entity = self._entity(card_id)
        partial = _json_object(body.get("partial_element"), "partial_element")
        card = self._apply(entity, [("partial_update_element", element_id, partial)], body)
        self._changed(entity, "patch_element", element_id, card)

    def batch(self, card_id: str, body: Mapping[str, Any]) -> None:
        """`POST …/batch_update`: element actions applied in order, all or none (this
        stand-in knows `partial_update_element` and `update_element`)."""
        entity = self._entity(card_id)
        try:
            actions = json.loads(body.get("actions") or "")
        except (TypeError, ValueError):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("actions must be JSON") from None
        if not isinstance(actions, list) or not actions:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("actions must be a non-empty list")
        steps: list[tuple[str, str, dict[str, Any]]] = []
        for action in actions:
            params = action.get("params") if isinstance(action, dict) else None
            kind = action.get("action") if isinstance(action, dict) else None
            if not isinstance(params, dict) or not isinstance(params.get("element_id"), str):
                raise codes.FIELD_VALIDATION_FAILED.with_detail("an action needs element_id")
            if kind == "partial_update_element":
                change = params.get("partial_element")
            elif kind == "update_element":
                change = params.get("element")
            else:
                raise codes.FIELD_VALIDATION_FAILED.with_detail(f"unknown action {kind!r}")
            if not isinstance(change, dict):
                raise codes.FIELD_VALIDATION_FAILED.with_detail(f"{kind} needs an object")
            steps.append((kind, params["element_id"], change))
        card = self._apply(entity, steps, body)
        self._changed(entity, "batch", None, card)

    def settings(self, card_id: str, body: Mapping[str, Any]) -> None:
        entity = self._entity(card_id)
        try:
            settings = json.loads(body.get("settings") or "")
        except (TypeError, ValueError):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("settings must be JSON") from None
        config = settings.get("config") if isinstance(settings, dict) else None
        if not isinstance(config, dict):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("settings.config is required")
        if config.get("update_multi") is False:
            raise codes.CARD_UPDATE_MULTI
        self._advance(entity, body)
        entity.card.setdefault("config", {}).update(config)
        self._changed(entity, "settings")

    def _apply(
        self,
        entity: CardEntity,
        steps: list[tuple[str, str, dict[str, Any]]],
        body: Mapping[str, Any],
    ) -> str:
        """Element changes, each checked (the element exists, its tag stays), then the
        request's sequence; all undone when one fails or the card outgrows 30 KB. The card
        as rendered after them."""
        before = _copy(entity.card)
        try:
            for kind, element_id, change in steps:
                old = next(
                    (e for e in _elements(entity.card) if e.get("element_id") == element_id), None
                )
                if old is None:
                    raise codes.CARD_ELEMENT_NOT_FOUND
                if change.get("tag", old.get("tag")) != old.get("tag"):
                    raise codes.CARD_ELEMENT_TAG
                if kind == "update_element":
                    old.clear()
                old.update(change)
            card = self.rendered(entity.card_id)
            if len(card.encode("utf-8")) > codes.CARD_LIMIT_BYTES:
                raise codes.CARD_TOO_LARGE
            self._advance(entity, body)
        except codes.FeishuError:
            entity.card = before
            raise
        return card

    def rendered(self, card_id: str) -> str:
        return json.dumps(self.entities[card_id].card, ensure_ascii=False)

    # -- checks ----------------------------------------------------------------------------

    def _entity(self, card_id: str) -> CardEntity:
        entity = self.entities.get(card_id)
        if entity is None:
            raise codes.CARD_ENTITY_NOT_FOUND
        return entity

    @staticmethod
    def _advance(entity: CardEntity, body: Mapping[str, Any]) -> None:
        sequence = body.get("sequence")
        if not isinstance(sequence, int) or isinstance(sequence, bool):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("sequence is required")
        if not 1 <= sequence <= _INT32_MAX:
            raise codes.FIELD_VALIDATION_FAILED.with_detail("sequence must be a positive int32")
        if sequence <= entity.sequence:
            raise codes.CARD_SEQUENCE
        entity.sequence = sequence

    def _changed(
        self, entity: CardEntity, kind: str, element_id: str | None = None, card: str = ""
    ) -> None:
        """`card`: the card as rendered now, when the caller has it (rendered once)."""
        card = card or self.rendered(entity.card_id)
        change = CardChange(
            entity.card_id, kind, entity.sequence, entity.streaming, element_id, card=card
        )
        self.changes.append(change)
        for message_id in entity.message_ids:
            self._redraw(message_id, card)


def _copy(card: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a card (JSON values): orjson's round trip, or json's for what orjson
    refuses (a lone surrogate)."""
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(card))
    except (orjson.JSONEncodeError, TypeError):
        copied = json.loads(json.dumps(card))
    return copied


def _json_object(raw: Any, name: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "")
    except (TypeError, ValueError):
        raise codes.FIELD_VALIDATION_FAILED.with_detail(f"{name} must be JSON") from None
    if not isinstance(value, dict):
        raise codes.FIELD_VALIDATION_FAILED.with_detail(f"{name} must be a JSON object")
    return value


def _card(data: Any) -> dict[str, Any]:
    if not isinstance(data, str) or not data.strip():
        raise codes.FIELD_VALIDATION_FAILED.with_detail("data is required (a JSON string)")
    if len(data.encode("utf-8")) > codes.CARD_LIMIT_BYTES:
        raise codes.CARD_TOO_LARGE
    try:
        card = json.loads(data)
    except ValueError:
        raise codes.CARD_GENERATE_FAILED from None
    if not isinstance(card, dict) or card.get("schema") != "2.0":
        raise codes.CARD_GENERATE_FAILED.with_detail("card entities need card JSON 2.0")
    if card.get("config", {}).get("update_multi") is False:
        raise codes.CARD_UPDATE_MULTI
    return card


def _elements(card: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every element of the card body, containers searched too."""
    stack = list(card.get("body", {}).get("elements", []))
    while stack:
        element = stack.pop()
        if isinstance(element, dict):
            yield element
            for key in ("elements", "columns"):
                stack.extend(element.get(key, []) or [])
