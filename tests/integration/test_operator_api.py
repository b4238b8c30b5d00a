"""Operator surfaces over real HTTP, on the operator listener: the per-turn timeline, the SSE
stream of snapshots, metrics, and who may read them (token, client id, access log)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import httpx
import pytest

from bridge.app import main
from bridge.config.checks import UnsafeConfiguration
from bridge.ops.cluster_view import instances_view
from bridge.store.port import MessageState
from tests.integration.stack import Stack, running_stack


def base(stack: Stack) -> str:
    return stack.ops_url


async def test_turn_timeline_records_what_happened_without_any_text(stack: Stack) -> None:
    sent = await stack.say("tool Read secrets.txt\nsay the secret is 42")
    await stack.wait_text(lambda x: x == "the secret is 42")
    await stack.settled()
    async with httpx.AsyncClient(trust_env=False) as http:
        found = (await http.get(f"{base(stack)}/turns/{sent.message_id}")).json()
        missing = await http.get(f"{base(stack)}/turns/om_nope")
    assert missing.status_code == 404
    assert found["outcome"] == "completed"
    assert found["ending"] == "completed"  # the typed ending, read back from the trace
    kinds = [e["kind"] for e in found["trace"]]
    assert kinds[:3] == ["start", "prompt_sent", "tool"]
    assert kinds[-3:] == ["turn_ended", "end", "terminal"]
    assert "the secret is 42" not in json.dumps(found)
    assert "Read secrets.txt" in json.dumps(found)  # a tool title is not the prompt


async def test_events_stream_sends_snapshot_then_versioned_changes(stack: Stack) -> None:
    frames: list[tuple[str, dict[str, object]]] = []
    async with (
        httpx.AsyncClient(trust_env=False, timeout=10.0) as http,
        http.stream("GET", f"{base(stack)}/events") as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        event = ""
        sent = False
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                frames.append((event, json.loads(line.removeprefix("data: "))))
                if not sent:
                    await stack.say("hello")
                    sent = True
                states = [
                    f[1]["snapshot"]["state"]  # type: ignore[index]
                    for f in frames[1:]
                    if f[0] == "runtime_state"
                ]
                if "idle" in states and len(states) >= 2:
                    break
    assert frames[0][0] == "snapshot"
    changes = [data for kind, data in frames[1:] if kind == "runtime_state"]
    revisions = [c["revision"] for c in changes]
    assert revisions == sorted(revisions)
    assert len(set(revisions)) == len(revisions)
    assert {c["projection_epoch"] for c in changes} == {frames[0][1]["projection_epoch"]}
    assert changes[-1]["snapshot"]["state"] == "idle"  # type: ignore[index]


async def test_metrics_count_turns_lines_and_duplicates(stack: Stack) -> None:
    sent = await stack.say("silent")
    await stack.wait_texts(1)
    await stack.settled()
    await stack.emu.redeliver(sent.event_id)
    await stack.settled()
    async with httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(f"{base(stack)}/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    body = response.text
    # Every series is of an app: the environment's one app is `default`.
    assert 'bridge_inbound_events_total{app="default",fate="accepted"} 1.0' in body
    assert 'bridge_inbound_events_total{app="default",fate="duplicate"} 1.0' in body
    assert 'bridge_turns_total{app="default",ending="completed",outcome="completed"} 1.0' in body
    assert 'bridge_status_lines_total{app="default",key="presence.ended_empty"} 1.0' in body
    assert 'bridge_turn_duration_seconds_count{app="default"} 1.0' in body
    assert 'bridge_conversations{app="default",state="idle"} 1.0' in body
    assert 'bridge_feishu_api_down{app="default"} 0.0' in body
    assert 'bridge_feishu_budget_rate_limited_total{app="default"} 0.0' in body
    assert 'bridge_runtime_exits_total{app="default"} 0.0' in body


async def test_old_records_are_pruned_at_start(tmp_path: Path) -> None:
    """Retention: a journaled prompt older than the retention is gone after a (re)start."""
    from bridge.store.sqlite import SqliteStore

    data = tmp_path / "bridge"
    data.mkdir()
    async with SqliteStore(data / "bridge.sqlite3") as store:
        await store.claim_event("ev-old", "om_old", now=1000.0)
        await store.journal_message("oc_x", "om_old", "ou_x", "oc_x", "old prompt", now=1000.0)
        await store.set_message_state("om_old", MessageState.DONE, now=1000.0)
    async with running_stack(data) as stack:
        await stack.settled()
        assert await stack.demo.service.store.message("om_old") is None
        assert await stack.demo.service.store.claim_event("ev-old", "om_old", now=2000.0)


# -- the operator listener: its own port, a bearer token, client identity, an access log ----

TOKEN = "ops-t0ken-4f9c2e-never-logged"
OPERATOR_ROUTES = ["/status", "/runtime-states", "/events", "/turns/om_x", "/metrics"]


async def test_the_feishu_port_serves_no_operator_route(stack: Stack) -> None:
    async with httpx.AsyncClient(trust_env=False) as http:
        for path in OPERATOR_ROUTES:
            response = await http.get(f"{stack.feishu_url}{path}")
            assert response.status_code == 404, path
        assert (await http.get(f"{stack.feishu_url}/healthz")).status_code == 200
        assert (await http.get(f"{stack.ops_url}/healthz")).status_code == 200
        assert (await http.get(f"{stack.ops_url}/status")).status_code == 200  # no token set
    assert stack.demo.service.ops_port != stack.demo.service.port


async def test_a_token_guards_every_operator_route_but_healthz(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.ops.access")
    async with (
        running_stack(tmp_path / "bridge", settings={"bridge_ops_token": TOKEN}) as stack,
        httpx.AsyncClient(trust_env=False, timeout=5.0) as http,
    ):
        for path in OPERATOR_ROUTES:
            missing = await http.get(f"{stack.ops_url}{path}")
            wrong = await http.get(
                f"{stack.ops_url}{path}", headers={"Authorization": f"Bearer {TOKEN}x"}
            )
            assert (missing.status_code, wrong.status_code) == (401, 401), path
            assert missing.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await http.get(f"{stack.ops_url}/healthz")).status_code == 200
        good = {"Authorization": f"Bearer {TOKEN}", "X-Bridge-Client-Id": "dash-1"}
        status = await http.get(f"{stack.ops_url}/status", headers=good)
        assert status.status_code == 200
        assert status.json()["ready"] is True
        # The one app's health, under its name, as every app of a file has it.
        default = status.json()["apps"]["default"]
        assert (default["healthy"], default["problem"], default["long_connection"]) == (
            True,
            None,
            None,  # webhook mode
        )
        metrics = await http.get(f"{stack.ops_url}/metrics", headers=good)
        assert metrics.status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "bridge.ops.access"]
    assert "GET /status 401 client=-" in lines
    assert "GET /status 200 client=dash-1" in lines
    assert "GET /healthz 200 client=-" in lines
    assert TOKEN not in caplog.text


@pytest.mark.parametrize("client_id", ["two words", "x" * 129, "", "ünïcode".encode(), "a/b"])
async def test_a_malformed_client_id_is_a_400_that_says_why(
    stack: Stack, client_id: str | bytes
) -> None:
    async with httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(
            f"{stack.ops_url}/status", headers={"X-Bridge-Client-Id": client_id}
        )
    assert response.status_code == 400
    assert response.json() == {
        "error": "invalid X-Bridge-Client-Id: use 1 to 128 characters from A-Z a-z 0-9 . _ : -"
    }


async def test_an_events_subscriber_is_known_by_its_client_id(stack: Stack) -> None:
    async with (
        httpx.AsyncClient(trust_env=False, timeout=10.0) as http,
        http.stream(
            "GET", f"{stack.ops_url}/events", headers={"X-Bridge-Client-Id": "wall.display:7"}
        ) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):  # the first snapshot: subscribed
                break
        status = await http.get(
            f"{stack.ops_url}/status", headers={"X-Bridge-Client-Id": "x" * 128}
        )
    assert status.status_code == 200
    assert status.json()["event_subscribers"] == ["wall.display:7"]


async def test_status_command_reaches_the_ops_listener_with_the_token_and_its_id(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.ops.access")
    async with running_stack(tmp_path / "bridge", settings={"bridge_ops_token": TOKEN}) as stack:
        monkeypatch.setenv("BRIDGE_OPS_PORT", str(stack.demo.service.ops_port))
        assert await asyncio.to_thread(main, ["status"]) == 1  # no token in the environment
        assert json.loads(capsys.readouterr().out) == {"error": "missing or wrong bearer token"}
        monkeypatch.setenv("BRIDGE_OPS_TOKEN", TOKEN)
        assert await asyncio.to_thread(main, ["status"]) == 0  # default URL: the ops listener
        assert json.loads(capsys.readouterr().out)["ready"] is True
    lines = [r.getMessage() for r in caplog.records if r.name == "bridge.ops.access"]
    assert lines[-2:] == [
        "GET /status 401 client=feishu-bridge-status",
        "GET /status 200 client=feishu-bridge-status",
    ]


async def test_the_bridge_refuses_an_operator_api_off_loopback_without_a_token(
    tmp_path: Path,
) -> None:
    with pytest.raises(UnsafeConfiguration) as refused:
        async with running_stack(tmp_path / "bridge", settings={"bridge_ops_host": "0.0.0.0"}):
            pass
    assert [p.variable for p in refused.value.problems] == ["BRIDGE_OPS_TOKEN"]


async def test_each_instance_says_who_it_is_and_all_of_them_are_read_from_the_database(
    tmp_path: Path,
) -> None:
    settings = {"bridge_instance_id": "bridge-a", "bridge_lease_seconds": 30.0}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        service = stack.demo.service
        async with httpx.AsyncClient(trust_env=False) as http:
            states = (await http.get(f"{stack.ops_url}/runtime-states")).json()
        assert states["instance_id"] == "bridge-a"
        assert states["projection_epoch"] == service.projection.epoch
        # A second instance on the same database, its last heartbeat long ago.
        await service.store.heartbeat("bridge-b", "e-b", service.clock() - 100, "", {})
        view = await instances_view(service.settings, now=service.clock())
    listed = {i["instance_id"]: i for i in view["instances"]}
    assert set(listed) == {"bridge-a", "bridge-b"}
    assert listed["bridge-a"]["epoch"] == service.projection.epoch
    assert listed["bridge-a"]["alive"] is True
    assert listed["bridge-a"]["ops_url"] == f"http://127.0.0.1:{service.ops_port}"
    assert listed["bridge-a"]["conversations"] == 0
    assert listed["bridge-b"]["alive"] is False  # silent for longer than a lease
