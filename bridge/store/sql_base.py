"""What the SQL mixins shared by `SqliteStore` and `PostgresStore` stand on: the few calls
each adapter implements for its driver, and statements written once with `?` marks, turned
into the driver's own mark (`_MARK`: "?" for sqlite3, "%s" for psycopg) by `_sql`.

The adapter's part:
- `_write` and `_all`: ONE statement in autocommit mode, atomic on its own;
- `_atomically`: several statements as ONE transaction (all or none), in one hop to the
  database, for the port's calls that write more than one row set (`begin_turn`, `end_turn`);
- `_unknown_row`: whether a driver error is a foreign-key violation (a row that names a
  record the store does not know);
- `_conn`: raises `StoreClosed` when the store is not open.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# One statement with its parameters, `?` marks (`_sql` not yet applied).
Statement = tuple[str, tuple[Any, ...]]


class SqlStatements:
    _MARK = "?"

    async def _write(self, sql: str, params: Iterable[Any] = ()) -> int:
        raise NotImplementedError  # pragma: no cover - the store's

    async def _all(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        raise NotImplementedError  # pragma: no cover - the store's

    async def _atomically(self, statements: Sequence[Statement]) -> list[int]:
        """The statements (`?` marks) in order, as one transaction; their row counts."""
        raise NotImplementedError  # pragma: no cover - the store's

    def _unknown_row(self, exc: Exception) -> bool:
        raise NotImplementedError  # pragma: no cover - the store's

    def _conn(self) -> object:
        raise NotImplementedError  # pragma: no cover - the store's

    async def _one(self, sql: str, params: Iterable[Any] = ()) -> Any | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._MARK)
