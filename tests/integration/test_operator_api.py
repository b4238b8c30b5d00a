"""Operator surfaces over real HTTP: the per-turn timeline and the SSE stream of snapshots."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from bridge.store.port import MessageState
from tests.integration.stack import Stack, running_stack


def base(stack: Stack) -> str:
    return f"http://127.0.0.1:{stack.demo.service.port}"


async def test_turn_timeline_records_what_happened_without_any_text(stack: Stack) -> None:
    sent = await stack.say("tool Read secrets.txt\nsay the secret is 42")
    await stack.wait_text(lambda x: x == "the secret is 42")
    await stack.settled()
    async with httpx.AsyncClient(trust_env=False) as http:
        found = (await http.get(f"{base(stack)}/turns/{sent.message_id}")).json()
        missing = await http.get(f"{base(stack)}/turns/om_nope")
    assert missing.status_code == 404
    assert found["outcome"] == "completed"
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
                states = [f[1]["snapshot"]["state"] for f in frames[1:]]  # type: ignore[index]
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
    assert 'bridge_inbound_events_total{fate="accepted"} 1.0' in body
    assert 'bridge_inbound_events_total{fate="duplicate"} 1.0' in body
    assert 'bridge_turns_total{outcome="completed"} 1.0' in body
    assert 'bridge_status_lines_total{key="presence.ended_empty"} 1.0' in body
    assert "bridge_turn_duration_seconds_count 1.0" in body
    assert 'bridge_conversations{state="idle"} 1.0' in body


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
