"""Operator HTTP API, on its own listener (`BRIDGE_OPS_HOST`:`BRIDGE_OPS_PORT`); who may read
it is decided in access.py. The Feishu listener serves `/healthz` only (`health_routes`).

GET /healthz         200 once ready, 503 before (and while shutting down)
GET /status          process-level summary plus every conversation's snapshot
GET /runtime-states  versioned snapshots (projection_epoch, revision, conversations)
GET /events          SSE of `runtime_state` frames; a `lagged` frame when frames were dropped,
                     an explicit `end` frame on shutdown
GET /turns/{turn_id} one turn's outcome and timeline (what was shown when; never any text)
GET /metrics         Prometheus text format
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bridge.ops.access import client_id
from bridge.ops.metrics import CONTENT_TYPE, Metrics
from bridge.ops.projection import TERMINAL, Projection

StatusProvider = Callable[[], dict[str, Any]]
TurnView = Callable[[str], Awaitable[dict[str, object] | None]]


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

    return [
        *health_routes(ready),
        web.get("/metrics", metrics_view),
        web.get("/turns/{turn_id}", turn),
        web.get("/status", status_view),
        web.get("/runtime-states", runtime_states),
        web.get("/events", events),
    ]
