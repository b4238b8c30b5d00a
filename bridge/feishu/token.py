"""The tenant access token, fetched asynchronously over the client's pooled connection.

lark-oapi's async path fetches the token with blocking `requests`; this manager keeps the
event loop free, shares one fetch among concurrent callers and refreshes early.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from bridge.feishu.errors import ServerError, TransportError, check_response

log = logging.getLogger(__name__)

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
# Feishu hands out a new token once the current one has under 30 minutes left, so any
# margin below that gets a fresh token rather than the same one again.
DEFAULT_REFRESH_MARGIN = 300.0


@dataclass(frozen=True)
class _Cached:
    value: str
    expires_at: float  # clock time after which Feishu rejects it
    refresh_at: float  # clock time after which we fetch a new one


class TenantTokenManager:
    """Cache of the app's tenant_access_token; `get()` is safe to call concurrently."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        domain: str,
        app_id: str,
        app_secret: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        refresh_margin: float = DEFAULT_REFRESH_MARGIN,
    ) -> None:
        self._http = http
        self._url = domain.rstrip("/") + TOKEN_PATH
        self._app_id = app_id
        self._app_secret = app_secret
        self._clock = clock
        self._refresh_margin = refresh_margin
        self._cached: _Cached | None = None
        self._lock = asyncio.Lock()
        self.fetch_count = 0  # observable for tests and metrics

    def __repr__(self) -> str:  # never show the secret or the token
        return f"TenantTokenManager(app_id={self._app_id!r})"

    async def get(self) -> str:
        cached = self._cached
        if cached is not None and self._clock() < cached.refresh_at:
            return cached.value
        # Single flight: the first caller fetches, the others wait on the lock and then
        # find the fresh token in the cache.
        async with self._lock:
            cached = self._cached
            now = self._clock()
            if cached is not None and now < cached.refresh_at:
                return cached.value
            try:
                self._cached = await self._fetch()
            except (ServerError, TransportError) as exc:
                # Inside the refresh margin the old token still works: keep using it.
                if cached is not None and now < cached.expires_at:
                    log.warning("tenant token refresh failed, keeping current token: %s", exc)
                    return cached.value
                raise
            return self._cached.value

    async def invalidate(self, token: str) -> None:
        """Forget `token` after Feishu rejected it. Only that token: when many calls fail
        with the same stale token at once, the first one to get here wins and the rest
        reuse the token it fetched."""
        async with self._lock:
            if self._cached is not None and self._cached.value == token:
                self._cached = None

    async def _fetch(self) -> _Cached:
        body = json.dumps({"app_id": self._app_id, "app_secret": self._app_secret})
        try:
            response = await self._http.post(
                self._url,
                content=body.encode(),
                headers={"Content-Type": "application/json; charset=utf-8"},
            )
        except httpx.RequestError as exc:
            raise TransportError.from_httpx(exc) from None
        data = check_response(response)
        self.fetch_count += 1
        value = data.get("tenant_access_token")
        expire = data.get("expire")
        if not isinstance(value, str) or not value or not isinstance(expire, int | float):
            raise ServerError(0, "token response without tenant_access_token/expire")
        now = self._clock()
        # Short-lived tokens (the emulator's) still get refreshed before they lapse.
        margin = min(self._refresh_margin, float(expire) / 2)
        log.debug("fetched tenant token, valid for %ss", expire)
        return _Cached(value=value, expires_at=now + expire, refresh_at=now + expire - margin)
