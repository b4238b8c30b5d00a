"""How the bridge spends Feishu's rate limits (bridge/feishu/budget.py paces every call to
them) and how long it keeps trying a post Feishu does not take.

Feishu's published limits are constants here, not settings: each API of an app 50 calls a
second, message sends 1,000 a minute, 5 sends a second to one chat (docs/scaling.md cites
them). The operator sets the app's share this instance may spend (BRIDGE_FEISHU_APP_CALLS_
PER_SECOND); the minute's sends follow that share. The probes while Feishu's API is down
follow the give-up window, so a short window is probed as often as a long one is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from bridge.config.base import Section, clock, why

FEISHU_APP_CALLS_PER_SECOND = 50.0  # each API, per app
FEISHU_SENDS_PER_MINUTE = 1000.0  # message sends and replies, per app
FEISHU_CHAT_CALLS_PER_SECOND = 5.0  # message sends to one chat
# The share of each limit the bridge paces itself to: room for clock skew and for the calls
# Feishu counts that the bridge does not see (a 429 still shrinks the pace until they stop).
BUDGET_MARGIN = 0.8
# The share of a minute's limit: the budget counts a minute's calls exactly (the grants of
# the last 60 s), so against a minute the margin covers the calls it does not see, a
# second's jitter in when calls arrive (40 at most), and a restarted bridge's guess at what
# its predecessor spent since its last record (bridge/feishu/budget_record.py).
MINUTE_MARGIN = 0.9
FIRST_PROBE_SECONDS = 1.0  # after the failure that showed Feishu's API down
MAX_PROBE_SECONDS = 15.0  # the longest wait between two probes


@dataclass(frozen=True)
class FeishuLimits:
    """What the call budget paces to (bridge/feishu/budget.py), before its margin."""

    app_calls_per_second: float
    sends_per_minute: float
    chat_calls_per_second: float
    total_calls_per_second: float
    margin: float
    minute_margin: float


class BudgetSection(Section):
    """This instance's share of Feishu's limits, and the delivery of posts while Feishu's
    API is down."""

    title: ClassVar[str] = "Feishu's limits and delivery"

    bridge_feishu_app_calls_per_second: float = Field(
        default=FEISHU_APP_CALLS_PER_SECOND,
        gt=0,
        description="Feishu's limit on the app's calls a second to one API (each API is"
        " metered on its own; docs/scaling.md), as this instance paces itself to it: on a"
        " cluster, this instance's share. The minute's message sends follow it: Feishu's"
        " 1,000 × its share of 50, at most 1,000.",
        json_schema_extra=why(
            "This instance's share when several instances or other programs use the same app"
            " (two instances: 25 each); a plan with a higher limit per API may raise it."
        ),
    )
    bridge_feishu_total_calls_per_second: float = Field(
        default=0.0,
        ge=0,
        description="A cap on the app's calls a second to all APIs together, for a tenant or"
        " a gateway that meters the app as a whole (0: none beyond each API's limit).",
        json_schema_extra=why(
            "Only when something meters the app's calls as a whole (a gateway, a tenant's"
            " plan): its figure, or this instance's share of it."
        ),
    )
    bridge_delivery_give_up_seconds: float = Field(
        default=3600.0,
        gt=0,
        le=3600.0,
        description="A post Feishu has not taken after this long is given up and its chat told"
        " (at most an hour: Feishu's uuid de-duplication window). While Feishu's API is"
        " down, owed posts wait for a probe instead of retrying on their own: the first a"
        " sixtieth of this after the failure (at most 1 s), then doubling up to a quarter of"
        " it (at most 15 s).",
        json_schema_extra=clock(
            "Lower it when an answer that comes late is worse than none (the chat is told instead)."
        ),
    )

    @property
    def sends_per_minute(self) -> float:
        """Feishu's minute of sends, in the share of the app this instance may spend."""
        share = min(1.0, self.bridge_feishu_app_calls_per_second / FEISHU_APP_CALLS_PER_SECOND)
        return FEISHU_SENDS_PER_MINUTE * share

    @property
    def probe_seconds(self) -> tuple[float, float]:
        """(first, longest) wait between probes while Feishu's API is down: four probes at
        least fit in the give-up window, and the product's hour gets 1 s and 15 s."""
        window = self.bridge_delivery_give_up_seconds
        return min(FIRST_PROBE_SECONDS, window / 60), min(MAX_PROBE_SECONDS, window / 4)
