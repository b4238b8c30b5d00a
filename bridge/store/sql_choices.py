"""What a conversation chose and had: its choices of agent, folder, mode and options
(`preferences`), and the sessions it has had (`sessions`). Mixed into `SqliteStore` and
`PostgresStore` (the statements are the same in both: sql_base.py); each method is one
statement, like the rest of the store."""

from __future__ import annotations

from bridge.store.port import SessionRecord
from bridge.store.sql_base import SqlStatements

_SESSION_COLUMNS = "conversation_key, session_id, agent, folder, title, started_at, active_at"


class ConversationChoices(SqlStatements):
    # The later of two values: SQLite's two-argument MAX, PostgreSQL's GREATEST.
    _GREATEST = "MAX"

    async def set_preference(
        self, conversation_key: str, name: str, value: str, now: float
    ) -> None:
        await self._write(
            self._sql(
                "INSERT INTO preferences (conversation_key, name, value, set_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (conversation_key, name) DO UPDATE"
                " SET value = excluded.value, set_at = excluded.set_at"
            ),
            (conversation_key, name, value, now),
        )

    async def preferences(self, conversation_key: str) -> dict[str, str]:
        rows = await self._all(
            self._sql("SELECT name, value FROM preferences WHERE conversation_key = ?"),
            (conversation_key,),
        )
        return {str(row[0]): str(row[1]) for row in rows}

    async def preference_everywhere(self, name: str) -> dict[str, str]:
        rows = await self._all(
            self._sql("SELECT conversation_key, value FROM preferences WHERE name = ?"), (name,)
        )
        return {str(row[0]): str(row[1]) for row in rows}

    async def note_session(self, record: SessionRecord) -> None:
        await self._write(
            self._sql(
                f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (conversation_key, session_id) DO UPDATE"
                " SET agent = excluded.agent, folder = excluded.folder,"
                " title = CASE WHEN excluded.title = '' THEN sessions.title"
                " ELSE excluded.title END,"
                f" active_at = {self._GREATEST}(sessions.active_at, excluded.active_at)"
            ),
            (
                record.conversation_key,
                record.session_id,
                record.agent,
                record.folder,
                record.title,
                record.started_at,
                record.active_at,
            ),
        )

    async def sessions_of(self, conversation_key: str, limit: int = 20) -> list[SessionRecord]:
        rows = await self._all(
            self._sql(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE conversation_key = ?"
                " ORDER BY active_at DESC, started_at DESC LIMIT ?"
            ),
            (conversation_key, limit),
        )
        return [
            SessionRecord(
                str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), float(r[5]), float(r[6])
            )
            for r in rows
        ]
