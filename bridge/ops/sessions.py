"""Session metadata on the operator API: each conversation's agent session, its
agent and workspace, its operator-given display name and its last activity; setting the
name; closing the session.

- *Display names* are operator text: at most `MAX_DISPLAY_NAME` characters and no control
  character (Unicode category Cc), else `InvalidMetadata` (a 400). Kept as the conversation's
  `ops:display_name` preference: the `ops:` names never reach the agent
  (`bridge.preferences.agent_choices`).
- *Close* ends the session like `/new` (the next message opens a fresh one), without a chat
  line; refused (`SessionBusy`, a 409) while a turn runs or messages wait, so an operator
  never cuts a round: `/stop` it first, or wait.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection
from typing import Any, Final, Protocol

from bridge.ops.projection import Projection
from bridge.preferences import DISPLAY_NAME_PREFERENCE
from bridge.runtime.router import Routes
from bridge.store.port import Store

MAX_DISPLAY_NAME: Final = 256


class InvalidMetadata(ValueError):
    """A display name the operator API refuses (its message says why, in English)."""


class UnknownConversation(KeyError):
    pass


class SessionBusy(Exception):
    """A turn runs (or messages wait) in the conversation: its session is not closed."""


class LiveConversations(Protocol):
    """What the directory needs of the engine (the `Engine` is one): the keys of the
    conversations live in this process, and closing one's session."""

    @property
    def conversations(self) -> Collection[str]: ...

    async def close_session(self, key: str) -> bool: ...


def check_display_name(value: object) -> str | None:
    """The name to keep (None clears it); raises `InvalidMetadata` saying why not."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidMetadata("display_name must be a string or null")
    if len(value) > MAX_DISPLAY_NAME:
        raise InvalidMetadata(f"display_name is longer than {MAX_DISPLAY_NAME} characters")
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise InvalidMetadata("display_name must not contain control characters")
    return value


class SessionDirectory:
    def __init__(
        self,
        store: Store,
        engine: LiveConversations,
        projection: Projection,
        routes: Routes,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._engine = engine
        self._projection = projection
        self._routes = routes
        self._clock = clock

    async def load(self) -> None:
        """The display names kept in the store, into the snapshots (at start)."""
        for key, name in (await self._store.preference_everywhere(DISPLAY_NAME_PREFERENCE)).items():
            if name:
                self._projection.set_display_name(key, name)

    def _keys(self) -> set[str]:
        return (
            set(self._projection.conversation_keys())
            | set(self._projection.display_names())
            | set(self._engine.conversations)
        )

    async def _known(self, key: str) -> bool:
        return key in self._keys() or await self._store.session_for(key) is not None

    async def list(self) -> list[dict[str, Any]]:
        """Every conversation this process has seen or named, by key."""
        return [await self._entry(key) for key in sorted(self._keys())]

    async def _entry(self, key: str) -> dict[str, Any]:
        chosen = await self._store.preferences(key)
        root, folder = self._routes.folder(chosen)
        snap = self._projection.get(key) or {}
        records = await self._store.sessions_of(key, 1)
        last = snap.get("last_terminal") or {}
        times = [
            snap.get("last_activity_at"),
            last.get("ended_at"),
            records[0].active_at if records else None,
        ]
        return {
            "conversation": key,
            "display_name": self._projection.display_name(key),
            "session_id": await self._store.session_for(key),
            "agent": self._routes.agent(chosen),
            "workspace": self._routes.workspace_name(root),
            "folder": str(folder),
            "state": snap.get("state"),
            "phase": snap.get("phase"),
            "next_move": snap.get("next_move"),
            "last_activity_at": max((t for t in times if t is not None), default=None),
        }

    async def set_display_name(self, key: str, value: object) -> dict[str, Any]:
        name = check_display_name(value)
        if not await self._known(key):
            raise UnknownConversation(key)
        await self._store.set_preference(key, DISPLAY_NAME_PREFERENCE, name or "", self._clock())
        self._projection.set_display_name(key, name)
        return await self._entry(key)

    async def close(self, key: str) -> dict[str, Any]:
        if not await self._known(key):
            raise UnknownConversation(key)
        if not await self._engine.close_session(key):
            raise SessionBusy(key)
        return await self._entry(key)
