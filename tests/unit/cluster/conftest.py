"""PostgreSQL fixtures of tests/pg.py for the PgWake tests (started only when used)."""

from __future__ import annotations

from tests.pg import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]
