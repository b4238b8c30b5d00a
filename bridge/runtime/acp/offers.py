"""What a turn's updates carry besides progress: files the agent's answer links (a
`resource_link` in an agent message) and file changes its tools report (`diff` content),
as turn events for the core (shown on request with /diff, sent with the answer)."""

from __future__ import annotations

import difflib
from typing import Any, Final

from acp.schema import (
    AgentMessageChunk,
    FileEditToolCallContent,
    ResourceContentBlock,
    ToolCallProgress,
    ToolCallStart,
)

from bridge.runtime.events import DiffReported, FileOffered, TurnEvent

MAX_DIFF_CHARS: Final = 50_000  # one file's diff kept for /diff; longer ones are cut


def offer_events(session_id: str, update: Any) -> list[TurnEvent]:
    if isinstance(update, AgentMessageChunk) and isinstance(update.content, ResourceContentBlock):
        link = update.content
        if link.uri.startswith("file://"):
            return [FileOffered(session_id, uri=link.uri, name=link.name)]
        return []
    if isinstance(update, ToolCallStart | ToolCallProgress):
        return [
            DiffReported(session_id, path=item.path, diff=_unified(item))
            for item in update.content or []
            if isinstance(item, FileEditToolCallContent)
        ]
    return []


def _unified(item: FileEditToolCallContent) -> str:
    old = (item.old_text or "").splitlines(keepends=True)
    new = item.new_text.splitlines(keepends=True)
    name = item.path
    lines = difflib.unified_diff(old, new, fromfile=f"a/{name}", tofile=f"b/{name}")
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text[:MAX_DIFF_CHARS]
