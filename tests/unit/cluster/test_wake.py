"""`LocalWake` in process, `PgWake` against the throwaway PostgreSQL server (tests/pg.py).
The PostgreSQL tests wait on real notifications, each wait bounded by WAIT."""

from __future__ import annotations

import asyncio
import itertools
import logging

import psycopg
import pytest

from bridge.cluster import LocalWake, WakeKind
from bridge.cluster.wake import Subscription, Wakeup, decode, encode
from bridge.cluster.wake_pg import PgWake

WAIT = 10.0  # seconds: the bound of one wait for a real notification, never a sleep
_channels = itertools.count(1)


async def _next(sub: Subscription) -> Wakeup:
    return await asyncio.wait_for(anext(sub), WAIT)


def _channel() -> str:
    # NOTIFY channels are database-wide: one per test, so tests never hear each other.
    return f"wake_test_{next(_channels)}"


def test_payload_is_kind_and_key_only() -> None:
    assert encode("oc_1:om_thread", WakeKind.CLICK) == "click:oc_1:om_thread"
    assert decode("click:oc_1:om_thread") == Wakeup("oc_1:om_thread", WakeKind.CLICK)
    assert decode("bogus:oc_1") is None
    assert decode("message:") is None
    assert decode("no colon") is None


async def test_local_wake_reaches_every_subscriber_in_order() -> None:
    async with LocalWake() as wake:
        first, second = wake.subscribe(), wake.subscribe()
        await wake.publish("A", WakeKind.MESSAGE)
        await wake.publish("B", WakeKind.STOP)
        for sub in (first, second):
            assert [await _next(sub), await _next(sub)] == [
                ("A", WakeKind.MESSAGE),
                ("B", WakeKind.STOP),
            ]
        second.close()
        await wake.publish("C", WakeKind.CLICK)
        assert await _next(first) == ("C", WakeKind.CLICK)
    assert [w async for w in first] == []  # closing the wake ends the subscriptions


async def test_a_subscriber_too_far_behind_gets_one_rescan() -> None:
    async with LocalWake(queue_size=3) as wake:
        sub = wake.subscribe()
        for n in range(5):
            await wake.publish(f"K{n}", WakeKind.MESSAGE)
        # K3 found the queue full: K0-K3 became one RESCAN; K4 came after it.
        assert await _next(sub) == ("", WakeKind.RESCAN)
        assert await _next(sub) == ("K4", WakeKind.MESSAGE)
        await wake.publish("K9", WakeKind.MESSAGE)
        assert await _next(sub) == ("K9", WakeKind.MESSAGE)


async def test_pg_wake_publish_on_one_instance_is_heard_on_the_other(pg_url: str) -> None:
    channel = _channel()
    async with PgWake(pg_url, channel=channel) as a, PgWake(pg_url, channel=channel) as b:
        heard_by_b, heard_by_a = b.subscribe(), a.subscribe()
        await a.publish("oc_1:om_t", WakeKind.MESSAGE)
        await a.publish("oc_2", WakeKind.STOP)
        assert await _next(heard_by_b) == ("oc_1:om_t", WakeKind.MESSAGE)
        assert await _next(heard_by_b) == ("oc_2", WakeKind.STOP)
        assert await _next(heard_by_a) == ("oc_1:om_t", WakeKind.MESSAGE)  # its own, too
        await b.publish("oc_3", WakeKind.CLICK)
        assert await _next(heard_by_b) == ("oc_3", WakeKind.CLICK)


async def test_pg_wake_reconnects_after_its_connection_is_killed_and_asks_for_a_rescan(
    pg_url: str,
) -> None:
    channel = _channel()
    async with (
        PgWake(pg_url, channel=channel) as a,
        PgWake(pg_url, channel=channel, reconnect_wait=(0.01, 0.1)) as b,
    ):
        sub = b.subscribe()
        pid = b.listener_pid
        assert pid is not None
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        await a.publish("lost?", WakeKind.MESSAGE)  # while b is away: may be gone for good
        got = [await _next(sub)]
        while got[-1].kind is not WakeKind.RESCAN:
            got.append(await _next(sub))
        # Only what arrived before the drop was noticed can precede the RESCAN.
        assert set(got[:-1]) <= {("lost?", WakeKind.MESSAGE)}
        assert b.reconnects == 1
        assert b.listener_pid not in (None, pid)
        await a.publish("after", WakeKind.MESSAGE)
        rest = [await _next(sub)]
        if rest[-1] == ("lost?", WakeKind.MESSAGE):  # published after the new LISTEN
            rest.append(await _next(sub))
        assert rest[-1] == ("after", WakeKind.MESSAGE)


async def test_pg_wake_publisher_survives_its_connection_being_killed(pg_url: str) -> None:
    channel = _channel()
    async with PgWake(pg_url, channel=channel) as a, PgWake(pg_url, channel=channel) as b:
        sub = b.subscribe()
        await a.publish("one", WakeKind.MESSAGE)
        assert await _next(sub) == ("one", WakeKind.MESSAGE)
        publisher = a._publisher
        assert publisher is not None
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (publisher.info.backend_pid,))
        await a.publish("two", WakeKind.STOP)  # retried on a new connection
        assert await _next(sub) == ("two", WakeKind.STOP)


async def test_pg_wake_close_ends_subscriptions(pg_url: str) -> None:
    wake = PgWake(pg_url, channel=_channel())
    await wake.open()
    sub = wake.subscribe()
    await wake.close()
    assert [w async for w in sub] == []
    assert wake.listener_pid is None


async def test_pg_wake_open_fails_when_the_database_is_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    wake = PgWake("postgresql://nobody@127.0.0.1:1/none", connect_timeout=2)
    with pytest.raises(psycopg.OperationalError):
        await wake.open()
