"""Operator HTTP API, on its own listener (`BRIDGE_OPS_HOST`:`BRIDGE_OPS_PORT`); who may read
it is decided in access.py. The Feishu listener serves `/healthz` only (`health_routes`).

GET /healthz         200 once ready, 503 before (and while shutting down)
GET /status          process-level summary plus every conversation's snapshot
GET /runtime-states  versioned snapshots (projection_epoch, revision, conversations)
GET /events          SSE of `runtime_state` frames; a `lagged` frame when frames were dropped,
                     an explicit `end` frame on shutdown
GET /turns/{turn_id} one turn's outcome and timeline (what was shown when; never any text)
GET /metrics         Prometheus text format
GET /console         the operator console: a static HTML shell and its script, no data (below)
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from bridge.ops.access import client_id
from bridge.ops.metrics import CONTENT_TYPE, Metrics
from bridge.ops.projection import TERMINAL, Projection

StatusProvider = Callable[[], dict[str, Any]]
TurnView = Callable[[str], Awaitable[dict[str, object] | None]]


# The console's files: served without the token (a browser cannot send a header when it
# navigates, and the URL must not carry the token into access logs). They hold no data and no
# secret; the page reads the token from its URL fragment (never sent to the server) or a
# password field, and every data call it makes (`/events`, `/turns/{id}`) carries
# `Authorization: Bearer`, so the data stays behind the token (access.py `OPEN_PATHS`).
CONSOLE_FILES = {
    "/console": ("index.html", "text/html"),
    "/console/console.js": ("console.js", "text/javascript"),
}
CONSOLE_HEADERS = {
    # Same-origin script only, no inline script, no outside asset; connections to this origin.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def _console_asset(name: str) -> str:
    return resources.files("bridge.ops").joinpath("console", name).read_text("utf-8")


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def health_routes(ready: Callable[[], bool]) -> list[web.RouteDef]:
    async def healthz(_: web.Request) -> web.Response:
        if ready():
            return web.json_response({"status": "ok"})
        return web.json_response({"status": "starting"}, status=503)

    return [web.get("/healthz", healthz)]


def ops_routes(
    projection: Projection,
    *,
    ready: Callable[[], bool],
    status: StatusProvider,
    turn_view: TurnView,
    metrics: Metrics,
) -> list[web.RouteDef]:
    async def status_view(_: web.Request) -> web.Response:
        return web.json_response({**status(), "runtime_states": projection.snapshot()})

    async def runtime_states(_: web.Request) -> web.Response:
        return web.json_response(projection.snapshot())

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        sub = projection.subscribe(client_id(request))
        try:
            # The current picture first, so a new observer needs no separate GET.
            await response.write(_sse("snapshot", projection.snapshot()))
            while True:
                item = await sub.queue.get()
                if item is TERMINAL:
                    await response.write(_sse("end", {"projection_epoch": projection.epoch}))
                    break
                if sub.dropped:
                    await response.write(_sse("lagged", {"dropped": sub.dropped}))
                    sub.dropped = 0
                assert isinstance(item, dict)
                await response.write(_sse("runtime_state", item))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            projection.unsubscribe(sub)
        return response

    async def turn(request: web.Request) -> web.Response:
        found = await turn_view(request.match_info["turn_id"])
        if found is None:
            return web.json_response({"error": "unknown turn"}, status=404)
        return web.json_response(found)

    async def metrics_view(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def console(request: web.Request) -> web.Response:
        name, content_type = CONSOLE_FILES[request.path]
        return web.Response(
            text=_console_asset(name),
            content_type=content_type,
            charset="utf-8",
            headers=CONSOLE_HEADERS,
        )

    return [
        *health_routes(ready),
        *(web.get(path, console) for path in CONSOLE_FILES),
        web.get("/metrics", metrics_view),
        web.get("/turns/{turn_id}", turn),
        web.get("/status", status_view),
        web.get("/runtime-states", runtime_states),
        web.get("/events", events),
    ]
