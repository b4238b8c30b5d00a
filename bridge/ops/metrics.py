"""Prometheus metrics, on a registry of the service's own (tests run many services at once).

Counts what an operator alerts on: inbound events by fate, turns by outcome and duration,
presence lines by key, agent exits; conversations by state are read from the projection at
scrape time, so they can never drift from `/runtime-states`. Every series carries the `app`
it is of (one bridge serves several Feishu apps; the environment's one app is `default`), so
an operator sees which app is slow, rate limited or cut off from Feishu.
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
    """Conversations by app and state, from the projection's snapshots (each names its app;
    one without is the first app's)."""

    def __init__(self, projection: Projection, first_app: str) -> None:
        self._projection = projection
        self._first_app = first_app

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "bridge_conversations", "Conversations by execution state.", labels=["app", "state"]
        )
        states = Tally(
            (str(conv.get("app") or self._first_app), str(conv.get("state", "unknown")))
            for conv in self._projection.snapshot()["conversations"].values()
        )
        for (app, state), count in sorted(states.items()):
            family.add_metric([app, state], count)
        yield family


# What a collector reads at scrape time, by app.
Watched = Mapping[str, Callable[[], Mapping[str, Any]]]


class _FeishuApiState(Collector):
    """Feishu as each app's posts last found it (its outbox's gate), read at scrape."""

    def __init__(self, gates: Watched) -> None:
        self._gates = gates

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "down": GaugeMetricFamily(
                "bridge_feishu_api_down",
                "1 while Feishu's API is taken to be down (owed posts wait for a probe), else 0.",
                labels=["app"],
            ),
            "down_seconds": GaugeMetricFamily(
                "bridge_feishu_api_down_seconds",
                "How long it has been down (0 while up).",
                labels=["app"],
            ),
            "probes": CounterMetricFamily(
                "bridge_feishu_api_probes",
                "Calls made while the API was taken to be down (one at a time).",
                labels=["app"],
            ),
            "failures": CounterMetricFamily(
                "bridge_feishu_api_failed_posts",
                "Post attempts that failed for a reason an outage explains (5xx, 429, timeout).",
                labels=["app"],
            ),
        }
        for app, read in sorted(self._gates.items()):
            state = read()
            for name, family in families.items():
                family.add_metric([app], float(state[name]))
        yield from families.values()


class _AgentUpdatesDropped(Collector):
    """Agent updates never shown: after their prompt's result (late), of an unknown kind, or
    a stdout line over the size cap (oversize); and results that belonged to a cancelled
    turn (cancel tails). Read from each app's runtime counters at scrape."""

    def __init__(self, runtimes: Watched) -> None:
        self._runtimes = runtimes

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "bridge_agent_updates_dropped",
            "Agent updates not shown: late (after the prompt's result), of an unknown kind,"
            " or over the line size cap.",
            labels=["app", "reason"],
        )
        tails = CounterMetricFamily(
            "bridge_agent_cancel_tails",
            "Prompts an agent answered with a cancelled turn's leftover result (a tail); the"
            " bridge restarted the agent and sent the prompt again.",
            labels=["app"],
        )
        for app, read in sorted(self._runtimes.items()):
            snapshot = read()
            for reason in ("late", "unknown", "oversize"):
                family.add_metric([app, reason], float(snapshot.get(f"{reason}_updates", 0)))
            tails.add_metric([app], float(snapshot.get("cancel_tails", 0)))
        yield family
        yield tails


class _CallBudget(Collector):
    """Each app's Feishu call budget (bridge/feishu/budget.py; Feishu meters per app), read
    at scrape."""

    def __init__(self, budgets: Watched) -> None:
        self._budgets = budgets

    def collect(self) -> Iterator[Metric]:
        gauges = {
            "rate": "Calls a second the bridge allows itself now to the API most slowed by 429s.",
            "limit": "Calls a second the budget is set to (Feishu's limit times the margin).",
            "calls_per_second": "Feishu calls a second over the last 10 seconds.",
            "sends_ready": "Message sends the bridge may make at once now: the minute's burst"
            " left (under load near 0, and sends go at the steady pace, sends_per_minute less"
            " the burst).",
        }
        singles: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            name: GaugeMetricFamily(f"bridge_feishu_budget_{name}", text, labels=["app"])
            for name, text in gauges.items()
        }
        singles["rate_limited"] = CounterMetricFamily(
            "bridge_feishu_budget_rate_limited",
            "429s Feishu answered (each halves the pace until they stop).",
            labels=["app"],
        )
        apis = GaugeMetricFamily(
            "bridge_feishu_budget_api_rate",
            "Calls a second the bridge allows itself now to each Feishu API it has called.",
            labels=["app", "api"],
        )
        held = GaugeMetricFamily(
            "bridge_feishu_budget_held",
            "Calls to each Feishu API on their way or answered within the last second (a"
            " slow Feishu holds more, and the budget slows to keep them under the limit).",
            labels=["app", "api"],
        )
        lanes: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "waiting": GaugeMetricFamily(
                "bridge_feishu_budget_waiting",
                "Calls waiting for their turn, by lane (ending, answer, card, hint, refresh).",
                labels=["app", "lane"],
            ),
            "granted": CounterMetricFamily(
                "bridge_feishu_budget_calls",
                "Feishu calls let through, by lane.",
                labels=["app", "lane"],
            ),
            "waited_seconds": CounterMetricFamily(
                "bridge_feishu_budget_wait_seconds",
                "Seconds calls waited for their turn, by lane.",
                labels=["app", "lane"],
            ),
        }
        for app, read in sorted(self._budgets.items()):
            state = read()
            for name, family in singles.items():
                family.add_metric([app], float(state[name]))
            for api, rate in state.get("apis", {}).items():
                apis.add_metric([app, api], rate)
            for api, count in state.get("held", {}).items():
                held.add_metric([app, api], float(count))
            for name, family in lanes.items():
                for lane, value in state[name].items():
                    family.add_metric([app, lane], float(value))
        yield from (singles[n] for n in ("rate", "limit"))
        yield apis
        yield held
        yield from (singles[n] for n in ("calls_per_second", "sends_ready", "rate_limited"))
        yield from lanes.values()


class MetricsRegistry:
    """The service's registry and every series in it, each labelled with the `app` it is of
    (an app's name: `default` for the one app of the environment settings). Each app's parts
    count through their own `Metrics` (`for_app`); the states read at scrape time (the
    delivery gate, the call budget, the agents' counters) are watched per app."""

    def __init__(self, projection: Projection, *, first_app: str = "default") -> None:
        self.registry = CollectorRegistry()
        self.inbound = Counter(
            "bridge_inbound_events_total",
            "Inbound Feishu events by what became of them.",
            # accepted, duplicate, ignored, refused, card_action, too_old, foreign, retry_later
            ["app", "fate"],
            registry=self.registry,
        )
        self.turns = Counter(
            "bridge_turns_total",
            "Finished turns by outcome and typed ending (why they ended).",
            ["app", "outcome", "ending"],
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "bridge_turn_duration_seconds",
            "From the user's message to the turn's end signal.",
            ["app"],
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600),
            registry=self.registry,
        )
        self.lines = Counter(
            "bridge_status_lines_total",
            "System lines shown to users, by text key.",
            ["app", "key"],
            registry=self.registry,
        )
        self.lines_superseded = Counter(
            "bridge_status_lines_superseded_total",
            "Presence and progress lines not posted: something newer of their turn came first.",
            ["app"],
            registry=self.registry,
        )
        self.cards_refused = Counter(
            "bridge_cards_refused_total",
            "Cards Feishu refused: shown as the plain fallback, or not shown at all.",
            ["app", "fate"],
            registry=self.registry,
        )
        self.status_cards = Counter(
            "bridge_status_card_calls_total",
            "Live status card calls, by kind (create, stream, update, settings, patch) and"
            " fallbacks (fallback_patch, fallback_messages).",
            ["app", "call"],
            registry=self.registry,
        )
        self.schedule_runs = Counter(
            "bridge_schedule_runs_total",
            "Due scheduled prompts by fate: ran, or skipped_<reason> (running, waiting_on_user,"
            " finishing, cancelling, unsynced, closed) and tried again at the next idle moment.",
            ["app", "fate"],
            registry=self.registry,
        )
        self.runtime_exits = Counter(
            "bridge_runtime_exits_total",
            "Agent processes that died under a running turn.",
            ["app"],
            registry=self.registry,
        )
        self.posts_given_up = Counter(
            "bridge_posts_given_up_total",
            "Posts Feishu never took within the idempotency window (the chat is told).",
            ["app"],
            registry=self.registry,
        )
        self.gates: dict[str, Callable[[], Mapping[str, float]]] = {}
        self.budgets: dict[str, Callable[[], Mapping[str, Any]]] = {}
        self.runtimes: dict[str, Callable[[], Mapping[str, Any]]] = {}
        self.registry.register(_ConversationStates(projection, first_app))
        self.registry.register(_FeishuApiState(self.gates))
        self.registry.register(_CallBudget(self.budgets))
        self.registry.register(_AgentUpdatesDropped(self.runtimes))

    def for_app(self, app: str) -> Metrics:
        """What `app`'s engine, receiver and scheduler count with."""
        return Metrics(self, app)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _AppCounter:
    """One app's share of a counter labelled by `app` first: `labels` takes the rest."""

    def __init__(self, counter: Counter, app: str) -> None:
        self._counter, self._app = counter, app

    def labels(self, *values: str) -> Counter:
        return self._counter.labels(self._app, *values)

    def inc(self, amount: float = 1.0) -> None:
        self._counter.labels(self._app).inc(amount)


class Metrics:
    """One app's figures (`MetricsRegistry.for_app`): the counters its parts increment,
    each series labelled with the app, and the states it has read at scrape time."""

    def __init__(self, registry: MetricsRegistry, app: str) -> None:
        self.app = app
        self._registry = registry
        self.inbound = _AppCounter(registry.inbound, app)
        self.turns = _AppCounter(registry.turns, app)
        self.turn_seconds: Histogram = registry.turn_seconds.labels(app)
        self.lines = _AppCounter(registry.lines, app)
        self.lines_superseded = _AppCounter(registry.lines_superseded, app)
        self.cards_refused = _AppCounter(registry.cards_refused, app)
        self.status_cards = _AppCounter(registry.status_cards, app)
        self.schedule_runs = _AppCounter(registry.schedule_runs, app)
        self.runtime_exits = _AppCounter(registry.runtime_exits, app)
        self.posts_given_up = _AppCounter(registry.posts_given_up, app)
        for plain in (registry.lines_superseded, registry.runtime_exits, registry.posts_given_up):
            plain.labels(app)  # shown at 0 from the start, as an unlabelled counter is

    def watch_feishu(self, state: Callable[[], Mapping[str, float]]) -> None:
        """The app's delivery gate (Feishu's API as its posts find it)."""
        self._registry.gates[self.app] = state

    def watch_budget(self, state: Callable[[], Mapping[str, Any]]) -> None:
        """The app's Feishu call budget."""
        self._registry.budgets[self.app] = state

    def watch_runtime(self, snapshot: Callable[[], Mapping[str, Any]]) -> None:
        """The app's agents' counters (updates dropped, cancel tails)."""
        self._registry.runtimes[self.app] = snapshot
