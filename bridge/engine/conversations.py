"""The live conversations of this process: one actor per conversation key."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bridge.clock import Clock
from bridge.core import Conversation, Options, Timings
from bridge.engine.actor import ConversationActor, Route, Work
from bridge.engine.tasks import TaskTracker


class Conversations:
    def __init__(
        self,
        *,
        options: Options,
        timings: Timings,
        clock: Clock,
        perform: Callable[[ConversationActor, Work], Any],
        route: Callable[[Work], Route],
        publish: Callable[[str, dict[str, object]], object],
        tasks: TaskTracker,
    ) -> None:
        self._options = options
        self._timings = timings
        self._clock = clock
        self._perform = perform
        self._route = route
        self._publish = publish
        self._tasks = tasks
        self._actors: dict[str, ConversationActor] = {}

    def get(self, key: str) -> ConversationActor:
        found = self._actors.get(key)
        if found is None:
            found = ConversationActor(
                key,
                conv=Conversation(options=self._options, key=key),
                timings=self._timings,
                clock=self._clock,
                perform=self._perform,
                route=self._route,
                publish=self._publish,
                tasks=self._tasks,
            )
            self._actors[key] = found
        return found

    def drop(self, key: str) -> ConversationActor | None:
        """Forget the conversation (another instance runs it now)."""
        return self._actors.pop(key, None)

    def asking(self, request_id: str) -> ConversationActor | None:
        """The conversation whose open card carries this request (for a card click)."""
        for actor in self._actors.values():
            conv = actor.conv
            if any(a.request_id == request_id for a in conv.approvals):
                return actor
            if conv.question is not None and conv.question.request_id == request_id:
                return actor
        return None

    def by_key(self) -> dict[str, ConversationActor]:
        return dict(self._actors)

    def __iter__(self) -> Any:
        return iter(list(self._actors.values()))

    def __len__(self) -> int:
        return len(self._actors)

    async def wait_idle(self) -> None:
        """Until every actor has performed what it was given."""
        await asyncio.gather(*(actor.wait_idle() for actor in self._actors.values()))
