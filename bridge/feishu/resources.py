"""Message resources of `FeishuClient`: the images and files users send, downloaded through
the message-resource API (`GET /im/v1/messages/{message_id}/resources/{key}?type=…`) and
streamed to disk under a size limit.

A resource arrives as raw bytes, not JSON; a refusal as the usual JSON error body. The
limit is checked against `Content-Length` first and against what arrives, so a server that
lies about the length still never fills the disk.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import quote

import httpx

from bridge.feishu.errors import BusinessError, ServerError, TransportError
from bridge.utf8 import utf8_safe

MESSAGES: Final = "/open-apis/im/v1/messages"
IMAGES: Final = "/open-apis/im/v1/images"
FILES: Final = "/open-apis/im/v1/files"


class TooLarge(Exception):
    """The resource is over the limit; nothing of it is kept."""


@dataclass(frozen=True)
class Downloaded:
    size: int
    mime: str  # as Feishu labels it ("" when it does not)


class _Tokens(Protocol):
    async def get(self) -> str: ...


class _Client(Protocol):
    _http: httpx.AsyncClient
    tokens: _Tokens

    def _post_message(
        self, op: str, path: str, body: dict[str, Any], *, chat: bool = False
    ) -> Awaitable[str]: ...

    def _request(self, op: str, method: str, path: str) -> Awaitable[dict[str, Any]]: ...


IMAGE_LIMIT: Final = 10 * 1024 * 1024  # Feishu's limits for an uploaded image and file
FILE_LIMIT: Final = 30 * 1024 * 1024
IMAGE_TYPES: Final = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tiff", ".ico"})
# Feishu's file_type for an upload, by suffix; anything else is `stream`.
_FILE_TYPES: Final = {
    ".mp4": "mp4",
    ".pdf": "pdf",
    ".doc": "doc",
    ".docx": "doc",
    ".xls": "xls",
    ".xlsx": "xls",
    ".ppt": "ppt",
    ".pptx": "ppt",
    ".opus": "opus",
}


class ResourceCalls:
    """Mixed into FeishuClient."""

    async def download_resource(
        self: _Client,
        message_id: str,
        key: str,
        resource_type: str,
        dest: Path,
        *,
        max_bytes: int,
    ) -> Downloaded:
        path = f"{MESSAGES}/{quote(message_id, safe='')}/resources/{quote(key, safe='')}"
        headers = {"Authorization": f"Bearer {await self.tokens.get()}"}
        partial = dest.with_name(dest.name + ".part")
        try:
            async with self._http.stream(
                "GET", path, params={"type": resource_type}, headers=headers
            ) as response:
                if response.status_code != 200:
                    raise _refusal(response.status_code, await response.aread())
                length = int(response.headers.get("content-length") or 0)
                if length > max_bytes:
                    raise TooLarge(f"{length} bytes")
                size = 0
                with partial.open("wb") as out:
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > max_bytes:
                            raise TooLarge(f"over {max_bytes} bytes")
                        out.write(chunk)
                mime = response.headers.get("content-type", "").split(";")[0].strip()
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise TransportError(0, type(exc).__name__) from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(dest)
        return Downloaded(size, mime)

    async def message_content(self: _Client, message_id: str) -> tuple[str, str] | None:
        """(msg_type, content) of a message in a chat the bot is in; None when Feishu will
        not say (recalled, not visible to the bot)."""
        data = await self._request("get_message", "GET", f"{MESSAGES}/{quote(message_id, safe='')}")
        items = (data.get("data") or {}).get("items") or []
        if not items or not isinstance(items[0], dict):
            return None
        item = items[0]
        content = (item.get("body") or {}).get("content")
        msg_type = item.get("msg_type")
        if not isinstance(content, str) or not isinstance(msg_type, str):
            return None
        return msg_type, content

    async def upload_and_reply(
        self: _Client, reply_to: str, path: Path, *, uuid: str, in_thread: bool = False
    ) -> str:
        """Upload `path` (an image as an image, anything else as a file) and post it as a
        reply; its message id. The caller checked the size against the limits."""
        token = await self.tokens.get()
        headers = {"Authorization": f"Bearer {token}"}
        is_image = path.suffix.lower() in IMAGE_TYPES
        # A name of non-UTF-8 bytes comes back from the filesystem with surrogates, which
        # the multipart encoder cannot write.
        name = utf8_safe(path.name)
        with path.open("rb") as handle:
            if is_image:
                upload = await self._http.post(
                    f"{IMAGES}",
                    headers=headers,
                    data={"image_type": "message"},
                    files={"image": (name, handle)},
                )
            else:
                file_type = _FILE_TYPES.get(path.suffix.lower(), "stream")
                upload = await self._http.post(
                    f"{FILES}",
                    headers=headers,
                    data={"file_type": file_type, "file_name": name},
                    files={"file": (name, handle)},
                )
        key = _uploaded_key(upload, "image_key" if is_image else "file_key")
        msg_type, content = (
            ("image", {"image_key": key}) if is_image else ("file", {"file_key": key})
        )
        body = {
            "msg_type": msg_type,
            "content": json.dumps(content),
            "reply_in_thread": in_thread,
            "uuid": uuid[-50:],
        }
        reply = f"{MESSAGES}/{quote(reply_to, safe='')}/reply"
        return await self._post_message(f"reply_{msg_type}", reply, body)


def _uploaded_key(response: httpx.Response, field: str) -> str:
    if response.status_code != 200:
        raise _refusal(response.status_code, response.content)
    answer = response.json()
    code = answer.get("code", 0) if isinstance(answer, dict) else -1
    key = (answer.get("data") or {}).get(field) if isinstance(answer, dict) else None
    if code != 0 or not isinstance(key, str):
        raise BusinessError(int(code), str(answer.get("msg", "upload refused")))
    return key


def _refusal(status: int, body: bytes) -> Exception:
    try:
        answer = json.loads(body)
    except ValueError:
        answer = {}
    code = answer.get("code", status) if isinstance(answer, dict) else status
    msg = str(answer.get("msg", "")) if isinstance(answer, dict) else ""
    if status >= 500:
        return ServerError(int(code), msg or "resource download failed", http_status=status)
    return BusinessError(int(code), msg or "resource refused", http_status=status)
