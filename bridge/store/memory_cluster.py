"""Leases and instances in `MemoryStore` (mixed in): the same contract as the SQL stores'.
Every method completes without awaiting, so each is atomic on the event loop."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from bridge.store.port import JournaledMessage, MessageState
from bridge.store.port_cluster import InstanceRecord, Lease, UnownedConversation


class MemoryCluster:
    _messages: dict[str, JournaledMessage]  # MemoryStore's journal

    def __init__(self) -> None:
        super().__init__()
        # key -> (owner or None when released, fence, expires_at); rows are never deleted
        self._leases: dict[str, tuple[str | None, int, float]] = {}
        self._instances: dict[str, InstanceRecord] = {}

    def _check(self) -> None:
        raise NotImplementedError  # pragma: no cover - MemoryStore's

    async def claim_lease(
        self,
        conversation_key: str,
        owner: str,
        now: float,
        ttl: float,
        *,
        take_expired: bool = True,
    ) -> int | None:
        self._check()
        if not owner:
            raise ValueError("a lease owner is a non-empty instance id")
        held = self._leases.get(conversation_key)
        if held is None:
            fence = 1
        else:
            holder, fence, expires_at = held
            if holder is not None and holder != owner and (expires_at > now or not take_expired):
                return None
            fence = fence if holder == owner else fence + 1
        self._leases[conversation_key] = (owner, fence, now + ttl)
        return fence

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]:
        self._check()
        keys = sorted(k for k, (holder, _, _) in self._leases.items() if holder == owner)
        for key in keys:
            _, fence, _ = self._leases[key]
            self._leases[key] = (owner, fence, now + ttl)
        return keys

    async def release_leases(self, owner: str, keys: Sequence[str] | None = None) -> int:
        self._check()
        chosen = set(self._leases if keys is None else keys)
        released = 0
        for key, (holder, fence, expires_at) in list(self._leases.items()):
            if holder == owner and key in chosen:
                self._leases[key] = (None, fence, expires_at)
                released += 1
        return released

    async def lease_of(self, conversation_key: str, now: float) -> Lease | None:
        self._check()
        held = self._leases.get(conversation_key)
        if held is None or held[0] is None or held[2] <= now:
            return None
        return Lease(owner=held[0], fence=held[1], expires_at=held[2])

    async def unowned_conversations(self, now: float) -> list[UnownedConversation]:
        self._check()
        found: dict[str, UnownedConversation] = {}
        for m in sorted(self._messages.values(), key=lambda m: m.seq):
            key = m.conversation_key
            if m.state is MessageState.DONE or key in found:
                continue
            holder, fence, expires_at = self._leases.get(key, (None, 0, 0.0))
            if holder is None or expires_at <= now:
                found[key] = UnownedConversation(key, holder, fence)
        return list(found.values())

    async def interrupt_running_of(self, conversation_key: str, now: float) -> int:
        self._check()
        running = [
            m
            for m in self._messages.values()
            if m.conversation_key == conversation_key and m.state is MessageState.RUNNING
        ]
        for m in running:
            self._messages[m.message_id] = replace(
                m, state=MessageState.INTERRUPTED, updated_at=now
            )
        return len(running)

    async def heartbeat(
        self,
        instance_id: str,
        epoch: str,
        now: float,
        ops_url: str = "",
        info: Mapping[str, Any] | None = None,
    ) -> None:
        self._check()
        known = self._instances.get(instance_id)
        started = known.started_at if known is not None and known.epoch == epoch else now
        # Through JSON, as the SQL stores keep it: the caller's dict is not shared.
        facts = json.loads(json.dumps(dict(info or {})))
        self._instances[instance_id] = InstanceRecord(
            instance_id, epoch, started, now, ops_url, facts
        )

    async def instances(self, now: float) -> list[InstanceRecord]:
        self._check()
        return [
            replace(record, age=now - record.heartbeat_at)
            for _, record in sorted(self._instances.items())
        ]
