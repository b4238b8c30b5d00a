"""The columns the shared SQL statements read, and their rows turned back into the port's
records: the same on SQLite (`sqlite3.Row`) and PostgreSQL (plain tuples), column order
as listed here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bridge.store.port import (
    Approval,
    ApprovalStatus,
    JournaledMessage,
    MessageState,
    Schedule,
    ScheduleKind,
    SessionRecord,
    TurnOutcome,
    TurnRecord,
)

MESSAGE_COLUMNS = (
    "seq, message_id, conversation_key, sender_open_id, chat_id, text, state, "
    "received_at, updated_at, attachments, taken"
)
TURN_COLUMNS = (
    "turn_id, conversation_key, message_id, started_at, outcome, finished_at, prompted_at"
)
APPROVAL_COLUMNS = (
    "request_id, turn_id, conversation_key, card_message_id, requester_open_id, created_at, "
    "status, decided_by, decided_at, title"
)
SESSION_COLUMNS = "conversation_key, session_id, agent, folder, title, started_at, active_at"
SCHEDULE_COLUMNS = (
    "schedule_id, conversation_key, chat_id, creator_open_id, kind, every_seconds, prompt,"
    " next_due_at, created_at, anchor_message_id, config_key, last_run_at, last_skip_at,"
    " last_skip_reason"
)

Row = Sequence[Any]


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def message_of(row: Row) -> JournaledMessage:
    return JournaledMessage(
        seq=int(row[0]),
        message_id=str(row[1]),
        conversation_key=str(row[2]),
        sender_open_id=str(row[3]),
        chat_id=str(row[4]),
        text=str(row[5]),
        state=MessageState(row[6]),
        received_at=float(row[7]),
        updated_at=float(row[8]),
        attachments=str(row[9] or ""),
        taken=int(row[10] or 0),
    )


def turn_of(row: Row) -> TurnRecord:
    return TurnRecord(
        turn_id=str(row[0]),
        conversation_key=str(row[1]),
        message_id=str(row[2]),
        started_at=float(row[3]),
        outcome=None if row[4] is None else TurnOutcome(row[4]),
        finished_at=_opt_float(row[5]),
        prompted_at=_opt_float(row[6]),
    )


def approval_of(row: Row) -> Approval:
    return Approval(
        request_id=str(row[0]),
        turn_id=str(row[1]),
        conversation_key=str(row[2]),
        card_message_id=str(row[3]),
        requester_open_id=str(row[4]),
        created_at=float(row[5]),
        status=ApprovalStatus(row[6]),
        decided_by=_opt_str(row[7]),
        decided_at=_opt_float(row[8]),
        title=str(row[9]),
    )


def session_of(row: Row) -> SessionRecord:
    return SessionRecord(
        conversation_key=str(row[0]),
        session_id=str(row[1]),
        agent=str(row[2]),
        folder=str(row[3]),
        title=str(row[4]),
        started_at=float(row[5]),
        active_at=float(row[6]),
    )


def schedule_of(row: Row) -> Schedule:
    return Schedule(
        schedule_id=int(row[0]),
        conversation_key=str(row[1]),
        chat_id=str(row[2]),
        creator_open_id=str(row[3]),
        kind=ScheduleKind(row[4]),
        every_seconds=_opt_float(row[5]),
        prompt=str(row[6]),
        next_due_at=float(row[7]),
        created_at=float(row[8]),
        anchor_message_id=str(row[9]),
        config_key=str(row[10]),
        last_run_at=_opt_float(row[11]),
        last_skip_at=_opt_float(row[12]),
        last_skip_reason=str(row[13]),
    )


def info_of(text: Any) -> dict[str, Any]:
    """An instance's `info` column (JSON text) as a dict; {} for anything else."""
    try:
        value = json.loads(str(text or "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
