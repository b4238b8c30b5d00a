"""`Forwarder`: hands what landed on this instance but belongs to a conversation another
instance runs (a card click, a recall, a bot-menu click) to that instance, over its
operator listener.

A card callback must be answered within Feishu's 3 seconds and carries no conversation
key, so the forwarder asks every other live instance at once (`POST /cluster/forward`,
with the shared BRIDGE_OPS_TOKEN) and takes the first that knows the request; the others
answer 404. The live instances and their operator URLs come from the `instances` table,
which every instance's heartbeat fills; one whose heartbeat is older than `stale_after`
is not asked. A forward names its app (one of several; none: the first), whose
conversations it is about: another app's may have the same key (a group with both bots).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

import httpx

from bridge.feishu.events import CardAction, CardActionReply, MenuClick
from bridge.store.port_cluster import InstanceRecord

log = logging.getLogger(__name__)

PATH = "/cluster/forward"


class PeersUnreachable(Exception):
    """No other instance knew the request, and at least one could not be asked: it may be
    the owner, so nothing was decided (the user should try again)."""


class InstancesStore(Protocol):
    """What the forwarder and the one-name check need of the `Store`."""

    async def instances(self, now: float) -> list[InstanceRecord]: ...


class Forwarder:
    def __init__(
        self,
        store: InstancesStore,
        instance_id: str,
        *,
        token: str | None,
        stale_after: float,
        clock: Callable[[], float],
        timeout: float = 2.0,  # inside Feishu's 3 s, with room for our own answer
        transport: httpx.AsyncBaseTransport | None = None,
        app: str | None = None,
    ) -> None:
        self._store = store
        self._app = app
        self._me = instance_id
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._stale_after = stale_after
        self._timeout = timeout
        self._clock = clock
        # trust_env=False: a proxy from the environment must never see the cluster's calls.
        self._client = httpx.AsyncClient(timeout=timeout, trust_env=False, transport=transport)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def card_action(self, action: CardAction) -> CardActionReply | None:
        """The owner's answer to a click; None when no live instance holds the request."""
        answer = await self._ask({"kind": "card_action", "action": action.model_dump()})
        return None if answer is None else CardActionReply.model_validate(answer)

    async def recall(self, conversation_key: str, message_id: str) -> bool:
        """True when the conversation's owner took the recall."""
        body = {"kind": "recall", "conversation_key": conversation_key, "message_id": message_id}
        return await self._ask(body) is not None

    async def menu(self, click: MenuClick, chat_id: str, admitted: bool) -> bool:
        """True when the owner of the clicker's private chat took the bot-menu click."""
        body = {"kind": "menu", "click": click.model_dump(), "chat_id": chat_id}
        return await self._ask({**body, "admitted": admitted}) is not None

    async def _peers(self) -> list[str]:
        now = self._clock()
        return [
            record.ops_url
            for record in await self._store.instances(now)
            if record.instance_id != self._me and record.ops_url and record.age < self._stale_after
        ]

    async def _ask(self, body: dict[str, Any]) -> dict[str, Any] | None:
        peers = await self._peers()
        if not peers:
            return None
        if self._app is not None:
            body = {**body, "app": self._app}
        asks = [asyncio.create_task(self._post(url, body)) for url in peers]
        unreachable = False
        try:
            for next_done in asyncio.as_completed(asks, timeout=self._timeout):
                try:
                    answer = await next_done
                except TimeoutError:
                    unreachable = True
                    break
                if answer is _UNREACHABLE:
                    unreachable = True
                elif isinstance(answer, dict):
                    return answer
        finally:
            for ask in asks:
                ask.cancel()
            for ask in asks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ask
        if unreachable:
            raise PeersUnreachable(body["kind"])
        return None

    async def _post(self, base: str, body: dict[str, Any]) -> Any:
        try:
            response = await self._client.post(base + PATH, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            log.warning("instance at %s not reached: %s", base, type(exc).__name__)
            return _UNREACHABLE
        if response.status_code == 200:
            answer = response.json()
            return answer if isinstance(answer, dict) else {}
        if response.status_code != 404:
            log.warning("instance at %s answered %d to a forward", base, response.status_code)
            return _UNREACHABLE
        return None


_UNREACHABLE = object()
