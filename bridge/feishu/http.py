"""The HTTP client under `FeishuClient`."""

from __future__ import annotations

from typing import Any

import httpx


class _NoCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class CookielessClient(httpx.AsyncClient):
    """Feishu's Open API sets no cookie the bridge needs, yet httpx parses every response's
    cookies through urllib's cookie machinery: about 6% of the bridge's CPU per message in a
    profile (bench/relay_bench.py --profile). This client keeps none."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cookies = _NoCookies()  # one jar that never fills, not one per request

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None
