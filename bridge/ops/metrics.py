"""Prometheus metrics, on a registry of the service's own (tests run many services at once).

Counts what an operator alerts on: inbound events by fate, turns by outcome and duration,
presence lines by key, agent exits; conversations by state are read from the projection at
scrape time, so they can never drift from `/runtime-states`.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.ops.projection import Projection

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _ConversationStates(Collector):
    def __init__(self, projection: Projection) -> None:
        self._projection = projection

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "bridge_conversations", "Conversations by execution state.", labels=["state"]
        )
        states = Tally(
            str(conv.get("state", "unknown"))
            for conv in self._projection.snapshot()["conversations"].values()
        )
        for state, count in sorted(states.items()):
            family.add_metric([state], count)
        yield family


class _FeishuApiState(Collector):
    """Feishu as the bridge's posts last found it (the outbox's gate), read at scrape."""

    def __init__(self, state: Callable[[], Mapping[str, float]]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        yield GaugeMetricFamily(
            "bridge_feishu_api_down",
            "1 while Feishu's API is taken to be down (owed posts wait for a probe), else 0.",
            value=state["down"],
        )
        yield GaugeMetricFamily(
            "bridge_feishu_api_down_seconds",
            "How long it has been down (0 while up).",
            value=state["down_seconds"],
        )
        yield CounterMetricFamily(
            "bridge_feishu_api_probes",
            "Calls made while the API was taken to be down (one at a time).",
            value=state["probes"],
        )
        yield CounterMetricFamily(
            "bridge_feishu_api_failed_posts",
            "Post attempts that failed for a reason an outage explains (5xx, 429, timeout).",
            value=state["failures"],
        )


class _AgentUpdatesDropped(Collector):
    """Agent updates never shown: after their prompt's result (late), of an unknown kind, or
    a stdout line over the size cap (oversize); and results that belonged to a cancelled
    turn (cancel tails). Read from the runtime's counters at scrape."""

    def __init__(self, snapshot: Callable[[], Mapping[str, Any]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "bridge_agent_updates_dropped",
            "Agent updates not shown: late (after the prompt's result), of an unknown kind,"
            " or over the line size cap.",
            labels=["reason"],
        )
        snapshot = self._snapshot()
        for reason in ("late", "unknown", "oversize"):
            family.add_metric([reason], float(snapshot.get(f"{reason}_updates", 0)))
        yield family
        yield CounterMetricFamily(
            "bridge_agent_cancel_tails",
            "Prompts an agent answered with a cancelled turn's leftover result (a tail); the"
            " bridge restarted the agent and sent the prompt again.",
            value=float(snapshot.get("cancel_tails", 0)),
        )


class _CallBudget(Collector):
    """The app's Feishu call budget (bridge/feishu/budget.py), read at scrape."""

    def __init__(self, state: Callable[[], Mapping[str, Any]]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        yield GaugeMetricFamily(
            "bridge_feishu_budget_rate",
            "Calls a second the bridge allows itself now to the API most slowed by 429s.",
            value=state["rate"],
        )
        yield GaugeMetricFamily(
            "bridge_feishu_budget_limit",
            "Calls a second the budget is set to (Feishu's limit times the margin).",
            value=state["limit"],
        )
        apis = GaugeMetricFamily(
            "bridge_feishu_budget_api_rate",
            "Calls a second the bridge allows itself now to each Feishu API it has called.",
            labels=["api"],
        )
        for api, rate in state.get("apis", {}).items():
            apis.add_metric([api], rate)
        yield apis
        yield GaugeMetricFamily(
            "bridge_feishu_budget_calls_per_second",
            "Feishu calls a second over the last 10 seconds.",
            value=state["calls_per_second"],
        )
        yield GaugeMetricFamily(
            "bridge_feishu_budget_sends_ready",
            "Message sends the bridge may make at once now: the minute's burst left (under"
            " load near 0, and sends go at the steady pace, sends_per_minute less the burst).",
            value=state["sends_ready"],
        )
        yield CounterMetricFamily(
            "bridge_feishu_budget_rate_limited",
            "429s Feishu answered (each halves the pace until they stop).",
            value=state["rate_limited"],
        )
        lanes = ("waiting", "granted", "waited_seconds")
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "waiting": GaugeMetricFamily(
                "bridge_feishu_budget_waiting",
                "Calls waiting for their turn, by lane (ending, answer, card, hint, refresh).",
                labels=["lane"],
            ),
            "granted": CounterMetricFamily(
                "bridge_feishu_budget_calls",
                "Feishu calls let through, by lane.",
                labels=["lane"],
            ),
            "waited_seconds": CounterMetricFamily(
                "bridge_feishu_budget_wait_seconds",
                "Seconds calls waited for their turn, by lane.",
                labels=["lane"],
            ),
        }
        for name in lanes:
            for lane, value in state[name].items():
                families[name].add_metric([lane], float(value))
            yield families[name]


class Metrics:
    def __init__(
        self,
        projection: Projection,
        *,
        runtime_snapshot: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.inbound = Counter(
            "bridge_inbound_events_total",
            "Inbound Feishu events by what became of them.",
            # accepted, duplicate, ignored, refused, card_action, too_old, foreign, retry_later
            ["fate"],
            registry=self.registry,
        )
        self.turns = Counter(
            "bridge_turns_total",
            "Finished turns by outcome and typed ending (why they ended).",
            ["outcome", "ending"],
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "bridge_turn_duration_seconds",
            "From the user's message to the turn's end signal.",
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600),
            registry=self.registry,
        )
        self.lines = Counter(
            "bridge_status_lines_total",
            "System lines shown to users, by text key.",
            ["key"],
            registry=self.registry,
        )
        self.lines_superseded = Counter(
            "bridge_status_lines_superseded_total",
            "Presence and progress lines not posted: something newer of their turn came first.",
            registry=self.registry,
        )
        self.cards_refused = Counter(
            "bridge_cards_refused_total",
            "Cards Feishu refused: shown as the plain fallback, or not shown at all.",
            ["fate"],
            registry=self.registry,
        )
        self.status_cards = Counter(
            "bridge_status_card_calls_total",
            "Live status card calls, by kind (create, stream, update, settings, patch) and"
            " fallbacks (fallback_patch, fallback_messages).",
            ["call"],
            registry=self.registry,
        )
        self.schedule_runs = Counter(
            "bridge_schedule_runs_total",
            "Due scheduled prompts by fate: ran, or skipped_<reason> (running, waiting_on_user,"
            " finishing, cancelling, unsynced, closed) and tried again at the next idle moment.",
            ["fate"],
            registry=self.registry,
        )
        self.runtime_exits = Counter(
            "bridge_runtime_exits_total",
            "Agent processes that died under a running turn.",
            registry=self.registry,
        )
        self.posts_given_up = Counter(
            "bridge_posts_given_up_total",
            "Posts Feishu never took within the idempotency window (the chat is told).",
            registry=self.registry,
        )
        self.registry.register(_ConversationStates(projection))
        if runtime_snapshot is not None:
            self.registry.register(_AgentUpdatesDropped(runtime_snapshot))

    def watch_feishu(self, state: Callable[[], Mapping[str, float]]) -> None:
        self.registry.register(_FeishuApiState(state))

    def watch_budget(self, state: Callable[[], Mapping[str, Any]]) -> None:
        self.registry.register(_CallBudget(state))

    def render(self) -> bytes:
        return generate_latest(self.registry)
