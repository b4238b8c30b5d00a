"""The Feishu API of the simulated world: the `FeishuApi` port with seeded latency and
faults, recording every call with its virtual start and end (the transcript)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.feishu.api import BotInfo
from bridge.feishu.errors import FeishuError, RateLimited, ServerError, TransportError
from bridge.feishu.resources import Downloaded

from .loop import EPOCH


@dataclass
class Post:
    """One API call as the world saw it."""

    start: float
    op: str
    target: str  # the message replied to, the chat, the card or message changed
    text: str = ""
    card: dict[str, Any] | None = None
    uuid: str = ""
    end: float = 0.0
    ok: bool = True  # Feishu took it and showed it
    result: str = ""  # the message or card id it made
    repeat: bool = False  # a repeated uuid: Feishu showed nothing new


@dataclass
class FaultPlan:
    """How unkind the API is in one run (the seed picks it)."""

    slow: float = 0.05  # share of calls that take seconds, not milliseconds
    outage: tuple[float, float] | None = None  # the API is down from..until (world seconds)

    def down(self, at: float) -> bool:
        return self.outage is not None and self.outage[0] <= at < self.outage[1]


@dataclass
class SimFeishu:
    rng: random.Random
    now: Any  # () -> float, the world's clock
    faults: FaultPlan = field(default_factory=FaultPlan)
    posts: list[Post] = field(default_factory=list)
    on_card: Any = None  # (Post) -> None: told of each interactive card with buttons
    _by_uuid: dict[str, str] = field(default_factory=dict)  # Feishu's de-duplication
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    async def _call(self, op: str, target: str, **kw: Any) -> Post:
        post = Post(self.now(), op, target, **kw)
        self.posts.append(post)
        if self.faults.down(self.now() - EPOCH):
            await self._refuse(post)
        # Taken the moment it arrives, whether or not its answer gets back to the bridge.
        if post.uuid in self._by_uuid:  # Feishu answers a repeat with the first message
            post.result, post.ok, post.repeat = self._by_uuid[post.uuid], False, True
        else:
            post.result = f"om_bot_{next(self._ids)}"
            if post.uuid:
                self._by_uuid[post.uuid] = post.result
        slow = self.rng.random() < self.faults.slow
        try:
            await asyncio.sleep(
                self.rng.uniform(0.5, 3.0) if slow else self.rng.uniform(0.005, 0.2)
            )
        finally:
            # Cancelled too: the bridge stopped waiting (a card's last state superseded
            # the change), but the request had gone out; it may well have landed.
            post.end = self.now()
        return post

    async def _refuse(self, post: Post) -> None:
        """An outage's answer: a 503, a 429 with its reset, or a call that times out."""
        post.ok = False
        kind = self.rng.choice(("503", "429", "timeout"))
        if kind == "timeout":
            await asyncio.sleep(10.0)  # the client's read timeout
            post.end = self.now()
            raise TransportError(-1, "simulated timeout")
        post.end = self.now()
        if kind == "503":
            raise ServerError(1500, "simulated 503", http_status=503)
        reset = self.rng.choice((1.0, 5.0, 20.0))
        raise RateLimited(99991400, "simulated 429", http_status=429, reset_after=reset)

    async def reply_text(
        self, message_id: str, text: str, *, uuid: str, in_thread: bool = False
    ) -> list[str]:
        return [(await self._call("reply_text", message_id, text=text, uuid=uuid)).result]

    async def send_text(self, chat_id: str, text: str, *, uuid: str) -> list[str]:
        return [(await self._call("send_text", chat_id, text=text, uuid=uuid)).result]

    async def send_text_to_user(self, open_id: str, text: str, *, uuid: str) -> tuple[str, str]:
        post = await self._call("send_text_to_user", open_id, text=text, uuid=uuid)
        return post.result, f"oc_p2p_{open_id}"

    async def reply_card(
        self, message_id: str, card: dict[str, Any], *, uuid: str, in_thread: bool = False
    ) -> str:
        post = await self._call("reply_card", message_id, card=card, uuid=uuid)
        if self.on_card is not None and buttons(card):
            self.on_card(post)
        return post.result

    async def send_card(self, chat_id: str, card: dict[str, Any], *, uuid: str) -> str:
        return (await self._call("send_card", chat_id, card=card, uuid=uuid)).result

    async def update_card(self, message_id: str, card: dict[str, Any]) -> None:
        await self._call("update_card", message_id, card=card)

    async def urgent_app(self, message_id: str, open_ids: Sequence[str]) -> list[str]:
        await self._call("urgent_app", message_id, text=",".join(open_ids))
        return []

    async def download_resource(
        self, message_id: str, key: str, resource_type: str, dest: Path, *, max_bytes: int
    ) -> Downloaded:
        raise FeishuError(230002, "no resources in the simulated world")

    async def message_content(self, message_id: str) -> tuple[str, str] | None:
        return None

    async def upload_and_reply(
        self, reply_to: str, path: Path, *, uuid: str, in_thread: bool = False
    ) -> str:
        return (await self._call("upload", reply_to, uuid=uuid)).result

    async def edit_text(self, message_id: str, text: str) -> None:
        await self._call("edit_text", message_id, text=text)

    async def create_card(self, card: dict[str, Any]) -> str:
        post = await self._call("create_card", "", card=card)
        post.result = post.result.replace("om_bot_", "card_")
        return post.result

    async def reply_card_entity(
        self, message_id: str, card_id: str, *, uuid: str, in_thread: bool = False
    ) -> str:
        return (await self._call("reply_card_entity", message_id, text=card_id, uuid=uuid)).result

    async def update_card_entity(
        self, card_id: str, card: dict[str, Any], *, sequence: int
    ) -> None:
        await self._call("update_card_entity", card_id, card=card)

    async def stream_card_text(
        self, card_id: str, element_id: str, text: str, *, sequence: int
    ) -> None:
        await self._call("stream_card_text", card_id, text=text)

    async def update_card_element(
        self, card_id: str, element: dict[str, Any], *, sequence: int
    ) -> None:
        await self._call("update_card_element", card_id, text=str(element.get("content", "")))

    async def patch_card_element(
        self, card_id: str, element_id: str, partial: dict[str, Any], *, sequence: int
    ) -> None:
        await self._call("patch_card_element", card_id, text=str(partial.get("content", "")))

    async def batch_update_card(
        self, card_id: str, actions: list[dict[str, Any]], *, sequence: int
    ) -> None:
        contents = [str(a["params"]["partial_element"].get("content", "")) for a in actions]
        await self._call("batch_update_card", card_id, text="\n".join(contents))

    async def card_settings(self, card_id: str, settings: dict[str, Any], *, sequence: int) -> None:
        await self._call("card_settings", card_id, card=settings)

    async def add_reaction(self, message_id: str, emoji_type: str) -> str | None:
        try:
            post = await self._call("add_reaction", message_id, text=emoji_type)
        except FeishuError:
            return None  # best-effort, as the real client
        return f"r_{post.result}"

    async def remove_reaction(self, message_id: str, reaction_id: str) -> bool:
        try:
            await self._call("remove_reaction", message_id, text=reaction_id)
        except FeishuError:
            return False
        return True

    async def bot_info(self) -> BotInfo:
        return BotInfo(open_id="ou_bot", app_name="Sim")

    async def aclose(self) -> None:
        return None


def buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    """The values of a card's buttons (an approval's choices)."""
    return [
        action["value"]
        for element in card.get("elements", [])
        for action in element.get("actions", [])
        if isinstance(action.get("value"), dict)
    ]
