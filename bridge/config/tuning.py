"""What the bridge fixes or derives instead of reading a setting. `run` always uses the
defaults; in-process callers (tests, benches, the demo) pass other values to
`build_service` or `start_demo` to run in milliseconds or against other limits. Nothing here
is read from the environment: none of it is the operator's to set."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bridge.config.budget import (
    BUDGET_MARGIN,
    FEISHU_CHAT_CALLS_PER_SECOND,
    MINUTE_MARGIN,
    BudgetSection,
    FeishuLimits,
)
from bridge.config.presence import PresenceSection
from bridge.core import Timings


@dataclass(frozen=True)
class Tuning:
    # The least time between two relayed progress lines (None: the core's, 3 s).
    progress_interval_seconds: float | None = None
    # Feishu's limits (None: 1,000 sends a minute × the app's share, BudgetSection).
    feishu_sends_per_minute: float | None = None
    feishu_chat_calls_per_second: float = FEISHU_CHAT_CALLS_PER_SECOND
    feishu_budget_margin: float = BUDGET_MARGIN
    feishu_minute_margin: float = MINUTE_MARGIN
    # Probes while Feishu's API is down (None: from the give-up window, BudgetSection).
    delivery_first_probe_seconds: float | None = None
    delivery_max_probe_seconds: float | None = None

    def timings(self, presence: PresenceSection) -> Timings:
        timings = Timings.from_settings(presence)
        if self.progress_interval_seconds is None:
            return timings
        return replace(timings, progress_interval=self.progress_interval_seconds)

    def limits(self, budget: BudgetSection) -> FeishuLimits:
        sends = self.feishu_sends_per_minute
        return FeishuLimits(
            app_calls_per_second=budget.bridge_feishu_app_calls_per_second,
            sends_per_minute=budget.sends_per_minute if sends is None else sends,
            chat_calls_per_second=self.feishu_chat_calls_per_second,
            total_calls_per_second=budget.bridge_feishu_total_calls_per_second,
            margin=self.feishu_budget_margin,
            minute_margin=self.feishu_minute_margin,
        )

    def probes(self, budget: BudgetSection) -> tuple[float, float]:
        """(first, longest) wait between two probes while Feishu's API is down."""
        first, longest = budget.probe_seconds
        if self.delivery_first_probe_seconds is not None:
            first = self.delivery_first_probe_seconds
        if self.delivery_max_probe_seconds is not None:
            longest = self.delivery_max_probe_seconds
        return first, longest
