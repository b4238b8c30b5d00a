"""`POST /cluster/forward` on the operator listener: another instance hands this one a card
click or a recall for a conversation it may run (bridge/cluster/forward.py is the other
side). Behind the operator token like every operator route; 404 when this instance does
not hold what the forward names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bridge.cluster.forward import PATH

Take = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]


def cluster_routes(take: Take) -> list[web.RouteDef]:
    async def forward(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body is not a JSON object"}, status=400)
        try:
            answer = await take(body)
        except ValueError as exc:  # pydantic's ValidationError is one
            msg = f"malformed forward: {type(exc).__name__}"
            return web.json_response({"error": msg}, status=400)
        if answer is None:
            return web.json_response({"error": "not held by this instance"}, status=404)
        return web.json_response(answer)

    return [web.post(PATH, forward)]
