"""The OpenAI Responses API (`POST /v1/responses`), streamed: for Codex."""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

from bridge.devtools.fake_model import script, sse

_ids = itertools.count(1)


def _words(content: Any) -> str:
    return script.text_of(content, ("input_text", "output_text", "text"))


def _patch(path: str, content: str) -> str:
    """An apply_patch body that adds the file (Codex's own patch format)."""
    return f"*** Begin Patch\n*** Add File: {path}\n+{content}\n*** End Patch\n"


# Codex's tools that can write a file: `apply_patch` (a freeform "custom" tool whose input is
# the patch, or a function taking {"input": patch} on older models), else its shell tool with an
# `apply_patch` heredoc, which Codex intercepts and runs as the same patch (and approval).
_SHELLS = ("exec_command", "shell_command", "shell")


def _write_call(tools: dict[str, dict[str, Any]], patch: str) -> dict[str, Any]:
    tool = tools.get("apply_patch")
    if tool is not None and tool.get("type") == "custom":
        return {"type": "custom_tool_call", "name": "apply_patch", "input": patch}
    if tool is not None:
        return {
            "type": "function_call",
            "name": "apply_patch",
            "arguments": json.dumps({"input": patch}),
        }
    heredoc = f"apply_patch <<'PATCH'\n{patch}PATCH\n"
    if "exec_command" in tools:
        return {
            "type": "function_call",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": heredoc}),
        }
    if "shell_command" in tools:
        return {
            "type": "function_call",
            "name": "shell_command",
            "arguments": json.dumps({"command": heredoc}),
        }
    arguments = json.dumps({"command": ["apply_patch", patch]})
    return {"type": "function_call", "name": "shell", "arguments": arguments}


def _turn(body: dict[str, Any]) -> tuple[script.Turn, dict[str, Any] | None]:
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    last = items[-1] if items else {}
    if str(last.get("type", "")).endswith("_call_output"):
        # function_call_output or custom_tool_call_output: the tool ran (or was declined)
        output = last.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        return script.after_tool(text), None
    said = next((_words(i.get("content")) for i in reversed(items) if i.get("role") == "user"), "")
    tools = {str(t.get("name")): t for t in body.get("tools") or [] if isinstance(t, dict)}
    writes = "apply_patch" in tools or any(name in tools for name in _SHELLS)
    turn = script.plan(said, tools=writes)
    call = None
    if isinstance(turn, script.Write):
        call = _write_call(tools, _patch(turn.path, turn.content))
        prefix = "ctc" if call["type"] == "custom_tool_call" else "fc"
        call.update(
            id=f"{prefix}_{next(_ids):06d}", call_id=f"call_{next(_ids):06d}", status="completed"
        )
    return turn, call


async def responses(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    turn, call = _turn(body)
    rid = f"resp_{next(_ids):06d}"
    response = await sse.open_stream(request)
    seq = itertools.count()

    async def event(kind: str, **fields: Any) -> None:
        await sse.send(response, {"type": kind, "sequence_number": next(seq), **fields}, kind)

    shell = {
        "id": rid,
        "object": "response",
        "status": "in_progress",
        "model": body.get("model", "scripted"),
        "output": [],
    }
    await event("response.created", response=shell)
    output: list[dict[str, Any]] = []
    if not isinstance(turn, script.Write):
        mid = f"msg_{next(_ids):06d}"
        item = {
            "type": "message",
            "id": mid,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        await event("response.output_item.added", output_index=0, item=item)
        part = {"type": "output_text", "text": "", "annotations": []}
        await event(
            "response.content_part.added", item_id=mid, output_index=0, content_index=0, part=part
        )
        for piece in script.pieces(turn.text):
            await sse.pause(script.pace(turn))
            await event(
                "response.output_text.delta",
                item_id=mid,
                output_index=0,
                content_index=0,
                delta=piece,
            )
        if isinstance(turn, script.Hang):
            await sse.hang(response)
            return response
        done_part = dict(part, text=turn.text)
        await event(
            "response.output_text.done",
            item_id=mid,
            output_index=0,
            content_index=0,
            text=turn.text,
        )
        await event(
            "response.content_part.done",
            item_id=mid,
            output_index=0,
            content_index=0,
            part=done_part,
        )
        output.append(dict(item, status="completed", content=[done_part]))
    else:
        assert call is not None
        await event("response.output_item.added", output_index=0, item=call)
        output.append(call)
    await event("response.output_item.done", output_index=0, item=output[0])
    usage = {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 8,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 20,
    }
    await event(
        "response.completed", response=dict(shell, status="completed", output=output, usage=usage)
    )
    return response
