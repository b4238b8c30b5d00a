"""`PgWake`: the `Wake` port on PostgreSQL LISTEN/NOTIFY (several instances on one
database). Imported only with BRIDGE_DATABASE_URL, like the PostgreSQL store.

Two dedicated autocommit connections: one LISTENs (psycopg's `notifies()` holds its
connection), one publishes with `pg_notify`. The listener checks its connection every
`keepalive` seconds; when it drops (a server restart, a failover, `pg_terminate_backend`)
it reconnects with backoff (tenacity) for as long as the wake is open, LISTENs again, and
then delivers one RESCAN: NOTIFY is not stored, so what was published while nobody
listened is gone, and only a rescan of the store finds its traces. A publish whose
connection dropped is retried on a new connection; if that fails too it is logged and
dropped (the database is down: the owner's listener drops as well and rescans).

The channel is database-wide (not per schema): bridges sharing a database need the same
channel, and two deployments on one database need different ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg
from psycopg import AsyncConnection, sql
from tenacity import (
    AsyncRetrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from bridge.cluster.wake import DEFAULT_QUEUE, WakeKind, Wakeup, _Fanout, decode, encode
from bridge.store.postgres import redact

logger = logging.getLogger(__name__)

DEFAULT_CHANNEL = "bridge_wake"


class PgWake(_Fanout):
    """Use as `async with PgWake(url) as wake:`; `open()` fails when the database cannot be
    reached at all, later drops are reconnected."""

    def __init__(
        self,
        url: str,
        *,
        channel: str = DEFAULT_CHANNEL,
        keepalive: float = 30.0,
        reconnect_wait: tuple[float, float] = (0.05, 5.0),
        connect_timeout: float = 10.0,
        queue_size: int = DEFAULT_QUEUE,
    ) -> None:
        super().__init__(queue_size=queue_size)
        self._url = url
        self.channel = channel
        self._keepalive = keepalive
        self._wait_min, self._wait_max = reconnect_wait
        self._connect_timeout = connect_timeout
        self._listener: AsyncConnection[tuple[object, ...]] | None = None
        self._publisher: AsyncConnection[tuple[object, ...]] | None = None
        self._publish_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0  # how often the listener came back (for tests and metrics)

    def __repr__(self) -> str:
        return f"PgWake({redact(self._url)!r}, channel={self.channel!r})"

    @property
    def listener_pid(self) -> int | None:
        """The server process id of the listening connection (None while reconnecting)."""
        conn = self._listener
        return None if conn is None or conn.closed else conn.info.backend_pid

    async def open(self) -> None:
        if self._task is not None:
            return
        self._listener = await self._listen()
        self._task = asyncio.create_task(self._run(), name="pg-wake-listener")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for conn in (self._listener, self._publisher):
            if conn is not None:
                await conn.close()
        self._listener = self._publisher = None
        self._end_all()

    async def publish(self, conversation_key: str, kind: WakeKind) -> None:
        payload = encode(conversation_key, kind)
        async with self._publish_lock:
            try:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(psycopg.OperationalError),
                    stop=stop_after_attempt(2),
                    reraise=True,
                ):
                    with attempt:
                        conn = self._publisher
                        if conn is None or conn.closed or conn.broken:
                            conn = self._publisher = await self._connect()
                        try:
                            await conn.execute("SELECT pg_notify(%s, %s)", (self.channel, payload))
                        except psycopg.OperationalError:
                            self._publisher = None
                            await conn.close()
                            raise
            except psycopg.OperationalError as exc:
                logger.warning("wake-up not published (%s): %s", kind, type(exc).__name__)

    # -- the listener ---------------------------------------------------------------------

    async def _connect(self) -> AsyncConnection[tuple[object, ...]]:
        return await AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))
        )

    async def _listen(self) -> AsyncConnection[tuple[object, ...]]:
        conn = await self._connect()
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _run(self) -> None:
        while True:
            conn = self._listener
            try:
                if conn is None:
                    conn = self._listener = await self._relisten()
                    self.reconnects += 1
                    logger.info("wake listener back; rescan for what was missed")
                    self._deliver(Wakeup("", WakeKind.RESCAN))
                async for notify in conn.notifies(timeout=self._keepalive):
                    wakeup = decode(notify.payload)
                    if wakeup is not None:
                        self._deliver(wakeup)
                await conn.execute("SELECT 1")  # still there? (a silent drop shows here)
            except psycopg.OperationalError as exc:
                logger.warning("wake listener lost its connection: %s", type(exc).__name__)
                self._listener = None
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        await conn.close()

    async def _relisten(self) -> AsyncConnection[tuple[object, ...]]:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(psycopg.OperationalError),
            wait=wait_exponential(
                multiplier=self._wait_min, min=self._wait_min, max=self._wait_max
            ),
            before_sleep=before_sleep_log(logger, logging.DEBUG),
            reraise=True,
        ):
            with attempt:
                return await self._listen()
        raise AssertionError("unreachable")  # pragma: no cover - retries forever
