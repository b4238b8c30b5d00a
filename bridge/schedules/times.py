"""Wall-clock times of /at and BRIDGE_SCHEDULES, read in a time zone (the core holds no
calendar: it sees seconds since the epoch only)."""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from bridge.core.schedules import CLOCK


def parse_at(text: str, now: float, zone: tzinfo) -> float | None:
    """`HH:MM` (its next occurrence after `now`, in `zone`) or an ISO date-time (`zone`
    unless it names its own offset) → seconds since the epoch; None if unreadable or past."""
    text = text.strip()
    found = CLOCK.match(text)
    if found is not None:
        today = datetime.fromtimestamp(now, zone)
        at = today.replace(
            hour=int(found.group(1)), minute=int(found.group(2)), second=0, microsecond=0
        )
        if at.timestamp() <= now:
            at = (today + timedelta(days=1)).replace(
                hour=at.hour, minute=at.minute, second=0, microsecond=0
            )
        return at.timestamp()
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    stamp = when.timestamp()
    return stamp if stamp > now else None
