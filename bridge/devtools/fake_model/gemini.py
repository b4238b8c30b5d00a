"""The Gemini API (`/v1beta/models/{model}:streamGenerateContent?alt=sse`, `:generateContent`,
`:countTokens`, and the models list): for Gemini CLI, which reads its base URL from
`GOOGLE_GEMINI_BASE_URL`."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from bridge.devtools.fake_model import script, sse

MODELS = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite")
USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 8, "totalTokenCount": 20}


def _tools(body: dict[str, Any]) -> dict[str, set[str]]:
    """The offered functions and their parameter names (`parametersJsonSchema` in recent
    clients, `parameters` in older ones)."""
    found: dict[str, set[str]] = {}
    for tool in body.get("tools") or []:
        for fn in (tool or {}).get("functionDeclarations") or []:
            schema = fn.get("parametersJsonSchema") or fn.get("parameters") or {}
            found[str(fn.get("name"))] = set(schema.get("properties") or {})
    return found


def _turn(body: dict[str, Any]) -> tuple[script.Turn, tuple[str, str] | None]:
    """The last user content decides: a function's response gets the after-tool answer,
    words get their plan."""
    users = [c for c in body.get("contents") or [] if (c or {}).get("role", "user") == "user"]
    parts = [p for p in (users[-1].get("parts") or []) if isinstance(p, dict)] if users else []
    responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
    if responses:
        result = responses[-1].get("response")
        return script.after_tool(json.dumps(result, ensure_ascii=False)), None
    writer = script.write_tool(_tools(body))
    words = "\n".join(str(p.get("text", "")) for p in parts if "text" in p)
    return script.plan(words, tools=writer is not None), writer


def _chunk(parts: list[dict[str, Any]], finish: str | None, model: str) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
    if finish:
        candidate["finishReason"] = finish
        chunk["usageMetadata"] = USAGE
    return chunk


def _filled(schema: dict[str, Any]) -> Any:
    """A value that fits a JSON schema: the first of an enum, the minimum of a number.
    Gemini CLI's side requests ask for JSON this way (the `auto` model's router: `flash` or
    `pro`; the next-speaker check: `user`, so the turn ends)."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "string")).lower()
    if kind == "object":
        return {k: _filled(v) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "scripted"


def _answer_parts(
    body: dict[str, Any], turn: script.Turn, writer: tuple[str, str] | None
) -> list[dict[str, Any]]:
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema:
        return [{"text": json.dumps(_filled(schema))}]
    if isinstance(turn, script.Write) and writer is not None:
        name, key = writer
        args = {key: turn.path, "content": turn.content}
        return [{"functionCall": {"name": name, "args": args}}]
    return [{"text": "" if isinstance(turn, script.Write) else turn.text}]


async def call(request: web.Request) -> web.StreamResponse:
    """`POST /v1beta/models/{model}:{method}`."""
    model, _, method = request.match_info["call"].rpartition(":")
    body = await request.json()
    if method == "countTokens":
        return web.json_response({"totalTokens": max(1, len(json.dumps(body)) // 4)})
    if method not in ("generateContent", "streamGenerateContent"):
        raise web.HTTPNotFound()
    turn, writer = _turn(body)
    parts = _answer_parts(body, turn, writer)
    if method == "generateContent":
        return web.json_response(_chunk(parts, "STOP", model))
    response = await sse.open_stream(request)
    if isinstance(turn, script.Hang) and "text" in parts[0]:
        await sse.send(response, _chunk([{"text": turn.text}], None, model))
        await sse.hang(response)
        return response
    text = parts[0].get("text")
    if isinstance(text, str):
        pieces = script.pieces(text)
        for piece in pieces[:-1]:
            await sse.pause(script.pace(turn))
            await sse.send(response, _chunk([{"text": piece}], None, model))
        await sse.send(response, _chunk([{"text": pieces[-1]}], "STOP", model))
    else:
        await sse.send(response, _chunk(parts, "STOP", model))
    return response


def _model(name: str) -> dict[str, Any]:
    return {
        "name": f"models/{name}",
        "displayName": name,
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
    }


async def models(request: web.Request) -> web.Response:
    return web.json_response({"models": [_model(name) for name in MODELS]})


async def model(request: web.Request) -> web.Response:
    return web.json_response(_model(request.match_info["model"]))
