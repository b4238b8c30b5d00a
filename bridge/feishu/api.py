"""The outbound port: what the bridge asks of Feishu. `FeishuClient` implements it over
httpx; unit tests use a recording fake with the same signatures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bridge.feishu.resources import Downloaded


@dataclass(frozen=True)
class BotInfo:
    open_id: str
    app_name: str


class FeishuApi(Protocol):
    async def reply_text(
        self, message_id: str, text: str, *, uuid: str, in_thread: bool = False
    ) -> list[str]:
        """Reply to a message; a text over Feishu's limit is split into several replies
        (uuids `<uuid>`, `<uuid>-2`, …). Returns the new message ids in order."""

    async def send_text(self, chat_id: str, text: str, *, uuid: str) -> list[str]:
        """Post to a chat (receive_id_type=chat_id); split like reply_text."""

    async def send_text_to_user(self, open_id: str, text: str, *, uuid: str) -> tuple[str, str]:
        """Post a short line to a user's private chat with the bot
        (receive_id_type=open_id), which need not be known: returns the message id and the
        chat's id, as Feishu answers them."""

    async def reply_card(
        self, message_id: str, card: dict[str, Any], *, uuid: str, in_thread: bool = False
    ) -> str:
        """Reply with an interactive card; returns its message id."""

    async def send_card(self, chat_id: str, card: dict[str, Any], *, uuid: str) -> str: ...

    async def update_card(self, message_id: str, card: dict[str, Any]) -> None:
        """PATCH an interactive card sent by the bot."""

    async def download_resource(
        self, message_id: str, key: str, resource_type: str, dest: Path, *, max_bytes: int
    ) -> Downloaded:
        """A user's image or file to `dest`; raises `TooLarge` past `max_bytes`."""

    async def message_content(self, message_id: str) -> tuple[str, str] | None:
        """(msg_type, content) of a message (a quoted one); None when Feishu will not say."""

    async def upload_and_reply(
        self, reply_to: str, path: Path, *, uuid: str, in_thread: bool = False
    ) -> str:
        """Upload a file (an image as an image) and post it as a reply; its message id."""

    async def edit_text(self, message_id: str, text: str) -> None:
        """PUT a new text into a text message the bot sent (Feishu's message edit)."""

    async def urgent_app(self, message_id: str, open_ids: Sequence[str]) -> list[str]:
        """Feishu's in-app urgent notification (加急) on a message the bot sent, to `open_ids`
        (members of its chat); returns the ids Feishu found invalid. Needs the scope
        im:message.urgent (`urgent.SCOPE`)."""

    # Card entities (CardKit): the live status card. `sequence` grows with every change.
    async def create_card(self, card: dict[str, Any]) -> str:
        """Create a card entity from card JSON 2.0; returns its card_id."""

    async def reply_card_entity(
        self, message_id: str, card_id: str, *, uuid: str, in_thread: bool = False
    ) -> str:
        """Reply with the card entity; returns the message id."""

    async def update_card_entity(
        self, card_id: str, card: dict[str, Any], *, sequence: int
    ) -> None: ...

    async def stream_card_text(
        self, card_id: str, element_id: str, text: str, *, sequence: int
    ) -> None:
        """The whole text of one element; Feishu types out what was added."""

    async def update_card_element(
        self, card_id: str, element: dict[str, Any], *, sequence: int
    ) -> None:
        """Replace one element (found by its `element_id`) with `element`."""

    async def patch_card_element(
        self, card_id: str, element_id: str, partial: dict[str, Any], *, sequence: int
    ) -> None:
        """Change some properties of one element (its `content`, say)."""

    async def batch_update_card(
        self, card_id: str, actions: list[dict[str, Any]], *, sequence: int
    ) -> None:
        """CardKit's batch of element (and settings) actions, applied in order."""

    async def card_settings(
        self, card_id: str, settings: dict[str, Any], *, sequence: int
    ) -> None: ...

    async def add_reaction(self, message_id: str, emoji_type: str) -> str | None:
        """Best-effort: the reaction id, or None when skipped or failed (never raises)."""

    async def remove_reaction(self, message_id: str, reaction_id: str) -> bool:
        """Best-effort, never raises: whether Feishu removed it (False when skipped or
        failed)."""

    async def bot_info(self) -> BotInfo: ...

    async def aclose(self) -> None: ...
