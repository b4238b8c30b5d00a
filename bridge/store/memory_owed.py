"""Owed posts in `MemoryStore` (mixed in): the same contract as the SQL stores' (a mark
settles its post, as their trigger does)."""

from __future__ import annotations

from collections.abc import Container

from bridge.store.port_owed import OwedPost


class MemoryOwed:
    def __init__(self) -> None:
        super().__init__()
        self._owed: dict[str, OwedPost] = {}
        self._owed_seq = 0

    def _check(self) -> None:
        raise NotImplementedError  # pragma: no cover - MemoryStore's

    def _sent_keys(self) -> Container[str]:
        raise NotImplementedError  # pragma: no cover - MemoryStore's (its outbox marks)

    async def owe(
        self,
        idempotency_key: str,
        conversation_key: str,
        turn_id: str | None,
        payload: str,
        now: float,
    ) -> bool:
        self._check()
        if idempotency_key in self._owed or idempotency_key in self._sent_keys():
            return False
        self._owed_seq += 1
        post = OwedPost(self._owed_seq, idempotency_key, conversation_key, turn_id, payload, now)
        self._owed[idempotency_key] = post
        return True

    async def owed(self) -> list[OwedPost]:
        self._check()
        return sorted(self._owed.values(), key=lambda p: p.seq)

    async def settle(self, idempotency_key: str) -> None:
        self._check()
        self._owed.pop(idempotency_key, None)
