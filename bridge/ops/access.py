"""Who may read the operator API, and the record of who did.

- `BRIDGE_OPS_TOKEN` set: every route but `/healthz` and the console's script needs
  `Authorization: Bearer <token>` (401 otherwise; compared in constant time, so the answer
  time says nothing of the token). `/console` without it is a 401 whose body is the page's
  data-free shell.
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
# Probes carry no token; nor does a browser loading the console's script (static, no data).
OPEN_PATHS = frozenset({"/healthz", "/console/console.js"})
# The console page is behind the token like every route: without it the answer is 401, but
# its body is still the page's shell (no data, no secret), since a browser navigating to it
# cannot send a header. The page then reads the token from its URL fragment (never sent) or
# a password field and sends it with every data call (routes.py `CONSOLE_FILES`).
SHELL_PATHS = frozenset({"/console"})
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="feishu-bridge operator API"'}

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
                if request.path in SHELL_PATHS:
                    response = await handler(request)
                    response.set_status(401)
                    response.headers.update(_CHALLENGE)
                else:
                    response = web.json_response(
                        {"error": "missing or wrong bearer token"}, status=401, headers=_CHALLENGE
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
