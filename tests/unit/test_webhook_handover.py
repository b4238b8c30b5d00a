"""A message whose hand-over outlives the webhook's deadline is neither lost nor run twice,
and a group message the bridge cannot judge yet (the bot's identity unknown) is redelivered
rather than dropped. Real aiohttp server, real Receiver, real SQLite store on a file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.feishu.events import BotIdentity
from bridge.feishu.webhook import EVENTS_PATH, webhook_routes
from bridge.receiver import AccessPolicy, Receiver
from bridge.store import SqliteStore
from tests.unit.receiver_fakes import AcceptingSink, FateList

NOW = 1_700_000_000.0
BOT = "ou_bot"


class SlowCommitStore(SqliteStore):
    """The journal write commits, then its answer is late (as when the database's thread
    commits while the awaiting request has already been answered)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.answer = asyncio.Event()
        self.answer.set()

    async def journal_message(self, *args: Any, **kwargs: Any) -> bool:
        journaled = await super().journal_message(*args, **kwargs)
        await self.answer.wait()
        return journaled


def payload(*, chat_type: str = "p2p", mentions: list[dict[str, Any]] | None = None) -> bytes:
    return json.dumps(
        {
            "schema": "2.0",
            "header": {
                "event_id": "ev_1",
                "event_type": "im.message.receive_v1",
                "create_time": str(int(NOW * 1000)),
            },
            "event": {
                "sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"},
                "message": {
                    "message_id": "om_1",
                    "chat_id": "oc_1",
                    "chat_type": chat_type,
                    "message_type": "text",
                    "content": json.dumps({"text": "@_user_1 hello"}),
                    "create_time": str(int(NOW * 1000)),
                    "mentions": mentions or [],
                },
            },
        }
    ).encode()


class Bridge:
    def __init__(self, store: SqliteStore, bot: str | None) -> None:
        self.store, self.sink, self.fates = store, AcceptingSink(), FateList()
        self.bot = BotIdentity(bot)
        self.receiver = Receiver(
            store=store,
            sink=self.sink,
            policy=AccessPolicy(allow_all=True),
            bot=self.bot,
            clock=lambda: NOW,
            fates=self.fates,
        )

    async def post(self, client: TestClient[Any, Any], body: bytes) -> tuple[int, Any]:
        resp = await client.post(EVENTS_PATH, data=body)
        return resp.status, await resp.json()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Bridge, TestClient[Any, Any]]]:
    store = SlowCommitStore(tmp_path / "bridge.db")
    await store.open()
    bridge = Bridge(store, BOT)
    app = web.Application()
    app.add_routes(
        webhook_routes(
            bridge.receiver,
            encrypt_key=None,
            verification_token=None,
            bot=bridge.bot,
            deadline=0.05,
        )
    )
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    yield bridge, client
    await client.close()
    await store.close()


async def test_a_late_hand_over_is_finished_so_the_redelivery_is_a_true_duplicate(
    served: tuple[Bridge, TestClient[Any, Any]],
) -> None:
    bridge, client = served
    store = bridge.store
    assert isinstance(store, SlowCommitStore)
    store.answer.clear()
    assert await bridge.post(client, payload()) == (503, {"error": "busy"})
    store.answer.set()  # the committed write answers after Feishu was told to retry
    for _ in range(100):
        if bridge.sink.accepted:
            break
        await asyncio.sleep(0)
    assert bridge.sink.accepted == ["om_1"]
    # Feishu's redelivery: already handed over, so it is a duplicate, not a second run.
    assert await bridge.post(client, payload()) == (200, {})
    assert bridge.sink.accepted == ["om_1"]
    assert bridge.fates == ["accepted", "duplicate"]


async def test_a_group_mention_while_the_bot_is_unknown_is_503_then_runs_once_known(
    served: tuple[Bridge, TestClient[Any, Any]],
) -> None:
    bridge, client = served
    bridge.bot.open_id = None
    mention = [{"key": "@_user_1", "id": {"open_id": BOT}, "name": "Bot"}]
    body = payload(chat_type="group", mentions=mention)
    assert await bridge.post(client, body) == (503, {"error": "retry_later"})
    assert bridge.sink.accepted == []
    bridge.bot.open_id = BOT  # the bot-info call succeeded meanwhile
    assert await bridge.post(client, body) == (200, {})
    assert bridge.sink.accepted == ["om_1"]
    assert bridge.fates == ["retry_later", "accepted"]


async def test_a_group_message_without_any_mention_needs_no_identity(
    served: tuple[Bridge, TestClient[Any, Any]],
) -> None:
    bridge, client = served
    bridge.bot.open_id = None
    assert await bridge.post(client, payload(chat_type="group")) == (200, {})
    assert bridge.sink.accepted == []
    assert bridge.fates == ["ignored"]
