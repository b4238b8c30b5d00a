"""ACP update payloads the agent sends, and the side effects some commands have (the
sandbox probe, exiting, flooding stderr)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from acp.schema import (
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
)

from bridge.devtools.scripted_agent.language import MODELS, MODES
from bridge.devtools.scripted_agent.sessions import Session


def text_block(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def message_chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": text_block(text)}


def plan_entries(entries: list[str]) -> list[dict[str, str]]:
    return [
        {"content": entry, "priority": "medium", "status": "in_progress" if i == 0 else "pending"}
        for i, entry in enumerate(entries)
    ]


def probe(routes: dict[str, list[Any]]) -> dict[str, Any]:
    """Try each route the way an agent's shell would; report `ok` (a read also gives the
    sha256 of what it read) or the error's name."""
    import hashlib
    import subprocess

    def attempt(action: Any) -> str:
        try:
            return str(action())
        except (OSError, subprocess.SubprocessError) as exc:
            return type(exc).__name__

    def read(path: str) -> str:
        return "ok:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()

    def write(path: str) -> str:
        Path(path).write_text("written by the scripted agent\n")
        return "ok"

    def run(argv: list[str]) -> str:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
        return "ok" if done.returncode == 0 else f"exit {done.returncode}"

    def grep(path: str) -> str:
        data = Path(path.format(ppid=os.getppid())).read_bytes()
        return "found" if any(n.encode() in data for n in routes.get("needles", [])) else "absent"

    prefixes = tuple(routes.get("env", []))
    return {
        "grep": {p: attempt(lambda p=p: grep(p)) for p in routes.get("grep", [])},
        "read": {p: attempt(lambda p=p: read(p)) for p in routes.get("read", [])},
        "write": {p: attempt(lambda p=p: write(p)) for p in routes.get("write", [])},
        "run": {" ".join(a): attempt(lambda a=a: run(a)) for a in routes.get("run", [])},
        "env": sorted(
            name for name in os.environ if prefixes and name.upper().startswith(prefixes)
        ),
    }


async def exit_soon(code: int) -> None:
    os._exit(code)


def flood_stderr(kilobytes: int) -> None:
    # A blocking write, like a chatty real agent: it stalls if nobody reads the pipe.
    line = "scripted-agent stderr filler " + "x" * 994 + "\n"
    for _ in range(kilobytes):
        sys.stderr.write(line)
    sys.stderr.flush()


def modes_of(session: Session) -> SessionModeState:
    available = [SessionMode(id=mode_id, name=name) for mode_id, name in MODES]
    return SessionModeState(current_mode_id=session.mode, available_modes=available)


def config_of(session: Session) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
    values = [SessionConfigSelectOption(value=v, name=name) for v, name in MODELS]
    model = SessionConfigOptionSelect(
        id="model",
        name="Model",
        category="model",
        type="select",
        current_value=session.model,
        options=values,
    )
    return [model]


def received(prompt: list[Any]) -> list[str]:
    """The prompt's images and links, each in a few words (its text is not repeated)."""
    import base64

    from acp.schema import AudioContentBlock, ImageContentBlock, ResourceContentBlock

    found: list[str] = []
    for block in prompt:
        if isinstance(block, AudioContentBlock):
            found.append(f"audio {block.mime_type} {len(base64.b64decode(block.data))} bytes")
        elif isinstance(block, ImageContentBlock):
            found.append(f"image {block.mime_type} {len(base64.b64decode(block.data))} bytes")
        elif isinstance(block, ResourceContentBlock):
            path = block.uri.removeprefix("file://")
            size = os.path.getsize(path) if os.path.exists(path) else -1
            found.append(f"link {block.name} {block.uri} {size} bytes")
    return found
