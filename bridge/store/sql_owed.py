"""Owed posts in SQL (`owed`, schema version 8), shared by both SQL stores. A post is settled
by its outbox mark through a trigger (`AFTER INSERT ON outbox`), so every path that writes a
mark, `end_turn`'s included, settles it in the same statement."""

from __future__ import annotations

from bridge.store.port_owed import OwedPost
from bridge.store.sql_base import SqlStatements


class SqlOwed(SqlStatements):
    async def owe(
        self,
        idempotency_key: str,
        conversation_key: str,
        turn_id: str | None,
        payload: str,
        now: float,
    ) -> bool:
        # Not once its mark is written: a record that comes after its post was confirmed
        # would never be settled.
        sql = self._sql(
            "INSERT INTO owed (idempotency_key, conversation_key, turn_id, payload, owed_at)"
            " SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS"
            " (SELECT 1 FROM outbox WHERE idempotency_key = ?) ON CONFLICT DO NOTHING"
        )
        params = (idempotency_key, conversation_key, turn_id, payload, now, idempotency_key)
        return await self._write(sql, params) == 1

    async def owed(self) -> list[OwedPost]:
        rows = await self._all(
            "SELECT seq, idempotency_key, conversation_key, turn_id, payload, owed_at"
            " FROM owed ORDER BY seq"
        )
        return [
            OwedPost(int(r[0]), str(r[1]), str(r[2]), r[3], str(r[4]), float(r[5])) for r in rows
        ]

    async def settle(self, idempotency_key: str) -> None:
        await self._write(
            self._sql("DELETE FROM owed WHERE idempotency_key = ?"), (idempotency_key,)
        )
