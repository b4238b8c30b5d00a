"""Encrypting and signing webhook pushes exactly as Feishu does.

- body: `{"encrypt": base64(iv + AES-256-CBC(PKCS7(plaintext)))}` with key = sha256(encrypt_key)
  and a random 16-byte IV (what `lark_oapi.core.utils.AESCipher` decrypts);
- `X-Lark-Signature` = sha256_hex(timestamp + nonce + encrypt_key + body bytes), as
  `lark_oapi.event.dispatcher_handler._verify_sign` recomputes it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from typing import Any

from Crypto.Cipher import AES
from Crypto.Util.Padding import pad, unpad

from bridge.devtools.emulator.records import Envelope

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"

_BLOCK = 16


def _key(encrypt_key: str) -> bytes:
    return hashlib.sha256(encrypt_key.encode("utf-8")).digest()


def encrypt(encrypt_key: str, plaintext: bytes) -> str:
    iv = os.urandom(_BLOCK)
    cipher = AES.new(_key(encrypt_key), AES.MODE_CBC, iv)
    sealed: bytes = cipher.encrypt(pad(plaintext, _BLOCK))
    return base64.b64encode(iv + sealed).decode("ascii")


def decrypt(encrypt_key: str, token: str) -> bytes:
    """The inverse of `encrypt`; the emulator's own tests use it."""
    raw = base64.b64decode(token)
    cipher = AES.new(_key(encrypt_key), AES.MODE_CBC, raw[:_BLOCK])
    plain: bytes = unpad(cipher.decrypt(raw[_BLOCK:]), _BLOCK)
    return plain


def sign(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def seal(payload: Mapping[str, Any], encrypt_key: str, *, timestamp: str) -> Envelope:
    """The request Feishu would send for `payload`: encrypted and signed when a key is set,
    plain JSON otherwise (Feishu signs only when an encrypt key is configured)."""
    plaintext = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    headers = {"Content-Type": "application/json; charset=utf-8"}
    if not encrypt_key:
        return Envelope(plaintext, headers)
    body = json.dumps({"encrypt": encrypt(encrypt_key, plaintext)}).encode("utf-8")
    nonce = secrets.token_hex(8)
    headers[TIMESTAMP_HEADER] = timestamp
    headers[NONCE_HEADER] = nonce
    headers[SIGNATURE_HEADER] = sign(timestamp, nonce, encrypt_key, body)
    return Envelope(body, headers)
