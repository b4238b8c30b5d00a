"""The cluster part of the `Store` port (schema version 7): conversation leases and the
instances table, for several bridges on one PostgreSQL database. SQLite and the
memory fake keep the same contract, so one instance runs the same code with leases that
nobody contests.

Leases:

- *One owner at a time.* A conversation is run only by the instance holding its lease.
  `claim_lease` is one atomic statement: it takes a lease that is free (never claimed, or
  released), expired, or already the caller's (a renewal); two claimers racing on a free
  lease get exactly one winner.
- *Fences.* Each lease has a fence, a number that grows at every change of owner (a claim
  after a release counts as a change) and stays the same while one owner keeps it. A lease
  row is never deleted, so a fence never goes back.
- *Renewal.* `renew_leases` extends every lease whose owner is still the caller, expired or
  not: an expired lease nobody took over was run by nobody else, so keeping it is safe. A
  lease another instance took over is not the caller's any more and is not in the answer;
  that is how an instance learns it lost one.
- Times are the callers' wall clocks (`now`, seconds since the epoch), never read here:
  instances sharing a database need clocks in step (NTP) to well under the lease time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Lease:
    owner: str  # the instance id holding it
    fence: int
    expires_at: float


@dataclass(frozen=True)
class UnownedConversation:
    """A conversation with unfinished messages and no live lease: work to take over."""

    conversation_key: str
    last_owner: str | None  # whose lease expired; None when never claimed or released
    fence: int  # the lease's fence now (0: never claimed); a takeover makes it larger


@dataclass(frozen=True)
class InstanceRecord:
    """One bridge instance, as its last heartbeat left it (`feishu-bridge status --all`)."""

    instance_id: str
    epoch: str  # the projection epoch of its current process (new at every start)
    started_at: float  # when that process first beat
    heartbeat_at: float
    ops_url: str  # where its operator API answers ("" when unknown)
    info: dict[str, Any] = field(default_factory=dict)  # small JSON facts (version, counts)
    age: float = 0.0  # seconds since its last heartbeat, at the `now` of the query


class ClusterStore(Protocol):
    """Leases and instances; part of `Store` (all methods need an open store)."""

    async def claim_lease(
        self,
        conversation_key: str,
        owner: str,
        now: float,
        ttl: float,
        *,
        take_expired: bool = True,
    ) -> int | None:
        """Hold the conversation's lease until `now + ttl` if it is free, expired or
        already `owner`'s; returns its fence then, None while another owner holds it.
        `take_expired=False`: another owner's expired lease is left to it (None)."""

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]:
        """Extend every lease `owner` still holds to `now + ttl`; returns their keys, sorted."""

    async def release_leases(self, owner: str, keys: Sequence[str] | None = None) -> int:
        """Give up `owner`'s leases (only `keys`, when given); returns how many."""

    async def lease_of(self, conversation_key: str, now: float) -> Lease | None:
        """The live lease of the conversation; None when it is free or expired at `now`."""

    async def unowned_conversations(self, now: float) -> list[UnownedConversation]:
        """Conversations with unfinished journal messages (queued, running, interrupted)
        and no live lease at `now`, oldest waiting message first, then those whose only
        leftover is an owed post (its owner died before sending it): what a taking-over
        instance claims, then reads with `pending_messages` and `owed`."""

    async def take_messages(self, message_ids: Sequence[str], fence: int) -> None:
        """Note that the owner holding the conversation's lease at `fence` took these
        messages (acks them, queues or runs them): an owner after it then tells them apart
        from messages journaled but never taken, which arrive there as new."""

    async def interrupt_running_of(self, conversation_key: str, now: float) -> int:
        """Mark the conversation's RUNNING messages INTERRUPTED (its owner died); returns
        how many. Unlike `interrupt_running_messages`, other conversations are untouched."""

    async def heartbeat(
        self,
        instance_id: str,
        epoch: str,
        now: float,
        ops_url: str = "",
        info: Mapping[str, Any] | None = None,
    ) -> None:
        """Record that the instance is alive; a new `epoch` (a restart) resets `started_at`."""

    async def instances(self, now: float) -> list[InstanceRecord]:
        """Every instance that ever beat, by id, with its age at `now`."""
