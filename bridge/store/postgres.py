"""`PostgresStore`: the `Store` on a PostgreSQL server (BRIDGE_DATABASE_URL), through
psycopg 3 and a small connection pool. Its statements are `SqlStore`'s, shared with
`SqliteStore` (sql_store.py, `%s` for `?`); this module is the driver (`PostgresDriver`).
Imported only when that setting is set: the SQLite path never loads psycopg.

Atomicity: the pooled connections run in autocommit mode, so a single statement (most
calls) is atomic on its own, whichever connection (or bridge process) runs it. First-wins
claims are `INSERT ... ON CONFLICT DO NOTHING` (PostgreSQL makes a second inserter wait for
the first and then do nothing) and first-terminal-wins updates are `UPDATE ... WHERE <not
yet decided>` (a second updater waits on the row lock, then finds the condition false).
Never read-then-write. The explicit transactions are the migration, under an advisory lock
(postgres_schema.py), and the port's calls that write several tables (`atomically`:
`begin_turn`, `end_turn`), sent in one round trip (pipeline mode).

Orders (`seq`) come from identity columns, allocated as rows are inserted: call order
within one bridge, as in SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from psycopg import AsyncConnection, OperationalError
from psycopg.errors import ForeignKeyViolation
from psycopg_pool import AsyncConnectionPool

from bridge.store.port import (
    DEFAULT_RETENTION_SECONDS,
    Store,
    StoreClosed,
    StoreUnavailable,
    TraceRecord,
)
from bridge.store.postgres_schema import migrate, schema_version
from bridge.store.sql_store import SqlDriver, SqlStore, Statement

Row = tuple[Any, ...]
Pool = AsyncConnectionPool[AsyncConnection[Row]]


def redact(url: str) -> str:
    """The URL without its password (for repr and errors)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    except ValueError:
        return "postgresql://…"


class PostgresStore(SqlStore):
    """The `Store` on PostgreSQL. Use as `async with PostgresStore(url) as store:`."""

    def __init__(
        self,
        url: str,
        *,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        pool_size: int = 4,
        connect_timeout: float = 30.0,
        wait_seconds: float = 5.0,
        schema: str | None = None,
    ) -> None:
        """`schema`: where its tables live (None: the server's default, `public`); each
        app but the first of a bridge keeps its own, so no key of one app meets another's."""
        driver = PostgresDriver(
            url,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            wait_seconds=wait_seconds,
            schema=schema,
        )
        super().__init__(driver, retention_seconds=retention_seconds)


class PostgresDriver:
    """`SqlStore`'s driver on a PostgreSQL server: a small pool of autocommit connections."""

    mark = "%s"  # psycopg's parameter mark
    greatest = "GREATEST"

    def __init__(
        self,
        url: str,
        *,
        pool_size: int,
        connect_timeout: float,
        wait_seconds: float,
        schema: str | None = None,
    ) -> None:
        self._url = url
        self._schema = schema
        self._pool_size = max(1, int(pool_size))
        self._connect_timeout = connect_timeout
        # How long a call waits for a connection while the server is away before it fails
        # (`StoreUnavailable`): its caller's retry decides how long to keep at it.
        self._wait = wait_seconds
        self._pool: Pool | None = None
        self._lifecycle = asyncio.Lock()  # two racing open() calls make one pool

    def __repr__(self) -> str:
        state = "open" if self._pool is not None else "closed"
        return f"PostgresDriver({self.where!r}, {state})"

    @property
    def where(self) -> str:
        return redact(self._url)

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        async with self._lifecycle:
            if self._pool is not None:
                return
            pool: Pool = AsyncConnectionPool(
                self._url,
                min_size=1,
                max_size=self._pool_size,
                kwargs=self._connection_options(),
                # A connection the server dropped (a restart, a failover) is replaced before
                # use, not failed on: one round trip per checkout.
                check=AsyncConnectionPool.check_connection,
                open=False,
                name="bridge-store",
            )
            try:
                await pool.open(wait=True, timeout=self._connect_timeout)
                async with pool.connection() as conn:
                    await migrate(conn, self._schema)
            except BaseException:
                await pool.close()
                raise
            self._pool = pool

    def _connection_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"autocommit": True}
        if self._schema is not None:  # a name of letters, digits, `_` (apps.NAME): no quoting
            options["options"] = f"-c search_path={self._schema}"
        return options

    async def close(self) -> None:
        async with self._lifecycle:
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.close()

    async def settings(self) -> dict[str, str | int]:
        """The effective connection settings (for diagnostics and tests)."""
        async with self._conn().connection() as conn:
            cur = await conn.execute("SHOW server_version")
            row = await cur.fetchone()
            return {
                "server_version": "" if row is None else str(row[0]),
                "pool_size": self._pool_size,
                "schema_version": await schema_version(conn),
            }

    def check_open(self) -> None:
        self._conn()

    def _conn(self) -> Pool:
        if self._pool is None:
            raise StoreClosed(f"{self!r} is not open")
        return self._pool

    # A server gone (a restart, a failover: the connection dropped, or none to be had
    # within the pool's timeout) is `StoreUnavailable`, one type for every caller to retry.

    async def write(self, sql: str, params: Iterable[Any] = ()) -> int:
        try:
            async with self._conn().connection(timeout=self._wait) as conn:
                cur = await conn.execute(sql, tuple(params))
                return int(cur.rowcount)
        except OperationalError as exc:
            raise StoreUnavailable(type(exc).__name__) from exc

    async def all(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        try:
            async with self._conn().connection(timeout=self._wait) as conn:
                cur = await conn.execute(sql, tuple(params))
                return await cur.fetchall()
        except OperationalError as exc:
            raise StoreUnavailable(type(exc).__name__) from exc

    async def atomically(self, statements: Sequence[Statement]) -> list[int]:
        try:
            return await self._transaction(statements)
        except OperationalError as exc:
            raise StoreUnavailable(type(exc).__name__) from exc

    async def _transaction(self, statements: Sequence[Statement]) -> list[int]:
        # BEGIN, the statements and COMMIT in one pipeline: they go out together and their
        # results come back at its end, one round trip (`conn.transaction()` would wait for
        # BEGIN and COMMIT apart). After an error the server skips the rest, COMMIT too,
        # and the transaction is rolled back here before the connection goes back.
        async with self._conn().connection(timeout=self._wait) as conn:
            try:
                async with conn.pipeline():
                    await conn.execute("BEGIN")
                    cursors = [await conn.execute(s, p) for s, p in statements]
                    await conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(OperationalError):  # the server may be gone
                    await conn.rollback()
                raise
            return [int(cur.rowcount) for cur in cursors]

    def unknown_row(self, exc: Exception) -> bool:
        return isinstance(exc, ForeignKeyViolation)

    # -- what differs by dialect -------------------------------------------------------------

    async def trace_many(self, records: Sequence[TraceRecord]) -> None:
        self._conn()
        if not records:
            return
        columns = list(zip(*records, strict=True))
        # One statement; `n` keeps the given order for the identity column.
        sql = (
            "INSERT INTO trace (turn_id, kind, detail, at)"
            " SELECT r.turn_id, r.kind, r.detail, r.at"
            " FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[])"
            " WITH ORDINALITY AS r (turn_id, kind, detail, at, n)"
            " WHERE EXISTS (SELECT 1 FROM turns t WHERE t.turn_id = r.turn_id) ORDER BY r.n"
        )
        params = [list(column) for column in columns]
        try:
            await self.write(sql, params)
        except ForeignKeyViolation:
            # A turn was pruned between the check and the insert (another connection):
            # once more, and the check now skips it.
            await self.write(sql, params)


if TYPE_CHECKING:
    _conforms: type[Store] = PostgresStore
    _drives: type[SqlDriver] = PostgresDriver
