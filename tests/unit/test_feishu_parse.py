"""Raw Feishu event JSON → typed models (bridge.feishu.events)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.feishu.errors import EventParseError
from bridge.feishu.events import (
    CardAction,
    IgnoredEvent,
    InboundMessage,
    UrlVerification,
    event_token,
    parse_event,
)
from bridge.feishu.json_codec import decode_json

BOT = "ou_bot"
ALICE = "ou_alice"
BOB = "ou_bob"


def mention(key: str, open_id: str, name: str) -> dict[str, Any]:
    return {
        "key": key,
        "id": {"open_id": open_id, "union_id": "on_" + open_id, "user_id": None},
        "name": name,
        "tenant_key": "t1",
    }


def message_event(
    content: dict[str, Any] | str,
    *,
    message_type: str = "text",
    chat_type: str = "group",
    mentions: list[dict[str, Any]] | None = None,
    **message_extra: Any,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "message_id": "om_1",
        "root_id": "",
        "parent_id": "",
        "create_time": "1700000000123",
        "update_time": "1700000000123",
        "chat_id": "oc_chat",
        "chat_type": chat_type,
        "message_type": message_type,
        "content": content if isinstance(content, str) else json.dumps(content),
        "user_agent": "Mozilla/5.0",
        "some_future_field": {"x": 1},
    }
    if mentions is not None:
        message["mentions"] = mentions
    message.update(message_extra)
    return {
        "schema": "2.0",
        "header": {
            "event_id": "ev_1",
            "event_type": "im.message.receive_v1",
            "create_time": "1700000000200",
            "token": "vtoken",
            "app_id": "cli_x",
            "tenant_key": "t1",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": ALICE, "union_id": "on_a", "user_id": "u_a"},
                "sender_type": "user",
                "tenant_key": "t1",
            },
            "message": message,
        },
    }


def parse_message(payload: dict[str, Any], **kwargs: Any) -> InboundMessage:
    event = parse_event(payload, **kwargs)
    assert isinstance(event, InboundMessage)
    return event


# --- text and mentions ---------------------------------------------------------------------


def test_text_message_fields() -> None:
    msg = parse_message(message_event({"text": "hello"}, chat_type="p2p"), bot_open_id=BOT)
    assert msg.event_id == "ev_1"
    assert msg.message_id == "om_1"
    assert msg.chat_id == "oc_chat"
    assert msg.chat_type == "p2p"
    assert msg.sender_open_id == ALICE
    assert msg.sender_type == "user"
    assert msg.message_type == "text"
    assert msg.text == "hello"
    assert msg.mentions_bot is False
    assert msg.create_time_ms == 1700000000123
    assert msg.root_id is None
    assert msg.parent_id is None
    assert msg.thread_id is None
    assert msg.conversation_key == "oc_chat"


def test_bot_mention_is_stripped_and_detected_by_open_id() -> None:
    payload = message_event(
        {"text": "@_user_1 hello there"}, mentions=[mention("@_user_1", BOT, "Helper")]
    )
    msg = parse_message(payload, bot_open_id=BOT)
    assert msg.text == "hello there"
    assert msg.mentions_bot is True
    assert msg.mentions[0].open_id == BOT


def test_the_other_bots_it_was_addressed_to_first_are_no_content() -> None:
    """Two bots of one bridge in a group: "@Claude @Codex history" is "history" to each; a
    bot named later in the text stays, and nothing changes for a message not for this bot."""
    mentions = [mention("@_user_1", BOT, "Claude"), mention("@_user_2", "ou_codex", "Codex")]
    both = message_event({"text": "@_user_2 @_user_1 history"}, mentions=mentions)
    msg = parse_message(both, bot_open_id=BOT, sibling_names=frozenset({"Codex"}))
    assert msg.text == "history"
    later = message_event({"text": "@_user_1 ask @_user_2 again"}, mentions=mentions)
    msg = parse_message(later, bot_open_id=BOT, sibling_names=frozenset({"Codex"}))
    assert msg.text == "ask @Codex again"
    for_codex = message_event({"text": "@_user_2 history"}, mentions=mentions[1:])
    msg = parse_message(for_codex, bot_open_id=BOT, sibling_names=frozenset({"Codex"}))
    assert (msg.mentions_bot, msg.text) == (False, "@Codex history")
    prefix = message_event({"text": "@_user_1 @_user_2x"}, mentions=mentions[:1])
    msg = parse_message(prefix, bot_open_id=BOT, sibling_names=frozenset({"Codex"}))
    assert msg.text == "@_user_2x"  # not a mention of Codex: kept as it came


def test_other_mentions_become_names_and_all_is_resolved() -> None:
    payload = message_event(
        {"text": "@_user_1 ask @_user_2 and @_user_10 about it, @_all"},
        mentions=[
            mention("@_user_1", BOT, "Helper"),
            mention("@_user_2", BOB, "Bob"),
            mention("@_user_10", ALICE, "Alice"),
        ],
    )
    msg = parse_message(payload, bot_open_id=BOT)
    assert msg.text == "ask @Bob and @Alice about it, @all"
    assert msg.mentions_bot is True


def test_mention_of_someone_else_only_does_not_count_as_bot() -> None:
    payload = message_event({"text": "@_user_1 hi"}, mentions=[mention("@_user_1", BOB, "Bob")])
    msg = parse_message(payload, bot_open_id=BOT)
    assert msg.mentions_bot is False
    assert msg.text == "@Bob hi"


def test_unknown_bot_open_id_falls_back_to_bot_name() -> None:
    payload = message_event(
        {"text": "@_user_1 @_user_2 hi"},
        mentions=[
            mention("@_user_1", "ou_other_app_view", "Helper"),
            mention("@_user_2", BOB, "Bob"),
        ],
    )
    msg = parse_message(payload, bot_open_id=None, bot_name="Helper")
    assert msg.mentions_bot is True
    assert msg.text == "@Bob hi"


def test_unknown_bot_identity_means_no_mention_counts() -> None:
    payload = message_event({"text": "@_user_1 hi"}, mentions=[mention("@_user_1", BOT, "Helper")])
    msg = parse_message(payload)
    assert msg.mentions_bot is False
    assert msg.text == "@Helper hi"


def test_thread_message_has_its_own_conversation() -> None:
    payload = message_event({"text": "x"}, root_id="om_root", thread_id="omt_1")
    msg = parse_message(payload)
    assert msg.thread_id == "omt_1"
    assert msg.root_id == "om_root"
    assert msg.conversation_key == "oc_chat:omt_1"


# --- post (rich text) ----------------------------------------------------------------------


POST_BODY = {
    "title": "Release plan",
    "content": [
        [
            {"tag": "at", "user_id": "@_user_1", "user_name": "Helper"},
            {"tag": "text", "text": " please check "},
            {"tag": "a", "href": "https://example.com/pr/1", "text": "the PR"},
        ],
        [{"tag": "img", "image_key": "img_v2_1", "width": 100, "height": 100}],
        [
            {"tag": "text", "text": "cc "},
            {"tag": "at", "user_id": "@_user_2", "user_name": "Bob"},
            {"tag": "text", "text": " and "},
            {"tag": "at", "user_id": "all", "user_name": "所有人"},
        ],
        [{"tag": "unknown_future_tag", "foo": "bar"}],
        [{"tag": "emotion", "emoji_type": "SMILE"}, {"tag": "code_block", "text": "x = 1"}],
    ],
}


def test_post_is_flattened_with_title_links_and_mentions() -> None:
    payload = message_event(
        POST_BODY,
        message_type="post",
        mentions=[mention("@_user_1", BOT, "Helper"), mention("@_user_2", BOB, "Bob")],
    )
    msg = parse_message(payload, bot_open_id=BOT)
    assert msg.message_type == "post"
    assert msg.mentions_bot is True
    assert msg.text == (
        "Release plan\nplease check the PR (https://example.com/pr/1)\ncc @Bob and @all\n"
        "[SMILE]\nx = 1"
    )


@pytest.mark.parametrize("wrapper", ["zh_cn", "en_us", "post"])
def test_post_wrapped_in_a_locale_key(wrapper: str) -> None:
    body = {
        "title": "",
        "content": [[{"tag": "text", "text": "line one"}], [{"tag": "text", "text": "two"}]],
    }
    content: dict[str, Any] = {wrapper: body}
    if wrapper == "post":
        content = {"post": {"zh_cn": body}}
    msg = parse_message(message_event(content, message_type="post"))
    assert msg.text == "line one\ntwo"


def test_post_link_without_text_shows_href() -> None:
    body = {"content": [[{"tag": "a", "href": "https://x.test", "text": ""}]]}
    msg = parse_message(message_event(body, message_type="post"))
    assert msg.text == "https://x.test"


def test_post_with_malformed_paragraphs_is_a_parse_error() -> None:
    with pytest.raises(EventParseError, match="post"):
        parse_event(message_event({"title": "t", "content": "nope"}, message_type="post"))


# --- other message types -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message_type", "content"),
    [
        ("image", {"image_key": "img_v2_1"}),
        ("file", {"file_key": "file_v2_1", "file_name": "a.pdf"}),
        ("audio", {"file_key": "file_v2_1", "duration": 2000}),
        ("media", {"file_key": "file_v2_1", "image_key": "img_1", "file_name": "a.mp4"}),
        ("sticker", {"file_key": "file_v2_1"}),
        ("interactive", {"title": "card", "elements": [[{"tag": "text", "text": "x"}]]}),
        ("share_chat", {"chat_id": "oc_2"}),
        ("share_user", {"user_id": "ou_3"}),
        ("merge_forward", "Merged and Forwarded Message"),
        ("system", {"template": "x"}),
        ("brand_new_type", "{}"),
    ],
)
def test_unsupported_types_parse_with_empty_text(
    message_type: str, content: dict[str, Any] | str
) -> None:
    msg = parse_message(message_event(content, message_type=message_type), bot_open_id=BOT)
    assert msg.message_type == message_type
    assert msg.text == ""


# --- card callback, url_verification, ignored ----------------------------------------------


def card_event(value: Any = None) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": "ev_card",
            "token": "vtoken",
            "create_time": "1700000000000000",
            "event_type": "card.action.trigger",
            "tenant_key": "t1",
            "app_id": "cli_x",
        },
        "event": {
            "operator": {
                "tenant_key": "t1",
                "user_id": "u_a",
                "open_id": ALICE,
                "union_id": "on_a",
            },
            "token": "c-card-token",
            "action": {
                "value": {"kind": "approval", "choice": "allow_once"} if value is None else value,
                "tag": "button",
                "timezone": "Asia/Shanghai",
            },
            "host": "im_message",
            "delivery_type": "url_callback",
            "context": {"open_message_id": "om_card", "open_chat_id": "oc_chat"},
        },
    }


def test_card_action() -> None:
    action = parse_event(card_event())
    assert action == CardAction(
        event_id="ev_card",
        operator_open_id=ALICE,
        open_message_id="om_card",
        open_chat_id="oc_chat",
        value={"kind": "approval", "choice": "allow_once"},
        token="c-card-token",
    )


def test_card_action_with_string_value() -> None:
    action = parse_event(card_event(value='{"choice": "reject"}'))
    assert isinstance(action, CardAction)
    assert action.value == {"choice": "reject"}
    action = parse_event(card_event(value="plain"))
    assert isinstance(action, CardAction)
    assert action.value == {"value": "plain"}


def test_card_action_without_operator_is_a_parse_error() -> None:
    payload = card_event()
    del payload["event"]["operator"]
    with pytest.raises(EventParseError, match="operator"):
        parse_event(payload)


def test_url_verification() -> None:
    event = parse_event({"challenge": "abc", "token": "vtoken", "type": "url_verification"})
    assert event == UrlVerification(challenge="abc", token="vtoken")


def test_unknown_event_type_is_ignored_not_a_crash() -> None:
    payload = message_event({"text": "x"})
    payload["header"]["event_type"] = "im.message.message_read_v1"
    payload["event"] = {"reader": {"reader_id": {"open_id": ALICE}}}
    event = parse_event(payload)
    assert event == IgnoredEvent(
        event_type="im.message.message_read_v1", reason="event type not handled", event_id="ev_1"
    )


def test_schema_1_event_is_ignored() -> None:
    payload = {
        "uuid": "u1",
        "token": "vtoken",
        "ts": "1",
        "type": "event_callback",
        "event": {"type": "message", "text": "x"},
    }
    event = parse_event(payload)
    assert isinstance(event, IgnoredEvent)
    assert event.event_type == "message"


# --- malformed -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"schema": "2.0"},
        {"schema": "2.0", "header": "nope", "event": {}},
        {"schema": "2.0", "header": {"event_id": "e"}, "event": {}},
        {"type": "url_verification"},
    ],
)
def test_malformed_payloads_raise_one_typed_error(payload: dict[str, Any]) -> None:
    with pytest.raises(EventParseError):
        parse_event(payload)


def test_message_without_message_is_a_parse_error() -> None:
    payload = message_event({"text": "x"})
    del payload["event"]["message"]
    with pytest.raises(EventParseError, match="event is malformed"):
        parse_event(payload)


def test_text_content_that_is_not_json_is_a_parse_error() -> None:
    with pytest.raises(EventParseError, match="content"):
        parse_event(message_event("{not json", message_type="text"))


def test_parse_error_reason_never_contains_message_text() -> None:
    payload = message_event({"text": 12345})
    with pytest.raises(EventParseError) as info:
        parse_event(payload)
    assert "12345" not in info.value.reason


def test_decode_json_and_event_token() -> None:
    assert decode_json(b'{"a": 1}') == {"a": 1}
    with pytest.raises(EventParseError):
        decode_json(b"[1]")
    with pytest.raises(EventParseError):
        decode_json(b"\xff\xfe")
    assert event_token(message_event({"text": "x"})) == "vtoken"
    assert event_token({"type": "url_verification", "token": "t2"}) == "t2"
    assert event_token({"schema": "2.0", "header": {}}) is None
