"""The PostgreSQL schema of `PostgresStore`: its migrations and how they are applied.

Version N here means what version N means in sqlite_schema.py (same tables, columns and
constraints, in PostgreSQL's types), so both adapters keep one contract. Append only: never
edit a released script. Rows are turned back into records by sqlite_schema's functions
(plain tuples, same column order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.store.port import SchemaTooNew

if TYPE_CHECKING:
    from psycopg import AsyncConnection

_SCHEMA_V1 = """
CREATE TABLE seen_events (
    event_id   TEXT PRIMARY KEY,
    message_id TEXT UNIQUE,              -- NULL for events that carry no message
    seen_at    DOUBLE PRECISION NOT NULL
);
CREATE INDEX seen_events_by_time ON seen_events (seen_at);

CREATE TABLE messages (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- arrival order
    message_id       TEXT NOT NULL UNIQUE,
    conversation_key TEXT NOT NULL,
    sender_open_id   TEXT NOT NULL,
    chat_id          TEXT NOT NULL,
    text             TEXT NOT NULL,
    state            TEXT NOT NULL
                     CHECK (state IN ('queued', 'running', 'done', 'interrupted')),
    received_at      DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL
);
CREATE INDEX messages_unfinished ON messages (conversation_key, seq) WHERE state <> 'done';
CREATE INDEX messages_done_by_time ON messages (updated_at) WHERE state = 'done';

CREATE TABLE bindings (
    conversation_key TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL,
    bound_at         DOUBLE PRECISION NOT NULL
);

CREATE TABLE turns (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    turn_id          TEXT NOT NULL UNIQUE,
    conversation_key TEXT NOT NULL,
    message_id       TEXT NOT NULL,      -- no foreign key: the journal is pruned on its own
    started_at       DOUBLE PRECISION NOT NULL,
    outcome          TEXT CHECK (outcome IN
                         ('completed', 'cancelled', 'failed', 'timed_out', 'interrupted')),
    finished_at      DOUBLE PRECISION,
    CHECK ((outcome IS NULL) = (finished_at IS NULL))
);
CREATE INDEX turns_running ON turns (seq) WHERE outcome IS NULL;
CREATE INDEX turns_finished_by_time ON turns (finished_at) WHERE outcome IS NOT NULL;

CREATE TABLE trace (
    seq     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    turn_id TEXT NOT NULL REFERENCES turns (turn_id) ON DELETE CASCADE,
    kind    TEXT NOT NULL,
    detail  TEXT NOT NULL,               -- never prompt text
    at      DOUBLE PRECISION NOT NULL
);
CREATE INDEX trace_by_turn ON trace (turn_id, seq);

CREATE TABLE approvals (
    seq               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id        TEXT NOT NULL UNIQUE,
    turn_id           TEXT NOT NULL REFERENCES turns (turn_id) ON DELETE CASCADE,
    conversation_key  TEXT NOT NULL,
    card_message_id   TEXT NOT NULL,
    requester_open_id TEXT NOT NULL,
    created_at        DOUBLE PRECISION NOT NULL,
    status            TEXT NOT NULL DEFAULT 'open' CHECK (status IN
                          ('open', 'allowed_once', 'allowed_always', 'rejected',
                           'expired', 'cancelled')),
    decided_by        TEXT,
    decided_at        DOUBLE PRECISION,
    CHECK ((status = 'open') = (decided_at IS NULL))
);
CREATE INDEX approvals_open ON approvals (seq) WHERE status = 'open';
CREATE INDEX approvals_by_turn ON approvals (turn_id);
CREATE INDEX approvals_decided_by_time ON approvals (decided_at) WHERE status <> 'open';

CREATE TABLE outbox (
    idempotency_key TEXT PRIMARY KEY,
    message_ids     TEXT NOT NULL,       -- JSON array of Feishu message ids
    sent_at         DOUBLE PRECISION NOT NULL
);
CREATE INDEX outbox_by_time ON outbox (sent_at);
"""

_SCHEMA_V2 = """
ALTER TABLE approvals ADD COLUMN title TEXT NOT NULL DEFAULT '';
"""

_SCHEMA_V3 = """
CREATE TABLE preferences (
    conversation_key TEXT NOT NULL,
    name             TEXT NOT NULL,      -- "mode", or "config:<option id>"
    value            TEXT NOT NULL,
    set_at           DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (conversation_key, name)
);
"""

_SCHEMA_V4 = """
CREATE TABLE sessions (
    conversation_key TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    agent            TEXT NOT NULL,
    folder           TEXT NOT NULL,
    title            TEXT NOT NULL DEFAULT '',
    started_at       DOUBLE PRECISION NOT NULL,
    active_at        DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (conversation_key, session_id)
);
CREATE INDEX sessions_by_activity ON sessions (conversation_key, active_at);
"""

_SCHEMA_V5 = """
ALTER TABLE messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '';
"""

# Ordered; migration N (1-based) brings the schema from version N-1 to N. Append only.
MIGRATIONS: tuple[str, ...] = (_SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3, _SCHEMA_V4, _SCHEMA_V5)

# pg_advisory_xact_lock key of the migrations: "fpbridge" in ASCII, as a bigint.
MIGRATION_LOCK = 0x6670627269646765


async def schema_version(conn: AsyncConnection[tuple[object, ...]]) -> int:
    cur = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
    row = await cur.fetchone()
    return 0 if row is None else int(str(row[0]))


async def migrate(conn: AsyncConnection[tuple[object, ...]]) -> None:
    """Bring the schema to the newest version in ONE transaction, holding an advisory lock
    so two bridges starting at once migrate one after the other (the second finds nothing
    to do). `conn` must be in autocommit mode (no transaction open)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        current = await schema_version(conn)
        if current > len(MIGRATIONS):
            raise SchemaTooNew(
                f"database schema version {current} is newer than this bridge "
                f"({len(MIGRATIONS)}); upgrade the bridge"
            )
        for version, script in enumerate(MIGRATIONS, start=1):
            if version <= current:
                continue
            await conn.execute(script)  # several statements: no parameters allowed
            await conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
