"""Issue 13 (seeds 002, 003): the `/events` stream and session metadata on the real operator
listener, over real sockets: `Last-Event-ID` replay from the ring, eviction of a subscriber
that fell behind, a conversation's session closed or lost, and `/sessions`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.integration.stack import Stack, running_stack

TOKEN = "ops-events-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass(frozen=True)
class Sse:
    event: str
    data: dict[str, Any]
    id: str | None


class Reader:
    """The frames of one `/events` response, as they come."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self, within: float = 10.0) -> Sse | None:
        """The next frame; None once the server ended the stream."""
        event, data, frame_id = "message", "", None
        async with asyncio.timeout(within):
            async for line in self._lines:
                if line.startswith("id: "):
                    frame_id = line.removeprefix("id: ")
                elif line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    data = line.removeprefix("data: ")
                elif line == "" and data:
                    return Sse(event, json.loads(data), frame_id)
        return None

    async def until(self, wanted: str, within: float = 10.0) -> Sse:
        while True:
            frame = await self.next(within)
            assert frame is not None, f"the stream ended before a {wanted} frame"
            if frame.event == wanted:
                return frame


@asynccontextmanager
async def events(
    stack: Stack, last_event_id: str | None = None, headers: dict[str, str] | None = None
) -> AsyncIterator[Reader]:
    sent = dict(headers or {})
    if last_event_id is not None:
        sent["Last-Event-ID"] = last_event_id
    async with (
        httpx.AsyncClient(trust_env=False, timeout=10.0) as http,
        http.stream("GET", f"{stack.ops_url}/events", headers=sent) as response,
    ):
        assert response.status_code == 200
        yield Reader(response)


def _ring_ids(stack: Stack, after: int) -> list[str]:
    projection = stack.demo.service.projection
    return [f"{projection.epoch}:{r}" for r in range(after + 1, projection.revision + 1)]


async def test_a_reconnect_with_last_event_id_gets_exactly_the_missed_frames(
    stack: Stack,
) -> None:
    async with events(stack) as stream:
        first = await stream.next()
    assert first is not None
    assert first.event == "snapshot"
    assert first.id == f"{first.data['projection_epoch']}:{first.data['revision']}"
    seen = first.data["revision"]

    await stack.say("tool Read README.md\nsay hello")  # published while nobody watches
    await stack.settled()
    missed = _ring_ids(stack, seen)
    assert len(missed) >= 3

    async with events(stack, first.id) as stream:
        replayed = [await stream.next() for _ in missed]
        # Then live, with no snapshot in between: the next change comes next.
        await stack.say("say again")
        live = await stream.until("runtime_state")
    frames = [f for f in replayed if f is not None]
    assert [f.id for f in frames] == missed  # exactly the missed frames, in order
    assert "snapshot" not in [f.event for f in frames]
    states = [f.data["snapshot"]["state"] for f in frames if f.event == "runtime_state"]
    assert states[-1] == "idle"
    assert live.data["revision"] == int(missed[-1].rpartition(":")[2]) + 1
    await stack.settled()


async def test_a_last_event_id_from_another_run_gets_a_fresh_snapshot(stack: Stack) -> None:
    await stack.say("say hello")
    await stack.settled()
    for stale in ("0123456789abcdef0123456789abcdef:3", "garbage", ""):
        async with events(stack, stale) as stream:
            frame = await stream.next()
        assert frame is not None
        assert frame.event == "snapshot", stale
        assert stack.chat in frame.data["conversations"]


async def test_a_subscriber_too_far_behind_is_evicted_and_catches_up_with_its_last_id(
    stack: Stack,
) -> None:
    projection = stack.demo.service.projection
    projection.queue_size = 2  # for subscriptions made from now on
    try:
        async with events(stack, headers={"X-Bridge-Client-Id": "slow"}) as stream:
            first = await stream.next()
            assert first is not None
            assert projection.subscribers() == ["slow"]
            for n in range(6):  # at once, faster than any reader: its queue overflows
                projection.publish("oc_probe", {"state": "idle", "n": n})
            evicted = await stream.next()
            assert evicted is not None
            assert evicted.event == "client_evicted"
            assert evicted.id is None
            assert evicted.data["reason"] == "queue_full"
            assert await stream.next() is None  # the server ended the stream
        assert projection.subscribers() == []
        async with events(stack, first.id) as stream:
            caught_up = [await stream.next() for _ in range(6)]
        assert [f.data["snapshot"]["n"] for f in caught_up if f is not None] == list(range(6))
    finally:
        projection.queue_size = 256


async def test_closing_a_session_by_operator_or_new_sends_session_closed(stack: Stack) -> None:
    await stack.say("say hello")
    await stack.settled()
    first_session = await stack.demo.service.store.session_for(stack.chat)
    assert first_session is not None
    async with (
        events(stack) as stream,
        httpx.AsyncClient(trust_env=False, timeout=10.0) as http,
    ):
        await stream.until("snapshot")
        closed = await http.post(f"{stack.ops_url}/sessions/{stack.chat}/close")
        assert closed.status_code == 200
        assert closed.json()["session_id"] is None
        frame = await stream.until("session_closed")
        assert frame.data["conversation"] == stack.chat
        assert (frame.data["session_id"], frame.data["reason"]) == (first_session, "operator")
        assert frame.id is not None

        await stack.say("say a fresh start")  # the next message opens a new session
        await stack.wait_text(lambda t: t == "a fresh start")
        await stack.settled()
        second = await stack.demo.service.store.session_for(stack.chat)
        assert second not in (None, first_session)
        await stack.say("/new")
        frame = await stream.until("session_closed")
        assert (frame.data["session_id"], frame.data["reason"]) == (second, "new")
    await stack.settled()
    # Closing with no session is harmless; no chat line was posted for the operator's close.
    async with httpx.AsyncClient(trust_env=False) as http:
        again = await http.post(f"{stack.ops_url}/sessions/{stack.chat}/close")
        unknown = await http.post(f"{stack.ops_url}/sessions/oc_nobody/close")
    assert again.status_code == 200
    assert unknown.status_code == 404
    assert unknown.json() == {"error": "unknown conversation"}


async def test_closing_a_session_while_a_round_waits_for_approval_is_a_409(stack: Stack) -> None:
    await stack.say("permission Delete build/")
    await stack.emu.wait_for(lambda: any(m.msg_type == "interactive" for m in stack.bot()))
    async with httpx.AsyncClient(trust_env=False) as http:
        busy = await http.post(f"{stack.ops_url}/sessions/{stack.chat}/close")
    assert busy.status_code == 409
    assert "error" in busy.json()
    assert await stack.demo.service.store.session_for(stack.chat) is not None
    assert (await stack.runtime_state())["state"] == "waiting_approval"


async def test_an_agent_crash_that_loses_the_session_sends_session_died_and_a_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRIPTED_AGENT_LOAD_SESSION", "0")  # the session cannot be reloaded
    async with running_stack(tmp_path / "bridge") as stack:
        await stack.demo.service.runtime.start()
        async with events(stack) as stream:
            await stream.until("snapshot")
            await stack.say("say hello")
            await stack.settled()
            lost = await stack.demo.service.store.session_for(stack.chat)
            await stack.say("tool Build\ncrash")
            died = await stream.until("session_died")
            assert died.data["conversation"] == stack.chat
            assert (died.data["session_id"], died.data["reason"]) == (lost, "agent_exit")
            await stack.settled()
        snapshot = stack.demo.service.projection.snapshot()
        kinds = [(f["kind"], f["conversation"]) for f in snapshot["faults"]]
        assert ("agent_exit", None) in kinds  # the process, seen alive, then gone
        assert ("session_died", stack.chat) in kinds
        assert ("turn_interrupted", stack.chat) in kinds
        assert "Build" not in json.dumps(snapshot["faults"])  # kinds and ids, never text
        [process] = [p for p in snapshot["processes"] if p["alive"]]
        assert process["restarts"] == 1
        assert process["state"] == "alive"


async def test_sessions_list_and_display_names_with_their_400s_behind_the_token(
    tmp_path: Path,
) -> None:
    data = tmp_path / "bridge"
    settings = {"bridge_ops_token": TOKEN}
    async with (
        running_stack(data, settings=settings) as stack,
        httpx.AsyncClient(trust_env=False, timeout=5.0) as http,
    ):
        await stack.say("say hello")
        await stack.settled()
        url = f"{stack.ops_url}/sessions/{quote(stack.chat)}"
        for method, path in (
            ("GET", "/sessions"),
            ("PATCH", f"/sessions/{stack.chat}"),
            ("POST", f"/sessions/{stack.chat}/close"),
        ):
            refused = await http.request(
                method, f"{stack.ops_url}{path}", json={"display_name": "x"}
            )
            assert refused.status_code == 401, path
        listed = (await http.get(f"{stack.ops_url}/sessions", headers=AUTH)).json()["sessions"]
        [entry] = listed
        assert entry["conversation"] == stack.chat
        assert entry["session_id"] == await stack.demo.service.store.session_for(stack.chat)
        agent = stack.demo.service.settings.agent.agent_profiles[0][0]
        assert (entry["agent"], entry["state"], entry["display_name"]) == (agent, "idle", None)
        assert entry["workspace"]
        assert entry["folder"]
        assert entry["last_activity_at"] is not None

        bad_bodies: list[tuple[str | bytes, str]] = [
            (json.dumps({"display_name": "x" * 257}), "longer than 256"),
            (json.dumps({"display_name": "release\nroom"}), "control characters"),
            (json.dumps({"display_name": "bell\x07"}), "control characters"),
            (json.dumps({"display_name": 5}), "string or null"),
            ("not json", "JSON object"),
            (json.dumps(["display_name"]), "JSON object"),
            (json.dumps({"name": "x"}), "JSON object"),
        ]
        for body, says in bad_bodies:
            response = await http.patch(url, content=body, headers=AUTH)
            assert response.status_code == 400, body
            assert says in response.json()["error"], body
        nobody = f"{stack.ops_url}/sessions/oc_nobody"
        unknown = await http.patch(nobody, json={"display_name": "x"}, headers=AUTH)
        assert unknown.status_code == 404

        name = "发布群 <b>release</b> " + "x" * 200  # 256 characters at most: accepted
        named = await http.patch(url, json={"display_name": name[:256]}, headers=AUTH)
        assert named.status_code == 200
        assert named.json()["display_name"] == name[:256]
        states = (await http.get(f"{stack.ops_url}/runtime-states", headers=AUTH)).json()
        assert states["conversations"][stack.chat]["display_name"] == name[:256]
        # The operator's name is not one of the conversation's agent choices.
        await stack.say("say hello again")
        await stack.settled()
    # Kept across a restart.
    async with (
        running_stack(data, settings=settings) as stack,
        httpx.AsyncClient(trust_env=False, timeout=5.0) as http,
    ):
        [entry] = (await http.get(f"{stack.ops_url}/sessions", headers=AUTH)).json()["sessions"]
        assert entry["display_name"] == name[:256]
        cleared = await http.put(
            f"{stack.ops_url}/sessions/{quote(entry['conversation'])}",
            json={"display_name": None},
            headers=AUTH,
        )
        assert cleared.status_code == 200, cleared.text
        assert cleared.json()["display_name"] is None
