"""/metrics labelled by app: each app's parts count through their own `Metrics`, and the
states read at scrape (the delivery gate, the call budget, the agents' counters) are each
app's own; conversations are counted by the app their snapshot names."""

from __future__ import annotations

from typing import Any

from bridge.ops.metrics import MetricsRegistry
from bridge.ops.projection import Projection


def _budget(rate: float, limited: int, waiting: int) -> dict[str, Any]:
    lanes = ("ending", "answer")
    return {
        "rate": rate,
        "limit": 40.0,
        "apis": {"send": rate},
        "calls_per_second": 1.5,
        "sends_ready": 3.0,
        "rate_limited": limited,
        "waiting": {lane: waiting for lane in lanes},
        "granted": {lane: 7 for lane in lanes},
        "waited_seconds": {lane: 0.25 for lane in lanes},
    }


def _lines(registry: MetricsRegistry) -> set[str]:
    return set(registry.render().decode().splitlines())


def test_every_series_names_its_app() -> None:
    projection = Projection("epoch", lambda: 100.0)
    registry = MetricsRegistry(projection, first_app="claude")
    claude, codex = registry.for_app("claude"), registry.for_app("codex")
    claude.inbound.labels("accepted").inc()
    codex.inbound.labels("accepted").inc()
    codex.inbound.labels("duplicate").inc()
    codex.turns.labels("completed", "completed").inc()
    codex.turn_seconds.observe(2.0)
    claude.runtime_exits.inc()
    claude.watch_feishu(lambda: {"down": 1.0, "down_seconds": 60.0, "probes": 3, "failures": 9})
    codex.watch_feishu(lambda: {"down": 0.0, "down_seconds": 0.0, "probes": 0, "failures": 0})
    claude.watch_budget(lambda: _budget(5.0, 4, 2))
    codex.watch_budget(lambda: _budget(40.0, 0, 0))
    codex.watch_runtime(lambda: {"late_updates": 2, "cancel_tails": 1})
    projection.publish("oc_a", {"state": "idle"})  # a snapshot without an app: the first's
    projection.publish("codex/oc_a", {"state": "streaming", "app": "codex"})
    projection.publish("codex/oc_b", {"state": "streaming", "app": "codex"})

    lines = _lines(registry)
    for line in (
        'bridge_inbound_events_total{app="claude",fate="accepted"} 1.0',
        'bridge_inbound_events_total{app="codex",fate="accepted"} 1.0',
        'bridge_inbound_events_total{app="codex",fate="duplicate"} 1.0',
        'bridge_turns_total{app="codex",ending="completed",outcome="completed"} 1.0',
        'bridge_turn_duration_seconds_count{app="codex"} 1.0',
        'bridge_turn_duration_seconds_count{app="claude"} 0.0',
        'bridge_runtime_exits_total{app="claude"} 1.0',
        'bridge_runtime_exits_total{app="codex"} 0.0',
        'bridge_posts_given_up_total{app="codex"} 0.0',
        'bridge_feishu_api_down{app="claude"} 1.0',
        'bridge_feishu_api_down_seconds{app="claude"} 60.0',
        'bridge_feishu_api_failed_posts_total{app="claude"} 9.0',
        'bridge_feishu_api_down{app="codex"} 0.0',
        'bridge_feishu_budget_rate{app="claude"} 5.0',
        'bridge_feishu_budget_rate{app="codex"} 40.0',
        'bridge_feishu_budget_rate_limited_total{app="claude"} 4.0',
        'bridge_feishu_budget_rate_limited_total{app="codex"} 0.0',
        'bridge_feishu_budget_api_rate{api="send",app="claude"} 5.0',
        'bridge_feishu_budget_waiting{app="claude",lane="answer"} 2.0',
        'bridge_feishu_budget_waiting{app="codex",lane="answer"} 0.0',
        'bridge_feishu_budget_calls_total{app="codex",lane="ending"} 7.0',
        'bridge_agent_updates_dropped_total{app="codex",reason="late"} 2.0',
        'bridge_agent_cancel_tails_total{app="codex"} 1.0',
        'bridge_conversations{app="claude",state="idle"} 1.0',
        'bridge_conversations{app="codex",state="streaming"} 2.0',
    ):
        assert line in lines, line
    # Nothing counted for one app shows up under another.
    assert not any(
        line.startswith('bridge_inbound_events_total{app="claude",fate="dup') for line in lines
    )
    assert not any("bridge_agent_cancel_tails_total" in line and "claude" in line for line in lines)


def test_one_app_keeps_the_metric_names() -> None:
    """The single app's series: the names they always had, labelled app="default"."""
    registry = MetricsRegistry(Projection("epoch", lambda: 0.0))
    app = registry.for_app("default")
    app.lines.labels("presence.ended_empty").inc()
    app.lines_superseded.inc(2)
    app.status_cards.labels("create").inc()
    app.schedule_runs.labels("ran").inc()
    app.cards_refused.labels("fallback").inc()
    app.posts_given_up.inc()
    lines = _lines(registry)
    for line in (
        'bridge_status_lines_total{app="default",key="presence.ended_empty"} 1.0',
        'bridge_status_lines_superseded_total{app="default"} 2.0',
        'bridge_status_card_calls_total{app="default",call="create"} 1.0',
        'bridge_schedule_runs_total{app="default",fate="ran"} 1.0',
        'bridge_cards_refused_total{app="default",fate="fallback"} 1.0',
        'bridge_posts_given_up_total{app="default"} 1.0',
    ):
        assert line in lines, line
