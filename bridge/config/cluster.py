"""Several instances on one PostgreSQL database (BRIDGE_DATABASE_URL): each instance's name,
and how long its hold on a conversation lasts unrenewed."""

from __future__ import annotations

import re
import secrets
import socket
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field

from bridge.config.base import Section, clock, why

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


class ClusterSection(Section):
    """An instance's name and its leases (one instance alone needs neither)."""

    title: ClassVar[str] = "Several instances"

    bridge_lease_seconds: float = Field(
        default=15.0,
        gt=0,
        description=LEASE_HELP,
        json_schema_extra=clock(
            "Lower it for a faster takeover when an instance dies (more database writes);"
            " raise it when the database or the clocks are slow."
        ),
    )
    bridge_instance_id: Annotated[str, AfterValidator(check_instance_id)] = Field(
        default_factory=default_instance_id,
        description=INSTANCE_ID_HELP,
        json_schema_extra=why(
            "On each instance of a cluster: a restart under the same name takes its own"
            " conversations back at once."
        ),
    )
