"""How the bridge spends Feishu's rate limits (bridge/feishu/budget.py paces every call to
them) and how long it keeps trying a post Feishu does not take. Feishu meters each API of
an app on its own, message sends also by the minute and to one chat; docs/scaling.md cites
the figures."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from bridge.config.base import Section, why


class BudgetSection(Section):
    """Feishu's limits as the bridge paces itself to them, and the delivery of posts while
    Feishu's API is down."""

    title: ClassVar[str] = "Feishu's limits and delivery"

    bridge_feishu_app_calls_per_second: float = Field(
        default=50.0,
        gt=0,
        description="Feishu's limit on the app's calls a second to one API (each API is"
        " metered on its own; docs/scaling.md).",
        json_schema_extra=why(
            "This instance's share when several instances or other programs use the same app"
            " (two instances: 25 each); or the figure of a plan that gives another limit."
        ),
    )
    bridge_feishu_sends_per_minute: float = Field(
        default=1000.0,
        gt=0,
        description="Feishu's limit on the app's message sends (and replies) a minute (1000).",
        json_schema_extra=why("This instance's share of the app's minute."),
    )
    bridge_feishu_chat_calls_per_second: float = Field(
        default=5.0,
        gt=0,
        description="Feishu's limit on message sends a second to one chat (5).",
        json_schema_extra=why("Only if Feishu changes its limit."),
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
    bridge_feishu_budget_margin: float = Field(
        default=0.8,
        gt=0,
        le=1.0,
        description="The share of each Feishu limit the bridge paces itself to (a 429 still"
        " shrinks the pace until the 429s stop).",
        json_schema_extra=why("Lower it when other programs use the same app."),
    )
    bridge_delivery_first_probe_seconds: float = Field(
        default=1.0,
        gt=0,
        description="When Feishu's API fails (5xx, 429, timeout), the wait before the first"
        " probe; owed posts wait for it instead of retrying on their own.",
        json_schema_extra=why("Rarely: tests shorten it."),
    )
    bridge_delivery_max_probe_seconds: float = Field(
        default=15.0,
        gt=0,
        description="The longest wait between two probes while it is down.",
        json_schema_extra=why("Rarely: tests shorten it."),
    )
    bridge_delivery_give_up_seconds: float = Field(
        default=3600.0,
        gt=0,
        le=3600.0,
        description="A post Feishu has not taken after this long is given up and its chat told"
        " (at most an hour: Feishu's uuid de-duplication window).",
        json_schema_extra=why(
            "Lower it when an answer that comes late is worse than none (the chat is told instead)."
        ),
    )
