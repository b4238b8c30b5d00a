"""Server-sent events, as the model APIs stream them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

KEEPALIVE_SECONDS = 0.25
HANG_LIMIT_SECONDS = 600.0


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, data: Any, event: str | None = None) -> None:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    await response.write(f"{head}data: {body}\n\n".encode())


async def pause(seconds: float) -> None:
    """The pace of a slow stream (a DRIP answer); nothing between the pieces of others."""
    if seconds > 0:
        await asyncio.sleep(seconds)


async def hang(response: web.StreamResponse) -> None:
    """Keep the stream open with SSE comments (ignored by every parser) until the client goes
    away: a cancelled or killed agent closes its connection."""
    loop = asyncio.get_running_loop()
    until = loop.time() + HANG_LIMIT_SECONDS
    with contextlib.suppress(ConnectionResetError):  # the agent went away: cancelled, killed
        while loop.time() < until:
            await response.write(b": keepalive\n\n")
            await asyncio.sleep(KEEPALIVE_SECONDS)
