"""Operator HTTP API on the bridge's aiohttp server.

GET /healthz         200 once ready, 503 before (and while shutting down)
GET /status          process-level summary plus every conversation's snapshot
GET /runtime-states  versioned snapshots (projection_epoch, revision, conversations)
GET /events          SSE of `runtime_state` frames; a `lagged` frame when frames were dropped,
                     an explicit `end` frame on shutdown
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from bridge.ops.projection import TERMINAL, Projection

StatusProvider = Callable[[], dict[str, Any]]


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def ops_routes(
    projection: Projection, *, ready: Callable[[], bool], status: StatusProvider
) -> list[web.RouteDef]:
    async def healthz(_: web.Request) -> web.Response:
        if ready():
            return web.json_response({"status": "ok"})
        return web.json_response({"status": "starting"}, status=503)

    async def status_view(_: web.Request) -> web.Response:
        return web.json_response({**status(), "runtime_states": projection.snapshot()})

    async def runtime_states(_: web.Request) -> web.Response:
        return web.json_response(projection.snapshot())

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        sub = projection.subscribe()
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

    return [
        web.get("/healthz", healthz),
        web.get("/status", status_view),
        web.get("/runtime-states", runtime_states),
        web.get("/events", events),
    ]
