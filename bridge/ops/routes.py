"""Operator HTTP API, on its own listener (`BRIDGE_OPS_HOST`:`BRIDGE_OPS_PORT`); who may read
it is decided in access.py. The Feishu listener serves `/healthz` only (`health_routes`).

GET /healthz         200 once ready, 503 before (and while shutting down)
GET /status          process-level summary plus every conversation's snapshot
GET /runtime-states  versioned snapshots (projection_epoch, revision, conversations,
                     processes, faults)
GET /events          SSE, below
GET /turns/{turn_id} one turn's outcome and timeline (what was shown when; never any text);
                     `?app=<name>`: of that app (one message can be a turn of two bots)
GET /metrics         Prometheus text format
GET /console         the operator console: a static HTML shell and its script, no data (below)
GET /sessions        every conversation's session: key, session id, agent, workspace, folder,
                     display name, state, last activity (sessions.py)
PATCH /sessions/{conversation}        `{"display_name": "…" | null}`: ≤ 256 characters, no
                     control character (400 otherwise, or when the body is not such a JSON
                     object); 404 for an unknown conversation
POST /sessions/{conversation}/close   end its agent session like /new (no chat line); 409
                     while a round runs or messages wait for one; 404 when unknown

`/events` frames (projection.py). Every frame but the stream terminals has an SSE `id:`,
`<projection_epoch>:<revision>`; a reconnect sending it as `Last-Event-ID` gets exactly the
frames it missed while they are still in the ring (default 1024), else (too old, or another
epoch: the bridge restarted) a fresh `snapshot`. Each data is one JSON object carrying
`projection_epoch` and `revision`.

snapshot           the whole picture (as `/runtime-states`); first on a new stream
runtime_state      one conversation's new snapshot (`conversation`, `snapshot`)
runtime_processes  the agent processes' new view (`processes`: pid, agent, workspace, state
                   alive/starting/restarting/exited/not_started, started_at, restarts, …)
fault              a recorded fault (`fault`: at, conversation or null, kind, detail — kinds,
                   ids and exit codes only, never message text)
session_closed     a conversation's agent session was let go (`conversation`, `session_id`,
                   `reason`: new, switched, operator); the stream goes on
session_died       a conversation's agent session was lost with its agent (`reason`:
                   agent_exit, restart_failed, not_resumable); the stream goes on
client_evicted     this subscriber fell too far behind (its queue overflowed): the stream
                   ends; reconnect with `Last-Event-ID` (no id on this frame)
end                the bridge is shutting down: the stream ends
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from bridge.ops.access import client_id
from bridge.ops.metrics import CONTENT_TYPE, MetricsRegistry
from bridge.ops.projection import STREAM_TERMINALS, Frame, Projection
from bridge.ops.sessions import (
    AppSessions,
    InvalidMetadata,
    SessionBusy,
    UnknownConversation,
)

StatusProvider = Callable[[], dict[str, Any]]
TurnView = Callable[[str, str | None], Awaitable[dict[str, object] | None]]


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


def _sse(frame: Frame) -> bytes:
    head = f"id: {frame.id}\n" if frame.id is not None else ""
    body = json.dumps(frame.data, ensure_ascii=False)
    return f"{head}event: {frame.event}\ndata: {body}\n\n".encode()


def _error(message: str, status: int) -> web.Response:
    return web.json_response({"error": message}, status=status)


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
    metrics: MetricsRegistry,
    sessions: AppSessions | None = None,
) -> list[web.RouteDef]:
    async def status_view(_: web.Request) -> web.Response:
        return web.json_response({**status(), "runtime_states": projection.snapshot()})

    async def runtime_states(_: web.Request) -> web.Response:
        return web.json_response(projection.snapshot())

    async def events(request: web.Request) -> web.StreamResponse:
        # Subscribed first: a frame published while the response starts is queued, and the
        # opening frames chosen after it cover it (projection.py `open`).
        sub = projection.subscribe(client_id(request))
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        try:
            await response.prepare(request)
            # What it missed (Last-Event-ID in the ring), else the current picture.
            for frame in projection.open(sub, request.headers.get("Last-Event-ID")):
                await response.write(_sse(frame))
            while True:
                frame = await projection.next(sub)
                await response.write(_sse(frame))
                if frame.event in STREAM_TERMINALS:
                    break
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            projection.unsubscribe(sub)
        return response

    async def sessions_view(_: web.Request) -> web.Response:
        assert sessions is not None
        return web.json_response({"sessions": await sessions.list()})

    async def session_metadata(request: web.Request) -> web.Response:
        assert sessions is not None
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "display_name" not in body:
            return _error('the body must be a JSON object like {"display_name": "…"}', 400)
        try:
            entry = await sessions.set_display_name(
                request.match_info["conversation"], body["display_name"]
            )
        except InvalidMetadata as exc:
            return _error(str(exc), 400)
        except UnknownConversation:
            return _error("unknown conversation", 404)
        return web.json_response(entry)

    async def session_close(request: web.Request) -> web.Response:
        assert sessions is not None
        try:
            entry = await sessions.close(request.match_info["conversation"])
        except UnknownConversation:
            return _error("unknown conversation", 404)
        except SessionBusy:
            return _error("a round is running or messages wait: /stop it or wait", 409)
        return web.json_response(entry)

    async def turn(request: web.Request) -> web.Response:
        found = await turn_view(request.match_info["turn_id"], request.query.get("app"))
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
        *(
            [
                web.get("/sessions", sessions_view),
                # Another app's keys are `<app>/<key>`: a conversation may hold one `/`.
                web.patch("/sessions/{conversation:[^/]+(?:/[^/]+)?}", session_metadata),
                web.put("/sessions/{conversation:[^/]+(?:/[^/]+)?}", session_metadata),
                web.post("/sessions/{conversation:[^/]+(?:/[^/]+)?}/close", session_close),
            ]
            if sessions is not None
            else []
        ),
    ]
