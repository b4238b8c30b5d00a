"""Who may read the operator API, and the record of who did.

- `BRIDGE_OPS_TOKEN` set: every route but `/healthz` needs `Authorization: Bearer <token>`
  (401 otherwise; compared in constant time, so the answer time says nothing of the token).
- An optional `X-Bridge-Client-Id` names the caller (a dashboard, a script); a malformed one
  is a 400, never guessed at. It is kept on SSE subscriptions and in the access log.
- One access log line per request: method, path, status, client id. Never a header value
  other than the validated id, so never the token.
"""

from __future__ import annotations

import hmac
import logging
import re

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

CLIENT_ID_HEADER = "X-Bridge-Client-Id"
CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
OPEN_PATHS = frozenset({"/healthz"})  # probes carry no token

access_log = logging.getLogger("bridge.ops.access")
_CLIENT = web.RequestKey("client_id", str)


def client_id(request: web.Request) -> str | None:
    """The caller's validated id, or None when it sent none."""
    return request.get(_CLIENT)


def ops_middlewares(token: str | None) -> list[Middleware]:
    expected = f"Bearer {token}".encode() if token else None

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        client = request.headers.get(CLIENT_ID_HEADER)
        shown = client or "-"
        status = 500
        try:
            if client is not None and not CLIENT_ID.fullmatch(client):
                shown = "<invalid>"  # a raw header value is not written to the log
                response: web.StreamResponse = web.json_response(
                    {
                        "error": f"invalid {CLIENT_ID_HEADER}: use 1 to 128 characters "
                        "from A-Z a-z 0-9 . _ : -"
                    },
                    status=400,
                )
            elif expected and request.path not in OPEN_PATHS and not _bearer(request, expected):
                response = web.json_response(
                    {"error": "missing or wrong bearer token"},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="feishu-bridge operator API"'},
                )
            else:
                if client is not None:
                    request[_CLIENT] = client
                response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            access_log.info("%s %s %s client=%s", request.method, request.path, status, shown)

    return [guard]


def _bearer(request: web.Request, expected: bytes) -> bool:
    given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, expected)
