"""What is wrong with one Feishu app, said for `/status` (`apps.<name>.problem`) and the
console: its bot identity it could not fetch, its long connection that failed or was lost,
its Feishu API taken to be down (the delivery gate), its call budget slowed by 429s. Read
from the app's parts as they are now; never a secret (an error text that holds one of the
app's secrets has it starred out)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AppFacts:
    """One app's health as its parts report it (service.py reads them)."""

    started: bool  # its start ran (before it, nothing was tried yet)
    bot_open_id: str | None
    identity_error: str | None  # why its last try to fetch the bot's identity failed
    long_connection: str | None  # the state's name; None in webhook mode
    long_connection_error: str | None
    gate: Mapping[str, float]  # the delivery gate's `state()`
    budget: Mapping[str, Any] | None  # the call budget's `state()`


def problems(facts: AppFacts, *, now: float) -> list[str]:
    """Each thing wrong with the app, in words an operator acts on (empty: healthy).
    `now`: the wall clock, to say since when its API is down."""
    found: list[str] = []
    if facts.started and facts.bot_open_id is None:
        why = f": {facts.identity_error}" if facts.identity_error else ""
        found.append(
            "cannot fetch the bot's identity (a wrong app id or secret, or the app lacks the"
            f" bot capability or its scope){why}; group @-mentions are not recognised"
        )
    if facts.long_connection == "failed":
        why = f": {facts.long_connection_error}" if facts.long_connection_error else ""
        found.append(
            "its long connection failed and is not retried (Feishu refused it: check the app"
            f" id and secret and the event subscription){why}; no event comes in"
        )
    elif facts.long_connection == "reconnecting":
        found.append("its long connection is lost; reconnecting")
    gate = facts.gate
    if gate.get("down"):
        seconds = float(gate.get("down_seconds", 0.0))
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now - seconds))
        found.append(
            f"Feishu's API is taken to be down for this app since {since} ({seconds:.0f} s,"
            f" {gate.get('failures', 0):.0f} failed posts): its posts are owed and go out, in"
            " order, when it answers again"
        )
    budget = facts.budget
    if budget and float(budget["rate"]) < float(budget["limit"]):
        found.append(
            f"rate limited by Feishu (429s: {budget['rate_limited']}): calls slowed to"
            f" {budget['rate']}/s of {budget['limit']}/s until they stop"
        )
    return found


def without_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """`text` (an error's) with each of `secrets` starred out, at most 300 characters."""
    for value in secrets:
        if value:
            text = text.replace(value, "***")
    return text[:300]


def health(facts: AppFacts, *, now: float) -> dict[str, Any]:
    """`problem` (None when healthy, else every problem, `; `-joined) and `healthy`."""
    found = problems(facts, now=now)
    return {"healthy": not found, "problem": "; ".join(found) or None}
