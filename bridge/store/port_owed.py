"""The owed part of the `Store` port (schema version 8): posts recorded before they are tried.

A user-visible post (a line, the agent's answer) is written here before its first attempt and
stays owed until Feishu confirms it: writing its outbox mark (`mark_sent`, or `end_turn`'s
`sent`) settles it in the same statement (a trigger in SQL), and `settle` drops one that needs
no sending any more. After a restart, what is still owed is delivered, in the order it was
owed, before anything newer of its conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class OwedPost:
    seq: int  # the order it was owed in (per store)
    idempotency_key: str
    conversation_key: str
    turn_id: str | None
    payload: str = field(repr=False)  # JSON: the post as it will be made (it holds user text)
    owed_at: float = 0.0


class OwedStore(Protocol):
    async def owe(
        self,
        idempotency_key: str,
        conversation_key: str,
        turn_id: str | None,
        payload: str,
        now: float,
    ) -> bool:
        """Record a post before it is tried; first record wins (False on a repeat)."""

    async def owed(self) -> list[OwedPost]:
        """Every post still owed, oldest first."""

    async def settle(self, idempotency_key: str) -> None:
        """The post needs no sending any more (it was sent, or it was given up)."""
