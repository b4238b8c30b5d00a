"""The unit tests' Feishu (tests/fakes/feishu.py) answers every call the real client makes,
names each as the `FeishuApi` port does, and holds or fails an op when told."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from bridge.devtools.emulator.codes import INTERNAL_ERROR, MESSAGE_INVALID_PARAM
from bridge.feishu.errors import BusinessError, ServerError, TransportError
from tests.fakes.feishu import Call, FakeFeishu

CARD = {"schema": "2.0", "body": {"elements": [{"tag": "markdown", "element_id": "answer"}]}}


async def test_every_call_of_the_client_is_answered_and_named(tmp_path: Path) -> None:
    feishu = FakeFeishu()
    feishu.messages["om_user"] = ("text", json.dumps({"text": "quoted"}))
    api = feishu.client()
    assert await api.reply_text("om_user", "hello", uuid="u1") == ["om_bot_1"]
    assert await api.send_text("oc_1", "to the chat", uuid="u2") == ["om_bot_2"]
    assert await api.send_text_to_user("ou_1", "hi", uuid="u3") == ("om_bot_3", "oc_p2p_ou_1")
    assert await api.reply_card("om_user", CARD, uuid="u4") == "om_bot_4"
    assert await api.send_card("oc_1", CARD, uuid="u5") == "om_bot_5"
    await api.update_card("om_bot_4", CARD)
    await api.edit_text("om_bot_1", "hello again")
    assert await api.urgent_app("om_bot_4", ["ou_1"]) == []
    assert await api.message_content("om_user") == ("text", json.dumps({"text": "quoted"}))
    edited = await api.message_content("om_bot_1")
    assert edited is not None
    assert json.loads(edited[1]) == {"text": "hello again"}
    assert await api.message_content("om_unknown") is None
    reaction = await api.add_reaction("om_user", "OnIt")
    assert reaction is not None
    assert feishu.shown("om_user") == ["OnIt"]
    assert await api.remove_reaction("om_user", reaction)
    assert feishu.shown("om_user") == []
    got = await api.download_resource("om_user", "img_1", "image", tmp_path / "a", max_bytes=99)
    assert (got.mime, (tmp_path / "a").read_bytes()) == ("image/png", b"\x89PNG\r\n\x1a\n")
    assert (await api.bot_info()).open_id == "ou_bot"
    card_id = await api.create_card(CARD)
    assert await api.reply_card_entity("om_user", card_id, uuid="u6") == "om_bot_6"
    await api.update_card_entity(card_id, CARD, sequence=1)
    await api.stream_card_text(card_id, "answer", "typed", sequence=2)
    await api.update_card_element(card_id, {"element_id": "answer", "content": "x"}, sequence=3)
    await api.patch_card_element(card_id, "answer", {"content": "y"}, sequence=4)
    await api.batch_update_card(card_id, [], sequence=5)
    await api.card_settings(card_id, {"config": {"streaming_mode": False}}, sequence=6)
    image = tmp_path / "chart.png"
    image.write_bytes(b"png")
    assert await api.upload_and_reply("om_user", image, uuid="u7") == "om_bot_7"

    assert [c.op for c in feishu.calls] == [
        "reply_text",
        "send_text",
        "send_text_to_user",
        "reply_card",
        "send_card",
        "update_card",
        "edit_text",
        "urgent_app",
        "get_message",
        "get_message",
        "get_message",
        "add_reaction",
        "remove_reaction",
        "download_resource",
        "bot_info",
        "create_card",
        "reply_card_entity",
        "update_card_entity",
        "stream_card_text",
        "update_card_element",
        "patch_card_element",
        "batch_update_card",
        "card_settings",
        "upload_image",
        "reply_image",
    ]
    assert all(c.ok for c in feishu.calls)
    assert feishu.texts() == ["hello", "to the chat"]
    assert [c.target for c in feishu.cards()] == ["om_user", "oc_1"]
    assert feishu.token_fetches == 1


async def test_a_repeated_uuid_is_the_same_message() -> None:
    feishu = FakeFeishu()
    api = feishu.client()
    first = await api.reply_text("om_user", "hello", uuid="u1")
    assert await api.reply_text("om_user", "hello", uuid="u1") == first
    assert feishu.calls == [Call("reply_text", "om_user", "hello")] * 2  # Feishu saw both


async def test_a_held_op_waits_for_its_release() -> None:
    feishu = FakeFeishu()
    api = feishu.client()
    feishu.hold("reply_text")
    reply = asyncio.ensure_future(api.reply_text("om_user", "slow", uuid="u1"))
    await feishu.entered.wait()
    assert await api.add_reaction("om_user", "OnIt") is not None  # other ops go on
    assert feishu.texts() == []  # in flight: not shown yet
    feishu.release()
    assert await reply == ["om_bot_1"]
    assert feishu.ops() == [("reply_text", "om_user"), ("add_reaction", "om_user")]
    assert feishu.texts() == ["slow"]


async def test_a_failed_op_is_answered_as_feishu_refuses_until_mended() -> None:
    feishu = FakeFeishu()
    api = feishu.client()
    feishu.fail("urgent_app", MESSAGE_INVALID_PARAM)
    with pytest.raises(BusinessError) as refused:
        await api.urgent_app("om_x", ["ou_1"])
    assert (refused.value.code, refused.value.http_status) == (230001, 400)
    assert feishu.failed.is_set()
    feishu.fail("reply_text", INTERNAL_ERROR)
    with pytest.raises(ServerError):
        await api.reply_text("om_user", "down", uuid="u1")
    assert [c.status for c in feishu.calls] == [400, 500, 500, 500, 500]  # 5xx: retried
    assert feishu.texts() == []
    feishu.mend("reply_text")
    assert await api.reply_text("om_user", "up", uuid="u1") == ["om_bot_1"]
    assert feishu.texts() == ["up"]


async def test_a_failed_op_may_raise_in_the_transport() -> None:
    feishu = FakeFeishu()
    api = feishu.client()
    feishu.fail("update_card", httpx.ConnectError("refused"))
    with pytest.raises(TransportError):
        await api.update_card("om_bot_1", CARD)
    feishu.fail("update_card", RuntimeError("a bug"))
    with pytest.raises(RuntimeError, match="a bug"):
        await api.update_card("om_bot_1", CARD)
