"""What the bench's bare servers share (the relays in relay_bench.py, the floor in
floor_bridge.py): the tenant token, a Feishu event checked and opened as every bot must,
and an aiohttp app serving one handler on loopback until the process is killed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx
from aiohttp import web

from bridge.feishu import crypto


def opened_event(
    headers: Mapping[str, str], body: bytes, encrypt_key: str, token: str
) -> dict[str, Any]:
    """Signature verified, body decrypted, token checked: the event as Feishu sent it."""
    crypto.verify_signature(headers, body, encrypt_key)
    event: dict[str, Any] = json.loads(
        crypto.decrypt_payload(json.loads(body)["encrypt"], encrypt_key)
    )
    crypto.verify_token(event["header"]["token"], token)
    return event


async def auth_headers(domain: str, app_id: str, secret: str) -> dict[str, str]:
    """The calls' `Authorization` header, with a tenant token fetched once (bench runs are
    shorter than its life)."""
    async with httpx.AsyncClient(base_url=domain, timeout=10) as fetch:
        answer = await fetch.post(
            "/open-apis/auth/v3/tenant_access_token/internal",
            json={"app_id": app_id, "app_secret": secret},
        )
    return {"Authorization": f"Bearer {answer.json()['tenant_access_token']}"}


async def serve_events(
    port: int, handle: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> None:
    """`POST /feishu/events` to `handle` and `GET /healthz` on 127.0.0.1:`port`, forever."""
    app = web.Application()
    app.router.add_post("/feishu/events", handle)
    app.router.add_get("/healthz", lambda request: web.json_response({"ok": True}))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()
