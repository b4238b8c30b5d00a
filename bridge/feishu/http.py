"""The HTTP client under `FeishuClient`: httpx, with two costs of its defaults removed
(each measured in bench/feishu_client_bench.py or bench/relay_bench.py --profile)."""

from __future__ import annotations

from typing import Any

import httpx

from bridge.feishu.aio_transport import AiohttpTransport

# Connections kept open to Feishu, and the most calls in flight at once. Feishu answers in
# tens of milliseconds, so 16 carry several hundred calls a second; more calls wait for one.
MAX_CONNECTIONS = 16


class _NoCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class FeishuHttp(httpx.AsyncClient):
    """- No cookies: Feishu's Open API sets none the bridge needs, yet httpx parses every
      response's cookies through urllib's cookie machinery (about 6% of the bridge's CPU per
      message in a profile).
    - The bytes go over aiohttp's client (`AiohttpTransport`), not httpcore's pure-Python
      HTTP/1.1."""

    def __init__(self, *, max_connections: int = MAX_CONNECTIONS, **kwargs: Any) -> None:
        # For the pools httpx makes itself (a proxy's): keep-alive = connections, since
        # httpcore closes idle connections while a pool holds more than its keep-alive count
        # (it counts all, not the idle), so fewer would churn.
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        if "transport" not in kwargs:
            tls = httpx.create_ssl_context(verify=kwargs.get("verify", True))
            kwargs["transport"] = AiohttpTransport(max_connections, tls)
        super().__init__(limits=limits, **kwargs)
        self._cookies = _NoCookies()  # one jar that never fills, not one per request

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None
