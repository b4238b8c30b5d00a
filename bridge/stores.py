"""What the settings' database means: the store the bridge opens (SQLite in the data folder,
or PostgreSQL with BRIDGE_DATABASE_URL) and, on PostgreSQL, the `Ownership` that lets
several instances share it. psycopg is imported only for PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import SecretStr

from bridge.cluster.forward import Forwarder
from bridge.cluster.leases import LeaseKeeper
from bridge.cluster.ownership import Ownership
from bridge.config import Settings
from bridge.engine.engine import Engine
from bridge.store.port import Store
from bridge.store.sqlite import SqliteStore


def secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def store_for(settings: Settings) -> Store:
    """PostgreSQL when BRIDGE_DATABASE_URL is set (psycopg is imported only then), else the
    SQLite file in the data folder."""
    url = secret(settings.store.bridge_database_url)
    if url is None:
        return SqliteStore(settings.store.db_path)
    from bridge.store.postgres import PostgresStore

    return PostgresStore(url)


def ownership_for(
    settings: Settings, store: Store, engine: Engine, clock: Callable[[], float]
) -> Ownership | None:
    """Several instances share a PostgreSQL store: each conversation is run by the instance
    holding its lease (bridge/cluster/ownership.py). SQLite is one instance alone."""
    url = secret(settings.store.bridge_database_url)
    if url is None:
        return None
    from bridge.cluster.wake_pg import PgWake

    ttl = settings.cluster.bridge_lease_seconds
    me = settings.cluster.bridge_instance_id
    keeper = LeaseKeeper(
        store, me, ttl, clock=clock, on_lost=lambda key, why: ownership.lost(key, why)
    )
    forwarder = Forwarder(
        store, me, token=secret(settings.ops.bridge_ops_token), stale_after=ttl, clock=clock
    )
    ownership = Ownership(
        keeper=keeper,
        wake=PgWake(url),
        store=store,
        engine=engine,
        forwarder=forwarder,
        clock=clock,
        sweep_every=ttl / 3,
    )
    return ownership
