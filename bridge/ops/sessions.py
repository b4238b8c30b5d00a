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
- *Several apps*: each app has its directory over its own store and engine; its
  conversations are known by the keys the projection gives them (the first app's as they
  are, another's `<app>/<key>`). `AppSessions` answers for all of them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection, Sequence
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
        *,
        app: str = "",
        prefix: str = "",
    ) -> None:
        self._store = store
        self._engine = engine
        self._projection = projection
        self._routes = routes
        self._clock = clock
        self.app = app
        self.prefix = prefix  # of its keys in the projection ("": the first app's)

    def owns(self, shown: str) -> bool:
        """Is `shown` (a key as the projection has it) one of this app's? A chat's key has
        no `/` (Feishu ids are letters, digits and `_`): one with a `/` is another app's."""
        return shown.startswith(self.prefix) and "/" not in shown[len(self.prefix) :]

    async def load(self) -> None:
        """The display names kept in the store, into the snapshots (at start)."""
        for key, name in (await self._store.preference_everywhere(DISPLAY_NAME_PREFERENCE)).items():
            if name:
                self._projection.set_display_name(self.prefix + key, name)

    def _keys(self) -> set[str]:
        """Its conversations, by the projection's keys."""
        shown = set(self._projection.conversation_keys()) | set(self._projection.display_names())
        live = {self.prefix + key for key in self._engine.conversations}
        return {key for key in shown if self.owns(key)} | live

    async def _known(self, shown: str) -> bool:
        key = shown[len(self.prefix) :]
        return shown in self._keys() or await self._store.session_for(key) is not None

    async def list(self) -> list[dict[str, Any]]:
        """Every conversation this process has seen or named, by key."""
        return [await self._entry(key) for key in sorted(self._keys())]

    async def _entry(self, shown: str) -> dict[str, Any]:
        key = shown[len(self.prefix) :]  # the store's and the engine's key
        chosen = await self._store.preferences(key)
        root, folder = self._routes.folder(chosen)
        snap = self._projection.get(shown) or {}
        records = await self._store.sessions_of(key, 1)
        last = snap.get("last_terminal") or {}
        times = [
            snap.get("last_activity_at"),
            last.get("ended_at"),
            records[0].active_at if records else None,
        ]
        return {
            "conversation": shown,
            **({"app": self.app} if self.app else {}),
            "display_name": self._projection.display_name(shown),
            "session_id": await self._store.session_for(key),
            "agent": self._routes.agent(chosen),
            "workspace": self._routes.workspace_name(root),
            "folder": str(folder),
            "state": snap.get("state"),
            "phase": snap.get("phase"),
            "next_move": snap.get("next_move"),
            "last_activity_at": max((t for t in times if t is not None), default=None),
        }

    async def set_display_name(self, shown: str, value: object) -> dict[str, Any]:
        name = check_display_name(value)
        if not await self._known(shown):
            raise UnknownConversation(shown)
        key = shown[len(self.prefix) :]
        await self._store.set_preference(key, DISPLAY_NAME_PREFERENCE, name or "", self._clock())
        self._projection.set_display_name(shown, name)
        return await self._entry(shown)

    async def close(self, shown: str) -> dict[str, Any]:
        if not await self._known(shown):
            raise UnknownConversation(shown)
        if not await self._engine.close_session(shown[len(self.prefix) :]):
            raise SessionBusy(shown)
        return await self._entry(shown)


class AppSessions:
    """Every app's directory as one (`/sessions`): the list of all, and a conversation's
    name or close by the app its key says."""

    def __init__(self, directories: Sequence[SessionDirectory]) -> None:
        self._directories = list(directories)

    def _of(self, shown: str) -> SessionDirectory:
        for directory in self._directories:
            if directory.owns(shown):
                return directory
        raise UnknownConversation(shown)

    async def list(self) -> list[dict[str, Any]]:
        entries = [entry for d in self._directories for entry in await d.list()]
        return sorted(entries, key=lambda entry: str(entry["conversation"]))

    async def set_display_name(self, shown: str, value: object) -> dict[str, Any]:
        return await self._of(shown).set_display_name(shown, value)

    async def close(self, shown: str) -> dict[str, Any]:
        return await self._of(shown).close(shown)
