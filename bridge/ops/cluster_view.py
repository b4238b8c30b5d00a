"""`feishu-bridge status --all`: every instance that shares this bridge's store, read from
the database (the heartbeats of bridge/ops/housekeeping.py), not from one instance's API."""

from __future__ import annotations

from typing import Any

from bridge.config import Settings


async def instances_view(settings: Settings, now: float) -> dict[str, Any]:
    """Each instance with its epoch, when it started, how long since its last heartbeat,
    whether it counts as alive (a heartbeat within BRIDGE_LEASE_SECONDS), where its operator
    API answers, and its counts; `now` on the wall clock, which the heartbeats are on."""
    from bridge.stores import store_for  # the store the bridge itself would open

    ttl = settings.cluster.bridge_lease_seconds
    async with store_for(settings) as store:
        records = await store.instances(now)
    return {
        "instances": [
            {
                "instance_id": r.instance_id,
                "epoch": r.epoch,
                "started_at": r.started_at,
                "heartbeat_age_seconds": round(r.age, 3),
                "alive": r.age <= ttl,
                "ops_url": r.ops_url,
                **r.info,
            }
            for r in records
        ]
    }
