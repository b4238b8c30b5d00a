"""Leases and instances in SQL (schema version 7), mixed into `SqliteStore` and
`PostgresStore` like `SqlSchedules`: the same statements in both, but for the parameter
mark. Each method is ONE statement, atomic on its own on either database.

The claim is an upsert whose update runs only while the row is free, expired or the
claimer's own: on PostgreSQL a second inserter of the same key waits for the first, then
sees its row and finds the condition false (no row returned: it lost); SQLite has one
writer at a time. The fence grows when the owner changes (NULL, a released lease, never
equals an owner, so a claim after a release grows it too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from bridge.store.port_cluster import InstanceRecord, Lease, UnownedConversation
from bridge.store.sql_base import SqlStatements

_CLAIM = (
    "INSERT INTO leases (conversation_key, owner, fence, expires_at) VALUES (?, ?, 1, ?)"
    " ON CONFLICT (conversation_key) DO UPDATE SET"
    " fence = CASE WHEN leases.owner = excluded.owner THEN leases.fence"
    " ELSE leases.fence + 1 END,"
    " owner = excluded.owner, expires_at = excluded.expires_at"
    " WHERE leases.owner IS NULL OR leases.owner = excluded.owner OR leases.expires_at <= ?"
    " RETURNING fence"
)

_UNOWNED = (
    "SELECT m.conversation_key, l.owner, COALESCE(l.fence, 0) FROM messages m"
    " LEFT JOIN leases l ON l.conversation_key = m.conversation_key"
    " WHERE m.state <> 'done'"
    " AND (l.conversation_key IS NULL OR l.owner IS NULL OR l.expires_at <= ?)"
    " GROUP BY m.conversation_key, l.owner, l.fence ORDER BY MIN(m.seq)"
)

_HEARTBEAT = (
    "INSERT INTO instances (instance_id, epoch, started_at, heartbeat_at, ops_url, info)"
    " VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (instance_id) DO UPDATE SET"
    " started_at = CASE WHEN instances.epoch = excluded.epoch THEN instances.started_at"
    " ELSE excluded.started_at END,"
    " epoch = excluded.epoch, heartbeat_at = excluded.heartbeat_at,"
    " ops_url = excluded.ops_url, info = excluded.info"
)


def _info_of(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(str(text or "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class SqlCluster(SqlStatements):
    # -- leases ------------------------------------------------------------------------------

    async def claim_lease(
        self,
        conversation_key: str,
        owner: str,
        now: float,
        ttl: float,
        *,
        take_expired: bool = True,
    ) -> int | None:
        if not owner:
            raise ValueError("a lease owner is a non-empty instance id")
        expired_before = now if take_expired else float("-inf")  # -inf: none is
        params = (conversation_key, owner, now + ttl, expired_before)
        rows = await self._all(self._sql(_CLAIM), params)
        return int(rows[0][0]) if rows else None

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]:
        rows = await self._all(
            self._sql(
                "UPDATE leases SET expires_at = ? WHERE owner = ? RETURNING conversation_key"
            ),
            (now + ttl, owner),
        )
        return sorted(str(row[0]) for row in rows)

    async def release_leases(self, owner: str, keys: Sequence[str] | None = None) -> int:
        sql = "UPDATE leases SET owner = NULL WHERE owner = ?"
        params: list[Any] = [owner]
        if keys is not None:
            if not keys:
                return 0
            sql += f" AND conversation_key IN ({', '.join('?' for _ in keys)})"
            params += list(keys)
        return await self._write(self._sql(sql), params)

    async def lease_of(self, conversation_key: str, now: float) -> Lease | None:
        rows = await self._all(
            self._sql(
                "SELECT owner, fence, expires_at FROM leases"
                " WHERE conversation_key = ? AND owner IS NOT NULL AND expires_at > ?"
            ),
            (conversation_key, now),
        )
        if not rows:
            return None
        owner, fence, expires_at = rows[0]
        return Lease(owner=str(owner), fence=int(fence), expires_at=float(expires_at))

    async def unowned_conversations(self, now: float) -> list[UnownedConversation]:
        rows = await self._all(self._sql(_UNOWNED), (now,))
        return [
            UnownedConversation(
                conversation_key=str(key),
                last_owner=None if owner is None else str(owner),
                fence=int(fence),
            )
            for key, owner, fence in rows
        ]

    async def interrupt_running_of(self, conversation_key: str, now: float) -> int:
        return await self._write(
            self._sql(
                "UPDATE messages SET state = 'interrupted', updated_at = ?"
                " WHERE conversation_key = ? AND state = 'running'"
            ),
            (now, conversation_key),
        )

    # -- instances ---------------------------------------------------------------------------

    async def heartbeat(
        self,
        instance_id: str,
        epoch: str,
        now: float,
        ops_url: str = "",
        info: Mapping[str, Any] | None = None,
    ) -> None:
        payload = json.dumps(dict(info or {}), sort_keys=True, separators=(",", ":"))
        await self._write(self._sql(_HEARTBEAT), (instance_id, epoch, now, now, ops_url, payload))

    async def instances(self, now: float) -> list[InstanceRecord]:
        rows = await self._all(
            "SELECT instance_id, epoch, started_at, heartbeat_at, ops_url, info"
            " FROM instances ORDER BY instance_id"
        )
        return [
            InstanceRecord(
                instance_id=str(r[0]),
                epoch=str(r[1]),
                started_at=float(r[2]),
                heartbeat_at=float(r[3]),
                ops_url=str(r[4]),
                info=_info_of(r[5]),
                age=now - float(r[3]),
            )
            for r in rows
        ]
