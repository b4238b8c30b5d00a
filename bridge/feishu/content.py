"""What a message says, as plain text: text and post content flattened, the bot's own
@-mention removed, every other mention resolved to "@Name". Pure; a malformed content
raises `EventParseError`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from bridge.feishu.errors import EventParseError
from bridge.feishu.json_codec import decode_json
from bridge.feishu.models import AttachmentRef, Mention

ALL_PLACEHOLDER: Final = "@_all"
ALL_TEXT: Final = "@all"


def message_text(
    message_type: str, content: str, mentions: tuple[Mention, ...], bot_keys: set[str]
) -> str:
    """The text of a text or post message; "" for every other type (image, file, audio,
    media, sticker, interactive, share_chat, system, …), which the receiver answers from
    `message_type`."""
    if message_type == "text":
        raw_text = _content_object(content).get("text", "")
        if not isinstance(raw_text, str):
            raise EventParseError("text content has no string `text`")
        return _resolve_mentions(raw_text, mentions, bot_keys)
    if message_type == "post":
        return _flatten_post(_content_object(content), mentions, bot_keys)
    return ""


# Message types that are one attachment, and the resource `type` Feishu serves them as.
_ONE_ATTACHMENT: Final = {"image": "image", "file": "file", "audio": "file", "media": "file"}


def message_attachments(message_type: str, content: str) -> tuple[AttachmentRef, ...]:
    """The images and files a message carries: an image, file, audio or media message is
    one; a post carries its images and media. Content that does not say is no attachment."""
    if message_type not in _ONE_ATTACHMENT and message_type != "post":
        return ()
    try:
        value = _content_object(content)
    except EventParseError:
        return ()
    if message_type == "post":
        found: list[AttachmentRef] = []
        for paragraph in _post_body(value).get("content") or []:
            for element in paragraph if isinstance(paragraph, list) else []:
                ref = _post_attachment(element)
                if ref is not None:
                    found.append(ref)
        return tuple(found)
    key_field = "image_key" if message_type == "image" else "file_key"
    key = value.get(key_field)
    if not isinstance(key, str) or not key:
        return ()
    name = value.get("file_name")
    return (
        AttachmentRef(
            kind=message_type,
            key=key,
            resource_type=_ONE_ATTACHMENT[message_type],
            name=name if isinstance(name, str) else "",
        ),
    )


def _post_attachment(element: Any) -> AttachmentRef | None:
    if not isinstance(element, Mapping):
        return None
    if element.get("tag") == "img" and isinstance(element.get("image_key"), str):
        return AttachmentRef(kind="image", key=element["image_key"], resource_type="image")
    if element.get("tag") == "media" and isinstance(element.get("file_key"), str):
        return AttachmentRef(kind="media", key=element["file_key"], resource_type="file")
    return None


def is_bot(mention: Mention, bot_open_id: str | None, bot_name: str | None) -> bool:
    if bot_open_id:
        return mention.open_id == bot_open_id
    if bot_name:
        return mention.name == bot_name
    return False


def _content_object(content: str) -> dict[str, Any]:
    # The same decoder as the body's: depth-checked, lone surrogates repaired.
    return decode_json(content, "message content") if content else {}


def _resolve_mentions(text: str, mentions: Iterable[Mention], bot_keys: set[str]) -> str:
    # Longest keys first so "@_user_1" never eats the front of "@_user_10".
    for mention in sorted(mentions, key=lambda m: len(m.key), reverse=True):
        if not mention.key:
            continue
        if mention.key in bot_keys:
            text = text.replace(f"{mention.key} ", "").replace(mention.key, "")
        elif mention.key == ALL_PLACEHOLDER:
            text = text.replace(mention.key, ALL_TEXT)
        else:
            text = text.replace(mention.key, f"@{mention.name}" if mention.name else "@")
    return text.replace(ALL_PLACEHOLDER, ALL_TEXT).strip()


_LOCALE_PREFERENCE: Final = ("zh_cn", "en_us", "ja_jp")


def _post_body(content: Mapping[str, Any]) -> Mapping[str, Any]:
    """Received posts are usually `{"title", "content"}`; some paths wrap them in a locale
    key (`zh_cn`, `en_us`, …) or in `post`. Pick the first body that has content."""
    if "content" in content or "title" in content:
        return content
    inner = content.get("post")
    if isinstance(inner, Mapping):
        return _post_body(inner)
    for locale in _LOCALE_PREFERENCE:
        body = content.get(locale)
        if isinstance(body, Mapping):
            return body
    for body in content.values():
        if isinstance(body, Mapping) and ("content" in body or "title" in body):
            return body
    return {}


def _flatten_post(
    content: Mapping[str, Any], mentions: tuple[Mention, ...], bot_keys: set[str]
) -> str:
    body = _post_body(content)
    lines: list[str] = []
    title = body.get("title")
    if isinstance(title, str) and title.strip():
        lines.append(title.strip())
    paragraphs = body.get("content") or []
    if not isinstance(paragraphs, list):
        raise EventParseError("post content is not a list of paragraphs")
    by_key = {m.key: m for m in mentions}
    by_open_id = {m.open_id: m for m in mentions if m.open_id}
    for paragraph in paragraphs:
        if not isinstance(paragraph, list):
            raise EventParseError("post paragraph is not a list")
        parts = [_post_element(el, by_key, by_open_id, bot_keys) for el in paragraph]
        line = "".join(parts).strip()
        if line:
            lines.append(line)
    return "\n".join(lines)


def _post_element(
    element: Any,
    by_key: Mapping[str, Mention],
    by_open_id: Mapping[str, Mention],
    bot_keys: set[str],
) -> str:
    if not isinstance(element, Mapping):
        return ""
    tag = element.get("tag")
    text = element.get("text")
    text = text if isinstance(text, str) else ""
    if tag in ("text", "md", "code_block"):
        if tag == "code_block":
            return f"\n{text}\n"
        return text
    if tag == "a":
        href = element.get("href")
        if isinstance(href, str) and href and href != text:
            return f"{text} ({href})" if text else href
        return text
    if tag == "at":
        user_id = element.get("user_id")
        user_id = user_id if isinstance(user_id, str) else ""
        if user_id in ("all", ALL_PLACEHOLDER):
            return ALL_TEXT
        mention = by_key.get(user_id) or by_open_id.get(user_id)
        if mention is not None and mention.key in bot_keys:
            return ""
        name = element.get("user_name")
        if not isinstance(name, str) or not name:
            name = mention.name if mention is not None else ""
        return f"@{name}" if name else ""
    if tag == "emotion":
        emoji = element.get("emoji_type")
        return f"[{emoji}]" if isinstance(emoji, str) and emoji else ""
    # img, media, hr and future tags carry no text.
    return ""
