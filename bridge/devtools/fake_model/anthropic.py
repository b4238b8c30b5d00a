"""The Anthropic Messages API (`POST /v1/messages`), streamed or not: for Claude Code."""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

from bridge.devtools.fake_model import script, sse

_ids = itertools.count(1)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            parts.append(_text_of(block.get("content")))
    return "\n".join(parts)


def _turn(body: dict[str, Any]) -> tuple[script.Turn, tuple[str, str] | None]:
    # The last user message (Claude Code may put a system message after it).
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    last = users[-1] if users else {}
    content = last.get("content")
    results = (
        [b for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_result"]
        if isinstance(content, list)
        else []
    )
    if results:
        return script.after_tool(_text_of(results[-1].get("content"))), None
    tools = {
        str(t.get("name")): set((t.get("input_schema") or {}).get("properties") or {})
        for t in body.get("tools") or []
        if isinstance(t, dict)
    }
    writer = script.write_tool(tools)
    return script.plan(_text_of(content), tools=writer is not None), writer


def _blocks(turn: script.Turn, writer: tuple[str, str] | None) -> list[dict[str, Any]]:
    if isinstance(turn, script.Write) and writer is not None:
        name, key = writer
        return [
            {"type": "text", "text": "I will write the file."},
            {
                "type": "tool_use",
                "id": f"toolu_{next(_ids):06d}",
                "name": name,
                "input": {key: turn.path, "content": turn.content},
            },
        ]
    return [{"type": "text", "text": turn.text if not isinstance(turn, script.Write) else ""}]


async def messages(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    turn, writer = _turn(body)
    blocks = _blocks(turn, writer)
    stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
    message = {
        "id": f"msg_{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 8},
    }
    if not body.get("stream"):
        return web.json_response(message)
    response = await sse.open_stream(request)
    start = dict(message, content=[], stop_reason=None)
    await sse.send(response, {"type": "message_start", "message": start}, "message_start")
    for index, block in enumerate(blocks):
        empty = {"type": "text", "text": ""} if block["type"] == "text" else dict(block, input={})
        await sse.send(
            response,
            {"type": "content_block_start", "index": index, "content_block": empty},
            "content_block_start",
        )
        if block["type"] == "text":
            deltas = [{"type": "text_delta", "text": p} for p in script.pieces(block["text"])]
        else:
            raw = json.dumps(block["input"], ensure_ascii=False)
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in script.pieces(raw)]
        for delta in deltas:
            await sse.pause(script.pace(turn))
            await sse.send(
                response,
                {"type": "content_block_delta", "index": index, "delta": delta},
                "content_block_delta",
            )
        if isinstance(turn, script.Hang):
            await sse.hang(response)
            return response
        await sse.send(
            response, {"type": "content_block_stop", "index": index}, "content_block_stop"
        )
    await sse.send(
        response,
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 8},
        },
        "message_delta",
    )
    await sse.send(response, {"type": "message_stop"}, "message_stop")
    return response


async def count_tokens(request: web.Request) -> web.Response:
    body = await request.text()
    return web.json_response({"input_tokens": max(1, len(body) // 4)})
