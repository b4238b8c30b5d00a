"""The Feishu call budget's settings (bridge/feishu/budget.py; config.py is full). Feishu
meters each API of an app on its own, message sends also by the minute and to one chat;
docs/scaling.md cites the figures."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FeishuBudgetSettings(BaseModel):
    bridge_feishu_app_calls_per_second: float = Field(
        default=50.0,
        gt=0,
        description="Feishu's limit on the app's calls a second to one API (each API is"
        " metered on its own; docs/scaling.md).",
    )
    bridge_feishu_sends_per_minute: float = Field(
        default=1000.0,
        gt=0,
        description="Feishu's limit on the app's message sends (and replies) a minute (1000).",
    )
    bridge_feishu_chat_calls_per_second: float = Field(
        default=5.0,
        gt=0,
        description="Feishu's limit on message sends a second to one chat (5).",
    )
    bridge_feishu_total_calls_per_second: float = Field(
        default=0.0,
        ge=0,
        description="A cap on the app's calls a second to all APIs together, for a tenant or"
        " a gateway that meters the app as a whole (0: none beyond each API's limit).",
    )
    bridge_feishu_budget_margin: float = Field(
        default=0.8,
        gt=0,
        le=1.0,
        description="The share of each Feishu limit the bridge paces itself to (a 429 still"
        " shrinks the pace until the 429s stop).",
    )
