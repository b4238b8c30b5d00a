"""Suite-wide guards: no network beyond loopback, a scrubbed environment per test."""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

import pytest

# lark-oapi, whose import would otherwise leave a stray event loop in the main thread, is
# loaded the bridge's way before any test module imports it directly.
from bridge.feishu import sdk_import  # noqa: F401

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_loopback(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if not _is_loopback(address):
        raise RuntimeError(f"tests must not reach the network (tried {address!r})")
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    if not _is_loopback(address):
        raise RuntimeError(f"tests must not reach the network (tried {address!r})")
    return _real_connect_ex(self, address)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """No FEISHU_*/BRIDGE_* from the developer's shell leaks into a test; no .env either."""
    for name in list(os.environ):
        if name.startswith(("FEISHU_", "BRIDGE_", "SCRIPTED_AGENT_")):
            monkeypatch.delenv(name, raising=False)
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.chdir(tmp_path)
