"""tenant_access_token issuing and checking, with Feishu's reuse rule; one issuer per app,
so a token names the app that holds it.

Feishu hands back the current token while more than 30 minutes of it remain, and a fresh one
(the old one still valid until it expires) once less remains. With a short configured TTL the
threshold is half the TTL, so short-lived tokens are still reused for a while.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from bridge.devtools.emulator import codes

_REUSE_WHILE_REMAINING_S = 30 * 60


class TokenIssuer:
    def __init__(
        self, app_id: str, app_secret: str, ttl_seconds: int, clock: Callable[[], float]
    ) -> None:
        self._app_id = app_id
        self._app_secret = app_secret
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._expiry: dict[str, float] = {}  # token -> clock() deadline
        self._latest: str | None = None
        self._expired: set[str] = set()  # made invalid by `expire_all`, still this app's

    def issue(self, app_id: object, app_secret: object) -> tuple[str, int]:
        """(token, seconds left); raises FeishuError for bad credentials."""
        if not isinstance(app_id, str) or not isinstance(app_secret, str) or not app_id:
            raise codes.INVALID_PARAM
        if app_id != self._app_id:
            raise codes.INVALID_PARAM.with_detail("app_id not exist")
        if app_secret != self._app_secret:
            raise codes.APP_SECRET_INVALID
        now = self._clock()
        if self._latest is not None:
            left = self._expiry.get(self._latest, 0.0) - now
            if left > min(_REUSE_WHILE_REMAINING_S, self.ttl_seconds / 2):
                return self._latest, int(left)
        token = "t-" + secrets.token_hex(20)
        self._expiry[token] = now + self.ttl_seconds
        self._latest = token
        return token, self.ttl_seconds

    def issued(self, token: str) -> bool:
        """This app was given `token` (it may have expired since)."""
        return token in self._expiry or token in self._expired

    def check(self, authorization: str | None) -> None:
        """Raise Feishu's gateway error unless `Authorization: Bearer <live token of this
        app>`: another app's token is as invalid here as a made-up one."""
        deadline = self._expiry.get(bearer(authorization))
        if deadline is None or deadline <= self._clock():
            raise codes.INVALID_TENANT_TOKEN

    def expire_all(self) -> None:
        self._expired.update(self._expiry)
        self._expiry.clear()
        self._latest = None


def bearer(authorization: str | None) -> str:
    """The token of `Authorization: Bearer <token>`; Feishu's 99991661 without one."""
    if not authorization:
        raise codes.MISSING_ACCESS_TOKEN
    scheme, _, token = authorization.partition(" ")
    if scheme != "Bearer" or not token.strip():
        raise codes.MISSING_ACCESS_TOKEN
    return token.strip()
