"""Every statement the two SQL stores share, in one class: `SqliteStore` and `PostgresStore`
each add only their driver (sql_base.py's `_write`, `_all`, `_atomically`, ...), their
schema, and what truly differs by dialect (bulk timeline writes).

A new table: a migration appended to BOTH sqlite_schema.py and postgres_schema.py (same
version number, each in its own types), its statements once in a mixin over
`SqlStatements` (`?` marks; several writes that must land together through
`_atomically`), and that mixin listed here. The contract tests in tests/unit/store/ run
against both databases and the memory fake."""

from __future__ import annotations

from bridge.store.sql_approvals import SqlApprovals
from bridge.store.sql_choices import ConversationChoices
from bridge.store.sql_cluster import SqlCluster
from bridge.store.sql_journal import SqlJournal
from bridge.store.sql_owed import SqlOwed
from bridge.store.sql_schedules import SqlSchedules
from bridge.store.sql_turns import SqlTurns


class SqlStore(
    SqlJournal, SqlTurns, SqlApprovals, ConversationChoices, SqlSchedules, SqlCluster, SqlOwed
):
    """The statements of the `Store` port shared by both SQL adapters."""
