"""The SQLite schema of `SqliteStore`: its migrations and how they are applied (the columns
each query reads, and rows turned back into records: sql_rows.py, shared with PostgreSQL)."""

from __future__ import annotations

import aiosqlite

from bridge.store.port import SchemaTooNew

_SCHEMA_V1 = """
CREATE TABLE seen_events (
    event_id   TEXT PRIMARY KEY,
    message_id TEXT UNIQUE,              -- NULL for events that carry no message
    seen_at    REAL NOT NULL
);
CREATE INDEX seen_events_by_time ON seen_events (seen_at);

CREATE TABLE messages (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,   -- arrival order, never reused
    message_id       TEXT NOT NULL UNIQUE,
    conversation_key TEXT NOT NULL,
    sender_open_id   TEXT NOT NULL,
    chat_id          TEXT NOT NULL,
    text             TEXT NOT NULL,
    state            TEXT NOT NULL
                     CHECK (state IN ('queued', 'running', 'done', 'interrupted')),
    received_at      REAL NOT NULL,
    updated_at       REAL NOT NULL
);
CREATE INDEX messages_unfinished ON messages (conversation_key, seq) WHERE state <> 'done';
CREATE INDEX messages_done_by_time ON messages (updated_at) WHERE state = 'done';

CREATE TABLE bindings (
    conversation_key TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL,
    bound_at         REAL NOT NULL
);

CREATE TABLE turns (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id          TEXT NOT NULL UNIQUE,
    conversation_key TEXT NOT NULL,
    message_id       TEXT NOT NULL,      -- no foreign key: the journal is pruned on its own
    started_at       REAL NOT NULL,
    outcome          TEXT CHECK (outcome IN
                         ('completed', 'cancelled', 'failed', 'timed_out', 'interrupted')),
    finished_at      REAL,
    CHECK ((outcome IS NULL) = (finished_at IS NULL))
);
CREATE INDEX turns_running ON turns (seq) WHERE outcome IS NULL;
CREATE INDEX turns_finished_by_time ON turns (finished_at) WHERE outcome IS NOT NULL;

CREATE TABLE trace (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    turn_id TEXT NOT NULL REFERENCES turns (turn_id) ON DELETE CASCADE,
    kind    TEXT NOT NULL,
    detail  TEXT NOT NULL,               -- never prompt text
    at      REAL NOT NULL
);
CREATE INDEX trace_by_turn ON trace (turn_id, seq);

CREATE TABLE approvals (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id        TEXT NOT NULL UNIQUE,
    turn_id           TEXT NOT NULL REFERENCES turns (turn_id) ON DELETE CASCADE,
    conversation_key  TEXT NOT NULL,
    card_message_id   TEXT NOT NULL,
    requester_open_id TEXT NOT NULL,
    created_at        REAL NOT NULL,
    status            TEXT NOT NULL DEFAULT 'open' CHECK (status IN
                          ('open', 'allowed_once', 'allowed_always', 'rejected',
                           'expired', 'cancelled')),
    decided_by        TEXT,
    decided_at        REAL,
    CHECK ((status = 'open') = (decided_at IS NULL))
);
CREATE INDEX approvals_open ON approvals (seq) WHERE status = 'open';
CREATE INDEX approvals_by_turn ON approvals (turn_id);
CREATE INDEX approvals_decided_by_time ON approvals (decided_at) WHERE status <> 'open';

CREATE TABLE outbox (
    idempotency_key TEXT PRIMARY KEY,
    message_ids     TEXT NOT NULL,       -- JSON array of Feishu message ids
    sent_at         REAL NOT NULL
);
CREATE INDEX outbox_by_time ON outbox (sent_at);
"""

# Ordered; migration N (1-based) brings the schema from version N-1 to N. Append only.
_SCHEMA_V2 = """
ALTER TABLE approvals ADD COLUMN title TEXT NOT NULL DEFAULT '';
"""

# What a conversation chose of its agent from the chat (/mode, /model), kept across restarts.
_SCHEMA_V3 = """
CREATE TABLE preferences (
    conversation_key TEXT NOT NULL,
    name             TEXT NOT NULL,      -- "mode", or "config:<option id>"
    value            TEXT NOT NULL,
    set_at           REAL NOT NULL,
    PRIMARY KEY (conversation_key, name)
);
"""

# The sessions each conversation has had (/sessions, /resume), whichever agent and folder.
_SCHEMA_V4 = """
CREATE TABLE sessions (
    conversation_key TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    agent            TEXT NOT NULL,
    folder           TEXT NOT NULL,
    title            TEXT NOT NULL DEFAULT '',
    started_at       REAL NOT NULL,
    active_at        REAL NOT NULL,
    PRIMARY KEY (conversation_key, session_id)
);
CREATE INDEX sessions_by_activity ON sessions (conversation_key, active_at);
"""

# The images and files a journaled message carries (JSON), fetched again after a restart.
_SCHEMA_V5 = """
ALTER TABLE messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '';
"""

# Prompts sent on a clock (/every, /at, BRIDGE_SCHEDULES); `next_due_at` in the past: due.
_SCHEMA_V6 = """
CREATE TABLE schedules (
    schedule_id       INTEGER PRIMARY KEY AUTOINCREMENT,   -- the number users see, never reused
    conversation_key  TEXT NOT NULL,
    chat_id           TEXT NOT NULL,
    creator_open_id   TEXT NOT NULL,                       -- '' for an operator's schedule
    kind              TEXT NOT NULL CHECK (kind IN ('every', 'at')),
    every_seconds     REAL,
    prompt            TEXT NOT NULL,
    next_due_at       REAL NOT NULL,
    created_at        REAL NOT NULL,
    anchor_message_id TEXT NOT NULL DEFAULT '',
    config_key        TEXT NOT NULL DEFAULT '',            -- BRIDGE_SCHEDULES entry's key
    last_run_at       REAL,
    last_skip_at      REAL,
    last_skip_reason  TEXT NOT NULL DEFAULT '',
    CHECK ((kind = 'every') = (every_seconds IS NOT NULL))
);
CREATE UNIQUE INDEX schedules_by_config_key ON schedules (config_key) WHERE config_key <> '';
CREATE INDEX schedules_by_conversation ON schedules (conversation_key, schedule_id);
"""

# Leases (owner NULL: released; rows are kept so a fence never goes back) and instances.
_SCHEMA_V7 = """
CREATE TABLE leases (
    conversation_key TEXT PRIMARY KEY,
    owner            TEXT,
    fence            INTEGER NOT NULL,
    expires_at       REAL NOT NULL
);
CREATE INDEX leases_by_owner ON leases (owner);

CREATE TABLE instances (
    instance_id  TEXT PRIMARY KEY,
    epoch        TEXT NOT NULL,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    ops_url      TEXT NOT NULL DEFAULT '',
    info         TEXT NOT NULL DEFAULT '{}'   -- a JSON object
);
"""

# Posts recorded before they are tried, settled by their outbox mark (bridge/store/port_owed.py).
_SCHEMA_V8 = """
CREATE TABLE owed (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key  TEXT NOT NULL UNIQUE,
    conversation_key TEXT NOT NULL,
    turn_id          TEXT,
    payload          TEXT NOT NULL,       -- JSON: the post as it will be made
    owed_at          REAL NOT NULL
);
CREATE TRIGGER owed_settled AFTER INSERT ON outbox
BEGIN
    DELETE FROM owed WHERE idempotency_key = NEW.idempotency_key;
END;
"""

# When a turn's prompt went out to the agent (NULL: never). A turn cut before that lost
# nothing: its message is run again, not reported cut (a database restart).
_SCHEMA_V9 = """
ALTER TABLE turns ADD COLUMN prompted_at REAL;
"""

# Each user's private chat with the bot, from their messages: a bot-menu click names no chat.
_SCHEMA_V10 = """
CREATE TABLE p2p_chats (
    open_id TEXT PRIMARY KEY,
    chat_id TEXT NOT NULL,
    seen_at REAL NOT NULL
);
"""

# The lease fence under which an owner took each message (0: none yet; several instances).
_SCHEMA_V11 = """
ALTER TABLE messages ADD COLUMN taken INTEGER NOT NULL DEFAULT 0;
"""

MIGRATIONS: tuple[str, ...] = (
    _SCHEMA_V1,
    _SCHEMA_V2,
    _SCHEMA_V3,
    _SCHEMA_V4,
    _SCHEMA_V5,
    _SCHEMA_V6,
    _SCHEMA_V7,
    _SCHEMA_V8,
    _SCHEMA_V9,
    _SCHEMA_V10,
    _SCHEMA_V11,
)


async def migrate(db: aiosqlite.Connection) -> None:
    """Bring the schema to the newest version, one transaction per migration."""
    await db.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY,"
        " applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
    )
    async with db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version") as cur:
        row = await cur.fetchone()
    current = 0 if row is None else int(row[0])
    if current > len(MIGRATIONS):
        raise SchemaTooNew(
            f"database schema version {current} is newer than this bridge "
            f"({len(MIGRATIONS)}); upgrade the bridge"
        )
    for version, script in enumerate(MIGRATIONS, start=1):
        if version <= current:
            continue
        # A second process racing here fails on the version's primary key and rolls back.
        try:
            await db.executescript(
                f"BEGIN IMMEDIATE;\n{script}\n"
                f"INSERT INTO schema_version (version) VALUES ({version});\nCOMMIT;"
            )
        except BaseException:
            if db.in_transaction:
                await db.rollback()
            raise


async def connection_settings(db: aiosqlite.Connection) -> dict[str, str | int]:
    """The effective connection settings and schema version (for diagnostics and tests)."""
    result: dict[str, str | int] = {}
    for name in (
        "journal_mode",
        "synchronous",
        "foreign_keys",
        "busy_timeout",
        "wal_autocheckpoint",
    ):
        async with db.execute(f"PRAGMA {name}") as cur:
            row = await cur.fetchone()
        value = None if row is None else row[0]
        result[name] = str(value) if isinstance(value, str) else int(value or 0)
    async with db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version") as cur:
        row = await cur.fetchone()
    result["schema_version"] = 0 if row is None else int(row[0])
    return result
