"""What the settings' database means: the store the bridge opens (SQLite in the data folder,
or PostgreSQL with BRIDGE_DATABASE_URL) and, on PostgreSQL, the `Ownership` that lets
several instances share it. psycopg is imported only for PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import SecretStr

from bridge.cluster.forward import Forwarder
from bridge.cluster.leases import LeaseKeeper
from bridge.cluster.ownership import Ownership
from bridge.cluster.wake import Wake
from bridge.config import Settings
from bridge.config.apps import store_name
from bridge.engine.engine import Engine
from bridge.store.port import Store
from bridge.store.sqlite import SqliteStore


def secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def store_for(settings: Settings, app: str | None = None) -> Store:
    """PostgreSQL when BRIDGE_DATABASE_URL is set (psycopg is imported only then), else the
    SQLite file in the data folder. `app`: the store of one app of several (None: the
    first's, where a single app's data has always been): its own SQLite file, or its own
    schema of the database, so that no key of one app (a chat, a message, a lease) ever
    meets another's."""
    url = secret(settings.store.bridge_database_url)
    if url is None:
        if app is None:
            return SqliteStore(settings.store.db_path)
        return SqliteStore(app_folder(settings, app) / settings.store.db_path.name)
    from bridge.store.postgres import PostgresStore

    return PostgresStore(url, schema=None if app is None else app_schema(app))


def app_folder(settings: Settings, app: str) -> Path:
    """Where one app of several keeps its files (its store, its users' attachments)."""
    return settings.store.bridge_data_dir / "apps" / app


def app_schema(app: str) -> str:
    """The PostgreSQL schema of one app of several (a bare lower-case identifier)."""
    return "bridge_app_" + store_name(app)


def ownership_for(
    settings: Settings,
    store: Store,
    engine: Engine,
    clock: Callable[[], float],
    app: str | None = None,
) -> Ownership | None:
    """Several instances share a PostgreSQL store: each conversation is run by the instance
    holding its lease (bridge/cluster/ownership.py). SQLite is one instance alone."""
    url = secret(settings.store.bridge_database_url)
    if url is None:
        return None
    from bridge.cluster.wake_pg import DEFAULT_CHANNEL, PgWake

    ttl = settings.cluster.bridge_lease_seconds
    me = settings.cluster.bridge_instance_id
    token = secret(settings.ops.bridge_ops_token)
    forwarder = Forwarder(store, me, token=token, stale_after=ttl, clock=clock, app=app)
    wake = PgWake(url) if app is None else PgWake(url, channel=f"{DEFAULT_CHANNEL}_{app}")
    return leased(store, engine, me, ttl, clock=clock, wake=wake, forwarder=forwarder)[1]


def leased(
    store: Store,
    engine: Engine,
    instance_id: str,
    ttl: float,
    *,
    clock: Callable[[], float],
    wake: Wake,
    forwarder: Forwarder,
) -> tuple[LeaseKeeper, Ownership]:
    """An instance's lease keeper and the ownership it serves, wired as every instance on a
    shared store has them (the simulator's cluster members too): a lease lost is the
    ownership's to act on, and the takeover sweep runs every third of the lease."""
    keeper = LeaseKeeper(
        store, instance_id, ttl, clock=clock, on_lost=lambda key, why: ownership.lost(key, why)
    )
    ownership = Ownership(
        keeper=keeper,
        wake=wake,
        store=store,
        engine=engine,
        forwarder=forwarder,
        clock=clock,
        sweep_every=ttl / 3,
    )
    return keeper, ownership
