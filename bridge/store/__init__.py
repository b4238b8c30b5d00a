"""Persistence: the `Store` port, its SQLite adapter and an in-memory fake."""

from bridge.store.memory import MemoryStore
from bridge.store.port import (
    DEFAULT_RETENTION_SECONDS,
    MESSAGE_TRANSITIONS,
    Approval,
    ApprovalStatus,
    JournaledMessage,
    MessageState,
    Schedule,
    ScheduleKind,
    SchemaTooNew,
    SessionRecord,
    Store,
    StoreClosed,
    StoreError,
    TraceEntry,
    TurnOutcome,
    TurnRecord,
    UnknownTurn,
)
from bridge.store.port_cluster import InstanceRecord, Lease, UnownedConversation
from bridge.store.sqlite import SqliteStore

__all__ = [
    "DEFAULT_RETENTION_SECONDS",
    "MESSAGE_TRANSITIONS",
    "Approval",
    "ApprovalStatus",
    "InstanceRecord",
    "JournaledMessage",
    "Lease",
    "MemoryStore",
    "MessageState",
    "Schedule",
    "ScheduleKind",
    "SchemaTooNew",
    "SessionRecord",
    "SqliteStore",
    "Store",
    "StoreClosed",
    "StoreError",
    "TraceEntry",
    "TurnOutcome",
    "TurnRecord",
    "UnknownTurn",
    "UnownedConversation",
]
