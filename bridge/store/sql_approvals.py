"""Approvals and outbox marks in SQL: first decision wins, first mark wins, each one
statement. Mixed into `SqliteStore` and `PostgresStore` (sql_store.py), written once with
`?` marks (sql_base.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bridge.store.port import Approval, ApprovalStatus, UnknownTurn
from bridge.store.sql_base import SqlStatements
from bridge.store.sql_rows import APPROVAL_COLUMNS, approval_of
from bridge.store.sql_turns import outbox_mark


class SqlApprovals(SqlStatements):
    # -- 6. approvals ------------------------------------------------------------------------

    async def save_approval(
        self,
        request_id: str,
        turn_id: str,
        conversation_key: str,
        card_message_id: str,
        requester_open_id: str,
        now: float,
        title: str = "",
    ) -> bool:
        sql = self._sql(
            "INSERT INTO approvals (request_id, turn_id, conversation_key, card_message_id,"
            " requester_open_id, created_at, title) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING"
        )
        params = (request_id, turn_id, conversation_key, card_message_id, requester_open_id)
        try:
            inserted = await self._write(sql, (*params, now, title))
        except Exception as exc:
            if self._unknown_row(exc):
                raise UnknownTurn(turn_id) from None
            raise
        return inserted == 1

    async def resolve_approval(
        self, request_id: str, status: ApprovalStatus, decided_by: str | None, now: float
    ) -> bool:
        status = ApprovalStatus(status)
        if status is ApprovalStatus.OPEN:
            raise ValueError("an approval cannot be resolved to 'open'")
        # First decision wins, as for turns.
        sql = self._sql(
            "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?"
            " WHERE request_id = ? AND status = 'open'"
        )
        return await self._write(sql, (status.value, decided_by, now, request_id)) == 1

    async def approval(self, request_id: str) -> Approval | None:
        row = await self._one(
            self._sql(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE request_id = ?"),
            (request_id,),
        )
        return None if row is None else approval_of(row)

    async def open_approvals(self) -> list[Approval]:
        rows = await self._all(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'open' ORDER BY seq"
        )
        return [approval_of(row) for row in rows]

    # -- 7. outbox marks ---------------------------------------------------------------------

    async def mark_sent(self, idempotency_key: str, message_ids: Sequence[str], now: float) -> bool:
        sql, params = outbox_mark(idempotency_key, message_ids, now)
        return await self._write(self._sql(sql), params) == 1

    async def sent(self, idempotency_key: str) -> list[str] | None:
        row = await self._one(
            self._sql("SELECT message_ids FROM outbox WHERE idempotency_key = ?"),
            (idempotency_key,),
        )
        if row is None:
            return None
        ids: list[Any] = json.loads(str(row[0]))
        return [str(m) for m in ids]
