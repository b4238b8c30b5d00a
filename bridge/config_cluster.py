"""BRIDGE_LEASE_SECONDS and BRIDGE_INSTANCE_ID (several instances on one PostgreSQL
database, issue 12), described and checked for `Settings` (config.py)."""

from __future__ import annotations

import re
import secrets
import socket

LEASE_HELP = (
    "Several instances on one PostgreSQL database: how long an instance's hold on a"
    " conversation (its lease) lasts unrenewed. Each instance renews its leases and writes"
    " its heartbeat every third of it; when an instance dies, the others take its"
    " conversations over once its leases expire, and `feishu-bridge status --all` shows it"
    " as stale."
)
INSTANCE_ID_HELP = (
    "This instance's name among several on one database (letters, digits, `_.:-`, up to 64);"
    " each running instance needs its own. Unset: the host name and a short random suffix,"
    " new at every start."
)

_INSTANCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.:-]+")


def default_instance_id() -> str:
    """`<host name>-<6 hex digits>`: unique per process, readable in `status --all`."""
    host = _NOT_ALLOWED.sub("-", socket.gethostname()).strip("-._:")[:48] or "bridge"
    return f"{host}-{secrets.token_hex(3)}"


def check_instance_id(value: str) -> str:
    value = value.strip()
    if not value:
        return default_instance_id()
    if not _INSTANCE_ID.fullmatch(value):
        raise ValueError(
            "must be letters, digits and `_.:-` (up to 64), starting with one of the first two"
        )
    return value
