"""Sessions of the scripted agent and where their histories live."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path


class Cancelled(Exception):
    """The client cancelled the turn."""


@dataclass
class Session:
    session_id: str
    cwd: str
    history: list[dict[str, str]] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    replies: list[str] = field(default_factory=list)
    mode: str = "default"  # this process's memory only: a restarted agent is back to default
    model: str = "swift"  # likewise


class SessionStore:
    """Session histories, on disk when a state dir is configured."""

    def __init__(self, folder: str | None) -> None:
        self.folder = Path(folder) if folder else None
        self.memory: dict[str, Session] = {}

    def save(self, session: Session) -> None:
        self.memory[session.session_id] = session
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / f"{session.session_id}.json"
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps({"cwd": session.cwd, "history": session.history}))
        temporary.replace(target)

    def load(self, session_id: str) -> Session | None:
        if session_id in self.memory:
            return self.memory[session_id]
        if self.folder is None or "/" in session_id:
            return None
        path = self.folder / f"{session_id}.json"
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        session = Session(session_id, data.get("cwd", ""), list(data.get("history", [])))
        self.memory[session_id] = session
        return session
