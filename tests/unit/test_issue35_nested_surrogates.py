"""Issue 35, "hostile text at every depth": a lone surrogate escape inside a JSON string that
Feishu nests in the event (a message's `content`, a 1.0 card's string value) passed the body's
checks, decoded later into a `str` the journal could not encode, and the webhook answered 500:
Feishu redelivered it for hours and the user never got an answer. It is repaired (U+FFFD) in
the one decoder every level goes through (bridge/feishu/json_codec.py), so the message is
journaled and answered. Real aiohttp server, real Receiver, real SQLite store on a file."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.feishu.events import (
    BotIdentity,
    CardAction,
    CardActionReply,
    InboundMessage,
    refs_from_journal,
)
from bridge.feishu.longconn import LongConnection
from bridge.feishu.webhook import EVENTS_PATH, webhook_routes
from bridge.receiver import AccessPolicy, Receiver
from bridge.store import SqliteStore
from tests.unit.test_longconn import sdk_message

NOW = 1_700_000_000.0
BOT = "ou_bot"
LONE = "\\ud800"  # as it stands in the inner JSON text: an escape, not a character
FFFD = "\ufffd"


class RecordingSink:
    """The engine's side of the receiver: what was accepted, and the card clicks."""

    def __init__(self) -> None:
        self.accepted: list[InboundMessage] = []
        self.actions: list[CardAction] = []

    def accept(self, message: InboundMessage) -> None:
        self.accepted.append(message)

    def refuse(self, message: InboundMessage) -> None:
        raise AssertionError("everyone is allowed here")

    async def card_action(self, action: CardAction) -> CardActionReply:
        self.actions.append(action)
        # The click's value goes back to Feishu in the reply, as the approval cards' toasts do.
        return CardActionReply(toast_type="info", toast_text=json.dumps(action.value))

    def recall(self, conversation_key: str, message_id: str) -> None:
        raise AssertionError("no recall here")


class Bridge:
    def __init__(
        self,
        store: SqliteStore,
        client: TestClient[Any, Any],
        sink: RecordingSink,
        receiver: Receiver,
    ) -> None:
        self.store, self.client, self.sink, self.receiver = store, client, sink, receiver
        self.sent = 0

    async def post(self, payload: dict[str, Any]) -> tuple[int, Any]:
        resp = await self.client.post(EVENTS_PATH, data=json.dumps(payload).encode())
        return resp.status, await resp.json()

    def message(self, message_type: str, content: str, **extra: Any) -> dict[str, Any]:
        """A p2p message event; `content` is the inner JSON text exactly as given."""
        self.sent += 1
        return {
            "schema": "2.0",
            "header": {"event_id": f"ev_{self.sent}", "event_type": "im.message.receive_v1"},
            "event": {
                "sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": "user"},
                "message": {
                    "message_id": f"om_{self.sent}",
                    "chat_id": "oc_1",
                    "chat_type": "p2p",
                    "message_type": message_type,
                    "content": content,
                    **extra,
                },
            },
        }

    def card(self, value: Any) -> dict[str, Any]:
        self.sent += 1
        return {
            "schema": "2.0",
            "header": {"event_id": f"ev_{self.sent}", "event_type": "card.action.trigger"},
            "event": {
                "operator": {"open_id": "ou_alice"},
                "action": {"value": value, "tag": "button"},
                "context": {"open_message_id": "om_card", "open_chat_id": "oc_1"},
            },
        }


async def start(store: SqliteStore) -> Bridge:
    sink = RecordingSink()
    receiver = Receiver(
        store=store,
        sink=sink,
        policy=AccessPolicy(allow_all=True),
        bot=BotIdentity(BOT),
        clock=lambda: NOW,
    )
    app = web.Application()
    app.add_routes(
        webhook_routes(receiver, encrypt_key=None, verification_token=None, bot=BotIdentity(BOT))
    )
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    return Bridge(store, client, sink, receiver)


@pytest.fixture
async def bridge(tmp_path: Path) -> AsyncIterator[Bridge]:
    store = SqliteStore(tmp_path / "bridge.db")
    await store.open()
    served = await start(store)
    yield served
    await served.client.close()
    await store.close()


async def journaled_text(bridge: Bridge, message_id: str) -> str:
    journaled = await bridge.store.message(message_id)
    assert journaled is not None, "not journaled"
    return journaled.text


async def test_a_lone_surrogate_in_text_content_is_journaled_repaired(bridge: Bridge) -> None:
    content = '{"text": "hello ' + LONE + ' there"}'
    assert await bridge.post(bridge.message("text", content)) == (200, {})
    assert await journaled_text(bridge, "om_1") == f"hello {FFFD} there"
    assert [m.text for m in bridge.sink.accepted] == [f"hello {FFFD} there"]


async def test_an_escaped_pair_split_by_the_sender_is_joined_not_replaced(bridge: Bridge) -> None:
    content = '{"text": "smile \\ud83d\\ude00"}'  # a valid pair stays the emoji
    assert await bridge.post(bridge.message("text", content)) == (200, {})
    assert await journaled_text(bridge, "om_1") == "smile \U0001f600"


async def test_a_lone_surrogate_in_post_content_is_journaled_repaired(bridge: Bridge) -> None:
    paragraph = '[{"tag": "text", "text": "a' + LONE + 'b"}, {"tag": "at", "user_name": "' + LONE
    content = '{"title": "t' + LONE + '", "content": [' + paragraph + '"}]]}'
    assert await bridge.post(bridge.message("post", content)) == (200, {})
    assert await journaled_text(bridge, "om_1") == f"t{FFFD}\na{FFFD}b@{FFFD}"


async def test_a_lone_surrogate_in_a_file_name_is_journaled_repaired(bridge: Bridge) -> None:
    content = '{"file_key": "file_k1", "file_name": "report' + LONE + '.pdf"}'
    assert await bridge.post(bridge.message("file", content)) == (200, {})
    journaled = await bridge.store.message("om_1")
    assert journaled is not None
    [ref] = refs_from_journal(journaled.attachments)
    assert (ref.key, ref.name) == ("file_k1", f"report{FFFD}.pdf")


async def test_a_lone_surrogate_in_a_string_card_value_is_repaired(bridge: Bridge) -> None:
    value = '{"choice": "allow_once", "note": "n' + LONE + '"}'  # a 1.0 card's JSON string
    status, body = await bridge.post(bridge.card(value))
    assert status == 200
    assert [a.value for a in bridge.sink.actions] == [{"choice": "allow_once", "note": f"n{FFFD}"}]
    assert json.loads(body["toast"]["content"]) == {"choice": "allow_once", "note": f"n{FFFD}"}


async def test_a_lone_surrogate_in_the_envelope_is_repaired_too(bridge: Bridge) -> None:
    # The user's display name in a mention: the body itself carries the escape.
    mention = {"key": "@_user_1", "id": {"open_id": "ou_bob"}, "name": "Bo\ud800b"}
    payload = bridge.message("text", '{"text": "hi @_user_1"}', mentions=[mention])
    assert await bridge.post(payload) == (200, {})
    assert await journaled_text(bridge, "om_1") == f"hi @Bo{FFFD}b"


async def test_the_long_connection_journals_the_repaired_text_too(bridge: Bridge) -> None:
    payload = bridge.message("text", '{"text": "hello ' + LONE + ' there"}')
    connection = LongConnection(
        "cli_test",
        "app-secret",
        "http://127.0.0.1:9",
        bridge.receiver,
        asyncio.get_running_loop(),
        bot=BotIdentity(BOT),
    )
    await asyncio.to_thread(connection.on_sdk_message, sdk_message(payload))
    assert await journaled_text(bridge, "om_1") == f"hello {FFFD} there"


# --- fuzz: random JSON with lone surrogates at random depth in content and card values -----

LONE_SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
strings = st.one_of(
    st.text(max_size=12),
    st.tuples(st.text(max_size=4), LONE_SURROGATES, st.text(max_size=4)).map("".join),
)
trees = st.recursive(
    st.none() | st.booleans() | st.integers() | strings,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(strings, inner, max_size=4),
    max_leaves=20,
)


def _post_content(title: str, texts: list[str], extra: Any) -> dict[str, Any]:
    elements = [
        {"tag": tag, "text": t, "user_name": t, "href": t}
        for t in texts
        for tag in ("text", "a", "at")
    ]
    return {"title": title, "content": [elements, [{"tag": "md", "text": extra}]]}


contents = st.one_of(
    st.builds(lambda t, x: {"text": t, "extra": x}, strings, trees),
    st.builds(_post_content, strings, st.lists(strings, max_size=3), trees),
    st.builds(lambda n, x: {"file_key": "fk", "file_name": n, "x": x}, strings, trees),
    st.builds(lambda n: {"image_key": n}, strings),
    trees,
)
MESSAGE_TYPES = st.sampled_from(["text", "post", "file", "image", "audio", "media", "sticker"])
# Inner JSON as escapes (what a JavaScript client's JSON.stringify writes) or as raw
# characters (which the body's own encoding then escapes one level up).
inner_json = st.builds(
    lambda value, ascii_only: json.dumps(value, ensure_ascii=ascii_only), contents, st.booleans()
)
card_values = st.one_of(
    st.dictionaries(strings, trees, max_size=4),
    st.builds(
        lambda value, ascii_only: json.dumps(value, ensure_ascii=ascii_only), trees, st.booleans()
    ),
    strings,
)


class Failures(logging.Handler):
    """ERROR records: how an exception that escaped a handler shows (webhook.py logs it)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def served(
    loop: asyncio.AbstractEventLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Bridge, Failures]]:
    store = SqliteStore(tmp_path_factory.mktemp("fuzz") / "bridge.db")
    loop.run_until_complete(store.open())
    bridge = loop.run_until_complete(start(store))
    failures = Failures()
    logging.getLogger("bridge").addHandler(failures)
    yield bridge, failures
    logging.getLogger("bridge").removeHandler(failures)
    loop.run_until_complete(bridge.client.close())
    loop.run_until_complete(store.close())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_type=MESSAGE_TYPES, content=inner_json, value=card_values)
def test_no_nested_text_gets_a_5xx_or_escapes_as_an_exception(
    message_type: str,
    content: str,
    value: Any,
    loop: asyncio.AbstractEventLoop,
    served: tuple[Bridge, Failures],
) -> None:
    bridge, failures = served

    async def run() -> tuple[int, int, str | None]:
        status, _ = await bridge.post(bridge.message(message_type, content))
        message_id = f"om_{bridge.sent}"
        journaled = await bridge.store.message(message_id)
        card_status, _ = await bridge.post(bridge.card(value))
        return status, card_status, None if journaled is None else journaled.text

    status, card_status, text = loop.run_until_complete(run())
    assert failures.records == []
    assert status < 500
    assert card_status < 500
    if status == 200 and message_type in ("text", "post"):
        assert text is not None  # answered, hence journaled: never dropped silently
    if text is not None:
        text.encode("utf-8")
    for action in bridge.sink.actions:
        json.dumps(action.value, ensure_ascii=False).encode("utf-8")
