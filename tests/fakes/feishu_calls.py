"""A Feishu Open API request as a fake Feishu reads it: which call it is, named as the
`FeishuApi` port names it (`reply_text`, `update_card_entity`…), what it is about, its text,
card and uuid. Shared by the unit tests' Feishu (tests/fakes/feishu.py) and the simulator's
(tests/sim/transport.py), so both name a call the same way."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from bridge.feishu.requests import BOT_INFO, CARDS, MESSAGES
from bridge.feishu.resources import FILES, IMAGES

MESSAGE = re.compile(re.escape(MESSAGES) + r"/(?P<id>[^/]+)(?P<rest>/.*)?")
CARD = re.compile(re.escape(CARDS) + r"/(?P<id>[^/]+)(?P<rest>/.*)?")
ELEMENT = re.compile(r"/elements/(?P<element>[^/]+)(?P<content>/content)?")


class Read(NamedTuple):
    op: str
    target: str  # the message replied to, the chat, the card or message changed
    text: str  # a text's, an emoji, a reaction id, a resource key, an element's content
    card: dict[str, Any] | None
    uuid: str  # a send's, or a card change's (Feishu dedups both)


def read_call(method: str, path: str, params: Mapping[str, str], body: dict[str, Any]) -> Read:
    """What a call asks; a call this does not know is named by its method and path."""
    uuid = str(body.get("uuid", ""))
    if path == MESSAGES and method == "POST":
        if params.get("receive_id_type") == "open_id":
            return Read("send_text_to_user", body["receive_id"], _text(body), None, uuid)
        return _post("send", body["receive_id"], body, uuid)
    if path == CARDS and method == "POST":
        return Read("create_card", "", "", _loads(body["data"]), "")
    if path == IMAGES and method == "POST":
        return Read("upload_image", "", "", None, "")
    if path == FILES and method == "POST":
        return Read("upload_file", "", "", None, "")
    if path == BOT_INFO and method == "GET":
        return Read("bot_info", "", "", None, "")
    card = CARD.fullmatch(path)
    if card is not None:
        return _card_op(method, card["id"], card["rest"] or "", body)
    message = MESSAGE.fullmatch(path)
    if message is None:
        return Read(f"{method} {path}", "", "", None, "")
    target, rest = message["id"], message["rest"] or ""
    if rest == "/reply":
        return _post("reply", target, body, uuid)
    if rest == "/reactions":
        return Read("add_reaction", target, body["reaction_type"]["emoji_type"], None, "")
    if rest.startswith("/reactions/"):
        return Read("remove_reaction", target, rest.removeprefix("/reactions/"), None, "")
    if rest.startswith("/resources/") and method == "GET":
        return Read("download_resource", target, rest.removeprefix("/resources/"), None, "")
    if rest == "/urgent_app":
        return Read("urgent_app", target, ",".join(body.get("user_id_list", [])), None, "")
    if rest == "" and method == "PATCH":
        return Read("update_card", target, "", _loads(body["content"]), "")
    if rest == "" and method == "PUT":
        return Read("edit_text", target, _text(body), None, "")
    if rest == "" and method == "GET":
        return Read("get_message", target, "", None, "")
    return Read(f"{method} {path}", target, "", None, "")


def _post(how: str, target: str, body: dict[str, Any], uuid: str) -> Read:
    """A new message: `how` is "reply" or "send"."""
    msg_type = body.get("msg_type")
    if msg_type == "text":
        return Read(f"{how}_text", target, _text(body), None, uuid)
    if msg_type != "interactive":  # an uploaded image or file, by its key
        key = next(iter(_loads(body["content"]).values()), "")
        return Read(f"{how}_{msg_type}", target, str(key), None, uuid)
    content = _loads(body["content"])
    if content.get("type") == "card":
        return Read(f"{how}_card_entity", target, content["data"]["card_id"], None, uuid)
    return Read(f"{how}_card", target, "", content, uuid)


def _card_op(method: str, card_id: str, rest: str, body: dict[str, Any]) -> Read:
    if rest == "" and method == "PUT":
        return Read("update_card_entity", card_id, "", _loads(body["card"]["data"]), "")
    if rest == "/settings":
        return Read("card_settings", card_id, "", _loads(body["settings"]), "")
    if rest == "/batch_update":
        actions = _loads(body["actions"])
        partials = [a.get("params", {}).get("partial_element", {}) for a in actions]
        contents = [str(p.get("content", "")) for p in partials]
        return Read("batch_update_card", card_id, "\n".join(contents), None, "")
    element = ELEMENT.fullmatch(rest)
    if element is not None and element["content"]:
        return Read("stream_card_text", card_id, str(body.get("content", "")), None, "")
    if element is not None and method == "PUT":
        content = _loads(body["element"]).get("content", "")
        return Read("update_card_element", card_id, str(content), None, "")
    if element is not None and method == "PATCH":
        content = _loads(body["partial_element"]).get("content", "")
        return Read("patch_card_element", card_id, str(content), None, "")
    return Read(f"{method} {rest}", card_id, "", None, "")


def card_of(path: str) -> str | None:
    """The card entity a change is made to."""
    match = CARD.fullmatch(path)
    return match["id"] if match is not None else None


def _loads(raw: str) -> Any:
    """JSON text inside a body: orjson's read, or json's for what orjson refuses (a lone
    surrogate escape, which a test may send on purpose)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _text(body: dict[str, Any]) -> str:
    return str(_loads(body.get("content") or "{}").get("text", ""))
