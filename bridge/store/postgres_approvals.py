"""Approvals and outbox marks in PostgreSQL: first decision wins, first mark wins, each one
statement. Mixed into `PostgresStore` (kept apart to keep that module short)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg.errors import ForeignKeyViolation

from bridge.store.port import Approval, ApprovalStatus, UnknownTurn
from bridge.store.sqlite_schema import APPROVAL_COLUMNS, approval_of


class PostgresApprovals:
    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        raise NotImplementedError  # pragma: no cover - PostgresStore's

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> tuple[Any, ...] | None:
        raise NotImplementedError  # pragma: no cover - PostgresStore's

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError  # pragma: no cover - PostgresStore's

    # -- approvals ------------------------------------------------------------------------

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
        try:
            inserted = await self._write(
                "INSERT INTO approvals (request_id, turn_id, conversation_key, card_message_id, "
                "requester_open_id, created_at, title) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (
                    request_id,
                    turn_id,
                    conversation_key,
                    card_message_id,
                    requester_open_id,
                    now,
                    title,
                ),
            )
        except ForeignKeyViolation:
            raise UnknownTurn(turn_id) from None
        return inserted == 1

    async def resolve_approval(
        self, request_id: str, status: ApprovalStatus, decided_by: str | None, now: float
    ) -> bool:
        status = ApprovalStatus(status)
        if status is ApprovalStatus.OPEN:
            raise ValueError("an approval cannot be resolved to 'open'")
        # First decision wins, as for turns.
        return (
            await self._write(
                "UPDATE approvals SET status = %s, decided_by = %s, decided_at = %s "
                "WHERE request_id = %s AND status = 'open'",
                (status.value, decided_by, now, request_id),
            )
            == 1
        )

    async def approval(self, request_id: str) -> Approval | None:
        row = await self._one(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE request_id = %s", (request_id,)
        )
        return None if row is None else approval_of(row)

    async def open_approvals(self) -> list[Approval]:
        rows = await self._all(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE status = 'open' ORDER BY seq"
        )
        return [approval_of(row) for row in rows]

    # -- outbox marks ---------------------------------------------------------------------

    async def mark_sent(self, idempotency_key: str, message_ids: Sequence[str], now: float) -> bool:
        return (
            await self._write(
                "INSERT INTO outbox (idempotency_key, message_ids, sent_at) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (idempotency_key, json.dumps([str(m) for m in message_ids]), now),
            )
            == 1
        )

    async def sent(self, idempotency_key: str) -> list[str] | None:
        row = await self._one(
            "SELECT message_ids FROM outbox WHERE idempotency_key = %s", (idempotency_key,)
        )
        if row is None:
            return None
        ids: list[Any] = json.loads(str(row[0]))
        return [str(m) for m in ids]
