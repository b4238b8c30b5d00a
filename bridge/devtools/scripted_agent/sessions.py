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
    title: str = ""
    updated_at: str | None = None
    resumed: int = 0  # session/resume calls on this process


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
        data = {
            "cwd": session.cwd,
            "history": session.history,
            "title": session.title,
            "updated_at": session.updated_at,
        }
        temporary.write_text(json.dumps(data))
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
        session.title = str(data.get("title") or "")
        session.updated_at = data.get("updated_at")
        self.memory[session_id] = session
        return session

    def every(self) -> list[Session]:
        """Every session this agent knows, on disk or in memory."""
        if self.folder is not None and self.folder.is_dir():
            for path in self.folder.glob("*.json"):
                self.load(path.stem)
        return list(self.memory.values())
