"""Feishu errors as typed exceptions, and the one function that maps a response to them.

The client, the token manager and any fake transport all go through `check_response`, so
every caller handles the same exception types whatever produced the failure.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import orjson

# 99991400 is the gateway's rate limit (HTTP 429, or 400 on some older APIs); 230020 is the
# IM per-chat frequency limit and 11232 the "system busy" limit on message sending.
RATE_LIMIT_CODES = frozenset({99991400, 230020, 11232})
# Invalid / expired tenant or app access token: refetch the token and try once more.
TOKEN_INVALID_CODES = frozenset(range(99991663, 99991669))
# The message a reply or an edit names was recalled by its sender.
MESSAGE_RECALLED = 230011

LOG_ID_HEADER = "x-tt-logid"
RATE_LIMIT_RESET_HEADER = "x-ogw-ratelimit-reset"


class FeishuError(Exception):
    """A failed Feishu call. Never carries the token, the app secret or the message text."""

    def __init__(
        self,
        code: int,
        msg: str,
        *,
        http_status: int | None = None,
        log_id: str | None = None,
    ) -> None:
        super().__init__(code, msg, http_status, log_id)
        self.code = code
        self.msg = msg
        self.http_status = http_status
        self.log_id = log_id

    def __str__(self) -> str:
        return (
            f"{type(self).__name__}: code={self.code} msg={self.msg!r} "
            f"http_status={self.http_status} log_id={self.log_id}"
        )


class BusinessError(FeishuError):
    """A request Feishu refused (4xx or a non-zero code); retrying would not help."""


class Skipped(FeishuError):
    """A best-effort call not made: its breaker is open after a rate limit."""

    def __init__(self, op: str) -> None:
        super().__init__(-1, f"{op} skipped while rate limited")


class TokenInvalid(FeishuError):
    """The access token was rejected; the client refetches it and retries once."""


class RateLimited(FeishuError):
    """Too many requests; `reset_after` is Feishu's suggested wait in seconds, if given."""

    def __init__(
        self,
        code: int,
        msg: str,
        *,
        http_status: int | None = None,
        log_id: str | None = None,
        reset_after: float | None = None,
    ) -> None:
        super().__init__(code, msg, http_status=http_status, log_id=log_id)
        self.reset_after = reset_after


class ServerError(FeishuError):
    """Feishu failed on its side (5xx, or a 2xx body that is not a Feishu envelope)."""


class TransportError(FeishuError):
    """The request never got an HTTP answer (timeout, refused or dropped connection)."""

    CODE = -1

    @classmethod
    def from_httpx(cls, exc: httpx.RequestError) -> TransportError:
        # The exception class name says enough (ConnectTimeout, ReadError…); its text may
        # contain the URL, which is harmless, but never the request body.
        return cls(cls.CODE, type(exc).__name__)


def _parse_body(response: httpx.Response) -> dict[str, Any] | None:
    # orjson reads a body at a fraction of json's cost; what it refuses (a lone surrogate
    # escape, an integer past 64 bits, invalid UTF-8) is json's to take or refuse, as before.
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        try:
            body = json.loads(response.content)
        except (ValueError, UnicodeDecodeError):
            return None
    return body if isinstance(body, dict) else None


def _log_id(response: httpx.Response, body: dict[str, Any] | None) -> str | None:
    header: str | None = response.headers.get(LOG_ID_HEADER)
    if header:
        return header
    error = body.get("error") if body else None
    if isinstance(error, dict) and isinstance(error.get("log_id"), str):
        return str(error["log_id"])
    return None


def _reset_after(response: httpx.Response) -> float | None:
    for name in (RATE_LIMIT_RESET_HEADER, "retry-after"):
        raw = response.headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value
    return None


def check_response(response: httpx.Response) -> dict[str, Any]:
    """Return the JSON body of a successful Feishu call, or raise the matching FeishuError.

    Success is HTTP 2xx with `code == 0`. The order matters: a rate limit may come as 429
    or as 400 with code 99991400, a token failure as 400/401 with a 9999166x code.
    """
    status = response.status_code
    body = _parse_body(response)
    log_id = _log_id(response, body)
    raw_code = body.get("code") if body is not None else None
    code = raw_code if isinstance(raw_code, int) else None
    msg = str(body.get("msg", "")) if body is not None else response.reason_phrase

    if status == 429 or code in RATE_LIMIT_CODES:
        limit_code = code if code is not None else 99991400
        raise RateLimited(
            limit_code,
            msg,
            http_status=status,
            log_id=log_id,
            reset_after=_reset_after(response),
        )
    if code in TOKEN_INVALID_CODES:
        raise TokenInvalid(code, msg, http_status=status, log_id=log_id)
    if status >= 500:
        raise ServerError(
            code if code is not None else status, msg, http_status=status, log_id=log_id
        )
    if 200 <= status < 300 and code == 0 and body is not None:
        return body
    if 200 <= status < 300 and code is None:
        # A 2xx that is not a Feishu envelope means a proxy or gateway got in the way.
        raise ServerError(
            status, "response is not a Feishu JSON envelope", http_status=status, log_id=log_id
        )
    raise BusinessError(
        code if code is not None else status, msg, http_status=status, log_id=log_id
    )


class EventParseError(ValueError):
    """The payload is not a usable Feishu event. `reason` is safe to log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
