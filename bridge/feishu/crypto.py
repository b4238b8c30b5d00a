"""Event security: signature, verification token, decryption.

Decryption is lark-oapi's own `AESCipher` (AES-256-CBC, key = sha256(encrypt key), the IV as
the first block, PKCS#7), so the bridge decrypts exactly what the SDK decrypts.

The signature is Feishu's algorithm as lark-oapi implements it in
`EventDispatcherHandler._verify_sign`: ``sha256(timestamp + nonce + encrypt_key + body)``
in hex, compared with the `X-Lark-Signature` header. It is reimplemented here (three lines)
rather than called, because that method is private, wants the SDK's `RawRequest` with
exact-case header keys, raises the SDK's generic `AccessDeniedException` for every failure
(missing header and wrong value alike), and compares with `!=`; here each failure has its own
reason for the log, and the comparison is constant-time. The header names are the SDK's.

`encrypt_payload` is the inverse of decryption, for tests and the local Feishu emulator.

Nothing here logs, and no exception message contains a key, a token or a body.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import sys
import threading
from collections.abc import Mapping
from typing import Final

from Crypto.Cipher import AES


def _import_lark_off_loop() -> None:
    """Import lark-oapi without it touching this thread's event loop.

    `import lark_oapi` always runs `lark_oapi.ws.client`, whose module code calls
    `asyncio.get_event_loop()`: inside a running loop it keeps that loop, in the main thread
    without one it creates a loop, makes it the thread's current loop and never closes it.
    Importing on a short-lived helper thread gives it a loop of its own, closed here right
    away; `LongConnection` installs its own loop into that module before the SDK uses it.
    """
    if "lark_oapi" in sys.modules:
        return

    def target() -> None:
        import lark_oapi.ws.client as ws_client

        if not ws_client.loop.is_running():
            ws_client.loop.close()

    helper = threading.Thread(target=target, name="lark-oapi-import", daemon=True)
    helper.start()
    helper.join()  # an import error resurfaces in the plain imports below


_import_lark_off_loop()

from lark_oapi.core.const import (  # noqa: E402  (after the guarded import above)
    LARK_REQUEST_NONCE,
    LARK_REQUEST_SIGNATURE,
    LARK_REQUEST_TIMESTAMP,
)
from lark_oapi.core.utils import AESCipher  # noqa: E402

TIMESTAMP_HEADER: Final[str] = LARK_REQUEST_TIMESTAMP
NONCE_HEADER: Final[str] = LARK_REQUEST_NONCE
SIGNATURE_HEADER: Final[str] = LARK_REQUEST_SIGNATURE


class EventSecurityError(Exception):
    """Base of the failures below; `reason` is safe to log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SignatureError(EventSecurityError):
    """The request is not signed with the configured encrypt key (answer 401)."""


class TokenError(EventSecurityError):
    """The payload's verification token is missing or wrong (answer 403)."""


class DecryptError(EventSecurityError):
    """The `encrypt` field cannot be decrypted with the configured key (answer 400)."""


def compute_signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """Feishu's request signature (hex sha256), as lark-oapi computes it."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def has_signature(headers: Mapping[str, str]) -> bool:
    return bool(headers.get(SIGNATURE_HEADER))


def verify_signature(headers: Mapping[str, str], body: bytes, encrypt_key: str) -> None:
    """Raise `SignatureError` unless the three `X-Lark-*` headers sign `body` with the key.

    `headers` should be case-insensitive (aiohttp's `CIMultiDictProxy` is)."""
    timestamp = headers.get(TIMESTAMP_HEADER)
    nonce = headers.get(NONCE_HEADER)
    signature = headers.get(SIGNATURE_HEADER)
    if not timestamp or not nonce or not signature:
        raise SignatureError("signature headers missing")
    expected = compute_signature(timestamp, nonce, encrypt_key, body)
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("utf-8")):
        raise SignatureError("signature mismatch")


def verify_token(received: str | None, expected: str) -> None:
    """Raise `TokenError` unless `received` equals the configured verification token."""
    if not received:
        raise TokenError("verification token missing")
    if not hmac.compare_digest(received.encode("utf-8"), expected.encode("utf-8")):
        raise TokenError("verification token mismatch")


def decrypt_payload(encrypted: str, encrypt_key: str) -> str:
    """Decrypt the `encrypt` field of an event body with lark-oapi's `AESCipher`."""
    try:
        return str(AESCipher(encrypt_key).decrypt_str(encrypted))
    except UnicodeDecodeError as exc:  # wrong key, or not text: name the case
        raise DecryptError("decrypted event body is not UTF-8") from exc
    except (ValueError, TypeError) as exc:  # bad base64 (binascii.Error), length, padding
        raise DecryptError("cannot decrypt the event body") from exc


def encrypt_payload(plaintext: str, encrypt_key: str, *, iv: bytes | None = None) -> str:
    """Encrypt like Feishu does: base64(iv + AES-256-CBC(sha256(key), iv, pkcs7(plaintext)))."""
    iv = os.urandom(AES.block_size) if iv is None else iv
    if len(iv) != AES.block_size:
        raise ValueError("iv must be one AES block (16 bytes)")
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    data = plaintext.encode("utf-8")
    pad = AES.block_size - len(data) % AES.block_size
    cipher = AES.new(key, AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(data + bytes([pad]) * pad)).decode("ascii")
