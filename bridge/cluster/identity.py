"""One live process per BRIDGE_INSTANCE_ID: two instances under one name would hold each
other's leases as their own and run a conversation twice, so a second one refuses to start.

A fresh heartbeat under our name from another process may also be our own predecessor that
just died (a crash and a quick restart): that one beats no more. So the check waits for the
next heartbeat that process would write, and refuses only if it comes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bridge.cluster.forward import InstancesStore
from bridge.store.port_cluster import InstanceRecord


class DuplicateInstance(Exception):
    """Another live process runs under this BRIDGE_INSTANCE_ID."""


async def check_alone(
    store: InstancesStore,
    instance_id: str,
    epoch: str,
    *,
    ttl: float,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Raise `DuplicateInstance` when another process under `instance_id` is beating."""
    first = await _beat(store, instance_id, clock())
    if first is None or first.epoch == epoch or first.age >= ttl:
        return
    await sleep(ttl / 2)  # past its next heartbeat (one every third of the lease)
    again = await _beat(store, instance_id, clock())
    if again is not None and again.epoch == first.epoch and again.heartbeat_at > first.heartbeat_at:
        raise DuplicateInstance(instance_id)


async def _beat(store: InstancesStore, instance_id: str, now: float) -> InstanceRecord | None:
    return next((r for r in await store.instances(now) if r.instance_id == instance_id), None)
