"""Event security: signature, verification token, decryption.

Decryption is Feishu's scheme as lark-oapi's `AESCipher` implements it (AES-256-CBC, key =
sha256(encrypt key), the IV as the first block, PKCS#7), checked against the SDK's own class
in tests/unit/test_feishu_crypto.py. It is written here on pycryptodome (the SDK's own AES)
rather than imported from the SDK: importing any part of lark-oapi loads the whole package
(every API module, about 4 s and 150 MB), and the webhook path needs none of it.

The signature is Feishu's algorithm as lark-oapi implements it in
`EventDispatcherHandler._verify_sign`: ``sha256(timestamp + nonce + encrypt_key + body)``
in hex, compared with the `X-Lark-Signature` header. It is reimplemented here (three lines)
rather than called, because that method is private, wants the SDK's `RawRequest` with
exact-case header keys, raises the SDK's generic `AccessDeniedException` for every failure
(missing header and wrong value alike), and compares with `!=`; here each failure has its own
reason for the log, and the comparison is constant-time. The header names are the SDK's
(`lark_oapi.core.const`).

`encrypt_payload` is the inverse of decryption, for tests and the local Feishu emulator.

Nothing here logs, and no exception message contains a key, a token or a body.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Final

from Crypto.Cipher import AES

TIMESTAMP_HEADER: Final[str] = "X-Lark-Request-Timestamp"
NONCE_HEADER: Final[str] = "X-Lark-Request-Nonce"
SIGNATURE_HEADER: Final[str] = "X-Lark-Signature"


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


def _aes_key(encrypt_key: str) -> bytes:
    return hashlib.sha256(encrypt_key.encode("utf-8")).digest()


def decrypt_payload(encrypted: str, encrypt_key: str) -> str:
    """Decrypt the `encrypt` field of an event body (what lark-oapi's `AESCipher` does)."""
    try:
        data = base64.b64decode(encrypted)
    except (binascii.Error, ValueError) as exc:
        raise DecryptError("cannot decrypt the event body") from exc
    if len(data) < 2 * AES.block_size or len(data) % AES.block_size:
        raise DecryptError("cannot decrypt the event body")
    plain = AES.new(_aes_key(encrypt_key), AES.MODE_CBC, data[: AES.block_size]).decrypt(
        data[AES.block_size :]
    )
    pad = plain[-1]
    if not 1 <= pad <= AES.block_size or plain[-pad:] != bytes([pad]) * pad:
        raise DecryptError("cannot decrypt the event body")  # wrong key, most likely
    try:
        return plain[:-pad].decode("utf-8")
    except UnicodeDecodeError as exc:  # wrong key, or not text: name the case
        raise DecryptError("decrypted event body is not UTF-8") from exc


def encrypt_payload(plaintext: str, encrypt_key: str, *, iv: bytes | None = None) -> str:
    """Encrypt like Feishu does: base64(iv + AES-256-CBC(sha256(key), iv, pkcs7(plaintext)))."""
    iv = os.urandom(AES.block_size) if iv is None else iv
    if len(iv) != AES.block_size:
        raise ValueError("iv must be one AES block (16 bytes)")
    data = plaintext.encode("utf-8")
    pad = AES.block_size - len(data) % AES.block_size
    cipher = AES.new(_aes_key(encrypt_key), AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(data + bytes([pad]) * pad)).decode("ascii")
