"""The scripted model's HTTP server: every API it speaks on one aiohttp application."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

from bridge.devtools.fake_model import anthropic, chat, gemini, responses


def build_app(record: Path | None = None) -> web.Application:
    """`record`: a file that gets one JSON line per request (path and body), so a test can
    read what the agent asked its model."""

    @web.middleware
    async def log(request: web.Request, handler: Handler) -> web.StreamResponse:
        if record is not None and request.can_read_body:
            body = await request.read()
            with record.open("a", encoding="utf-8") as out:
                line = {"path": request.path, "body": body.decode("utf-8", "replace")}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
        response: web.StreamResponse = await handler(request)
        if response.status == 404:
            print(f"fake-model: no route for {request.method} {request.path}", file=sys.stderr)
        return response

    app = web.Application(middlewares=[log], client_max_size=64 * 1024 * 1024)
    for prefix in ("", "/v1"):
        app.router.add_post(f"{prefix}/messages", anthropic.messages)
        app.router.add_post(f"{prefix}/messages/count_tokens", anthropic.count_tokens)
        app.router.add_post(f"{prefix}/responses", responses.responses)
        app.router.add_post(f"{prefix}/chat/completions", chat.completions)
        app.router.add_get(f"{prefix}/models", _models)
    for version in ("v1beta", "v1"):  # the Gemini API; `{call}` is `{model}:{method}`
        app.router.add_post(f"/{version}/models/{{call}}", gemini.call)
        app.router.add_get(f"/{version}/models/{{model}}", gemini.model)
    app.router.add_get("/v1beta/models", gemini.models)
    return app


async def _models(request: web.Request) -> web.Response:
    model = {"id": "scripted", "object": "model", "created": 0, "owned_by": "fake-model"}
    return web.json_response({"object": "list", "data": [model]})
