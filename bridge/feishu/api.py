"""The outbound port: what the bridge asks of Feishu. `FeishuClient` implements it: `send`
for any typed request, and the conveniences the bridge uses. Fakes are transports under
the real client (tests), not implementations of this. `terms`: whose a call is
(`requests.CallTerms`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from bridge.feishu.requests import NO_TERMS, BotInfo, CallTerms, FeishuRequest
from bridge.feishu.resources import Downloaded

R = TypeVar("R")
__all__ = ["BotInfo", "FeishuApi"]


class FeishuApi(Protocol):
    async def send(self, request: FeishuRequest[R]) -> R:
        """Any typed request (requests.py), through the session's middlewares."""

    async def reply_text(
        self,
        message_id: str,
        text: str,
        *,
        uuid: str,
        in_thread: bool = False,
        terms: CallTerms = NO_TERMS,
    ) -> list[str]:
        """Reply to a message; a text over Feishu's limit is split into several replies
        (uuids `<uuid>`, `<uuid>-2`, …). Returns the new message ids in order."""

    async def send_text(
        self, chat_id: str, text: str, *, uuid: str, terms: CallTerms = NO_TERMS
    ) -> list[str]:
        """Post to a chat (receive_id_type=chat_id); split like reply_text."""

    async def send_text_to_user(self, open_id: str, text: str, *, uuid: str) -> tuple[str, str]:
        """Post a short line to a user's private chat with the bot
        (receive_id_type=open_id), which need not be known: returns the message id and the
        chat's id, as Feishu answers them."""

    async def reply_card(
        self,
        message_id: str,
        card: dict[str, Any],
        *,
        uuid: str,
        in_thread: bool = False,
        terms: CallTerms = NO_TERMS,
    ) -> str:
        """Reply with an interactive card; returns its message id."""

    async def send_card(
        self, chat_id: str, card: dict[str, Any], *, uuid: str, terms: CallTerms = NO_TERMS
    ) -> str: ...

    async def update_card(
        self, message_id: str, card: dict[str, Any], *, terms: CallTerms = NO_TERMS
    ) -> None:
        """PATCH an interactive card sent by the bot."""

    async def download_resource(
        self, message_id: str, key: str, resource_type: str, dest: Path, *, max_bytes: int
    ) -> Downloaded:
        """A user's image or file to `dest`; raises `TooLarge` past `max_bytes`."""

    async def message_content(self, message_id: str) -> tuple[str, str] | None:
        """(msg_type, content) of a message (a quoted one); None when Feishu will not say."""

    async def upload_and_reply(
        self,
        reply_to: str,
        path: Path,
        *,
        uuid: str,
        in_thread: bool = False,
        terms: CallTerms = NO_TERMS,
    ) -> str:
        """Upload a file (an image as an image) and post it as a reply; its message id."""

    async def edit_text(self, message_id: str, text: str, *, terms: CallTerms = NO_TERMS) -> None:
        """PUT a new text into a text message the bot sent (Feishu's message edit)."""

    async def urgent_app(
        self, message_id: str, open_ids: Sequence[str], *, terms: CallTerms = NO_TERMS
    ) -> list[str]:
        """Feishu's in-app urgent notification (加急) on a message the bot sent, to `open_ids`
        (members of its chat); returns the ids Feishu found invalid. Needs the scope
        im:message.urgent (`urgent.SCOPE`)."""

    # Card entities (CardKit): the live status card. `sequence` grows with every change.
    async def create_card(self, card: dict[str, Any], *, terms: CallTerms = NO_TERMS) -> str:
        """Create a card entity from card JSON 2.0; returns its card_id."""

    async def reply_card_entity(
        self,
        message_id: str,
        card_id: str,
        *,
        uuid: str,
        in_thread: bool = False,
        terms: CallTerms = NO_TERMS,
    ) -> str:
        """Reply with the card entity; returns the message id."""

    async def update_card_entity(
        self, card_id: str, card: dict[str, Any], *, sequence: int, terms: CallTerms = NO_TERMS
    ) -> None: ...

    async def stream_card_text(
        self,
        card_id: str,
        element_id: str,
        text: str,
        *,
        sequence: int,
        terms: CallTerms = NO_TERMS,
    ) -> None:
        """The whole text of one element; Feishu types out what was added."""

    async def update_card_element(
        self, card_id: str, element: dict[str, Any], *, sequence: int, terms: CallTerms = NO_TERMS
    ) -> None:
        """Replace one element (found by its `element_id`) with `element`."""

    async def patch_card_element(
        self,
        card_id: str,
        element_id: str,
        partial: dict[str, Any],
        *,
        sequence: int,
        terms: CallTerms = NO_TERMS,
    ) -> None:
        """Change some properties of one element (its `content`, say)."""

    async def batch_update_card(
        self,
        card_id: str,
        actions: list[dict[str, Any]],
        *,
        sequence: int,
        terms: CallTerms = NO_TERMS,
    ) -> None:
        """CardKit's batch of element (and settings) actions, applied in order."""

    async def card_settings(
        self, card_id: str, settings: dict[str, Any], *, sequence: int, terms: CallTerms = NO_TERMS
    ) -> None: ...

    async def add_reaction(
        self, message_id: str, emoji_type: str, *, terms: CallTerms = NO_TERMS
    ) -> str | None:
        """Best-effort: the reaction id, or None when skipped or failed (never raises)."""

    async def remove_reaction(
        self, message_id: str, reaction_id: str, *, terms: CallTerms = NO_TERMS
    ) -> bool:
        """Best-effort, never raises: whether Feishu removed it (False when skipped or
        failed)."""

    async def bot_info(self) -> BotInfo: ...

    async def aclose(self) -> None: ...
