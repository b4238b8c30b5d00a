"""What the SQL mixins shared by `SqliteStore` and `PostgresStore` stand on: the store's
one-statement helpers, and statements written once with `?` marks, turned into the
driver's own mark (`_MARK`: "?" for sqlite3, "%s" for psycopg) by `_sql`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class SqlStatements:
    _MARK = "?"

    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        raise NotImplementedError  # pragma: no cover - the store's

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        raise NotImplementedError  # pragma: no cover - the store's

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._MARK)
