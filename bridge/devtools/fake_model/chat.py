"""The OpenAI Chat Completions API (`POST /v1/chat/completions`), streamed or not: for Qwen
Code, OpenCode (its `@ai-sdk/openai-compatible` provider) and other OpenAI-compatible clients."""

from __future__ import annotations

import itertools
import json
import re
import time
from typing import Any

from aiohttp import web

from bridge.devtools.fake_model import script, sse

_ids = itertools.count(1)


_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


def _words(message: dict[str, Any]) -> str:
    """What a user message says, without the context an agent wraps around the user's words
    (Qwen Code sends its skills, workspace and deferred tools as `<system-reminder>` parts of
    the first user message)."""
    return _REMINDER.sub("", script.text_of(message.get("content"))).strip()


def _turn(body: dict[str, Any]) -> tuple[script.Turn, tuple[str, str] | None]:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    tools = {
        str(fn.get("name")): set((fn.get("parameters") or {}).get("properties") or {})
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(fn := t.get("function"), dict)
    }
    writer = script.write_tool(tools)
    # The latest tool result or user's words decides the turn; a user message of reminders
    # only (context an agent adds between turns) decides nothing.
    for message in reversed(messages):
        if message.get("role") == "tool":
            return script.after_tool(script.text_of(message.get("content"))), None
        if message.get("role") == "user" and (said := _words(message)):
            return script.plan(said, tools=writer is not None), writer
    return script.plan("", tools=writer is not None), writer


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    turn, writer = _turn(body)
    call = None
    if isinstance(turn, script.Write) and writer is not None:
        name, key = writer
        arguments = json.dumps({key: turn.path, "content": turn.content}, ensure_ascii=False)
        call = {
            "id": f"call_{next(_ids):06d}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
    text = "" if isinstance(turn, script.Write) else turn.text
    finish = "tool_calls" if call else "stop"
    head = {
        "id": f"chatcmpl-{next(_ids):06d}",
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
    }
    usage = {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}
    if not body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if call:
            message["tool_calls"] = [call]
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return web.json_response(
            dict(head, object="chat.completion", choices=[choice], usage=usage)
        )
    response = await sse.open_stream(request)

    async def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        await sse.send(response, dict(head, object="chat.completion.chunk", choices=[choice]))

    await chunk({"role": "assistant", "content": ""})
    for piece in script.pieces(text) if text else []:
        await sse.pause(script.pace(turn))
        await chunk({"content": piece})
    if isinstance(turn, script.Hang):
        await sse.hang(response)
        return response
    if call:
        fn = call["function"]
        assert isinstance(fn, dict)
        await chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": fn["name"], "arguments": ""},
                    }
                ]
            }
        )
        for piece in script.pieces(str(fn["arguments"])):
            await chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    await chunk({}, finish)
    await sse.send(response, dict(head, object="chat.completion.chunk", choices=[], usage=usage))
    await sse.send(response, "[DONE]")
    return response
