"""`FileTransfer`: the bytes `FeishuClient` moves that are not JSON. The images and files
users send, downloaded through the message-resource API
(`GET /im/v1/messages/{message_id}/resources/{key}?type=…`) and streamed to disk under a
size limit; the files the bridge sends, uploaded as multipart forms for a key to post.

A resource arrives as raw bytes, not JSON; a refusal as the usual JSON error body. The
limit is checked against `Content-Length` first and against what arrives, so a server that
lies about the length still never fills the disk. Neither way goes through the client's
JSON calls (retries, the call budget): it holds only the connection pool and the token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol
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


class FileTransfer:
    """Downloads and uploads over `http` (the client's pool, its base URL Feishu's), each
    with a tenant token from `tokens`."""

    def __init__(self, http: httpx.AsyncClient, tokens: _Tokens) -> None:
        self._http = http
        self._tokens = tokens

    async def download(
        self, message_id: str, key: str, resource_type: str, dest: Path, *, max_bytes: int
    ) -> Downloaded:
        path = f"{MESSAGES}/{quote(message_id, safe='')}/resources/{quote(key, safe='')}"
        headers = {"Authorization": f"Bearer {await self._tokens.get()}"}
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

    async def upload(self, path: Path) -> tuple[str, dict[str, str]]:
        """Upload `path` (an image as an image, anything else as a file); the message type
        and content that post it. The caller checked the size against the limits."""
        token = await self._tokens.get()
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
        return ("image", {"image_key": key}) if is_image else ("file", {"file_key": key})


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
