"""Signature, token and decryption (bridge.feishu.crypto) against lark-oapi's own code."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from Crypto.Cipher import AES

# Imported first: it loads lark-oapi without leaving a stray event loop behind.
from bridge.feishu import crypto  # isort: skip
from bridge.feishu import sdk_import  # noqa: F401  # isort: skip
from lark_oapi.core.model import RawRequest  # isort: skip
from lark_oapi.core.utils import AESCipher  # isort: skip
from lark_oapi.event.dispatcher_handler import EventDispatcherHandler  # isort: skip

KEY = "test-encrypt-key"


def feishu_encrypt(plaintext: str, key: str) -> str:
    """Independent of the code under test: Feishu's scheme written out with pycryptodome."""
    iv = b"0123456789abcdef"
    data = plaintext.encode()
    pad = 16 - len(data) % 16
    cipher = AES.new(hashlib.sha256(key.encode()).digest(), AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(data + bytes([pad]) * pad)).decode()


@pytest.mark.parametrize("plaintext", ["", "x", "0123456789abcdef", json.dumps({"k": "飞书"})])
def test_encrypt_payload_round_trips_through_lark_aescipher(plaintext: str) -> None:
    encrypted = crypto.encrypt_payload(plaintext, KEY)
    assert AESCipher(KEY).decrypt_str(encrypted) == plaintext
    assert crypto.decrypt_payload(encrypted, KEY) == plaintext


def test_decrypt_matches_an_independent_encryption() -> None:
    body = json.dumps({"challenge": "c", "type": "url_verification"})
    assert crypto.decrypt_payload(feishu_encrypt(body, KEY), KEY) == body


def test_random_iv_makes_each_encryption_different() -> None:
    assert crypto.encrypt_payload("same", KEY) != crypto.encrypt_payload("same", KEY)


@pytest.mark.parametrize(
    "encrypted",
    [
        "not base64!!",
        base64.b64encode(b"short").decode(),
        base64.b64encode(b"x" * 33).decode(),
        feishu_encrypt("hello", "another-key"),
    ],
)
def test_undecryptable_input_raises_decrypt_error(encrypted: str) -> None:
    with pytest.raises(crypto.DecryptError) as info:
        crypto.decrypt_payload(encrypted, KEY)
    assert KEY not in info.value.reason


def test_signature_is_the_algorithm_lark_verifies() -> None:
    body = b'{"encrypt":"abc"}'
    signature = crypto.compute_signature("1700000000", "nonce-1", KEY, body)
    request = RawRequest()
    request.headers = {
        crypto.TIMESTAMP_HEADER: "1700000000",
        crypto.NONCE_HEADER: "nonce-1",
        crypto.SIGNATURE_HEADER: signature,
    }
    request.body = body
    EventDispatcherHandler()._verify_sign(request, KEY)  # raises on mismatch
    crypto.verify_signature(request.headers, body, KEY)


def test_signature_mismatch_and_missing_headers() -> None:
    body = b"{}"
    good = {
        crypto.TIMESTAMP_HEADER: "1",
        crypto.NONCE_HEADER: "n",
        crypto.SIGNATURE_HEADER: crypto.compute_signature("1", "n", KEY, body),
    }
    with pytest.raises(crypto.SignatureError, match="mismatch"):
        crypto.verify_signature(good, b"{ }", KEY)
    with pytest.raises(crypto.SignatureError, match="mismatch"):
        crypto.verify_signature(good, body, "other-key")
    for missing in good:
        headers = {k: v for k, v in good.items() if k != missing}
        with pytest.raises(crypto.SignatureError, match="missing"):
            crypto.verify_signature(headers, body, KEY)


def test_verify_token() -> None:
    crypto.verify_token("vtoken", "vtoken")
    with pytest.raises(crypto.TokenError, match="mismatch"):
        crypto.verify_token("wrong", "vtoken")
    with pytest.raises(crypto.TokenError, match="missing"):
        crypto.verify_token(None, "vtoken")
    with pytest.raises(crypto.TokenError) as info:
        crypto.verify_token("wrong", "vtoken")
    assert "vtoken" not in str(info.value)
    assert "wrong" not in str(info.value)
