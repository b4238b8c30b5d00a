"""The emulator's message API goes down and comes back on command, answering as Feishu does
(503 with its error envelope; 429 with code 99991400 and the x-ogw-ratelimit-* headers; a
timeout that never answers), over real sockets: by the Python method, by the control endpoint
`/_emulator/outage`, and through the chat page's switch. Schedules advance on an injected
clock, so no test sleeps through them."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from bridge.devtools.emulator import FaultKind, FeishuEmulator

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES = "/open-apis/im/v1/messages"
CARDS = "/open-apis/cardkit/v1/cards"
NEW_CARD = {
    "type": "card_json",
    "data": json.dumps(
        {"schema": "2.0", "body": {"elements": [{"tag": "markdown", "content": "x"}]}}
    ),
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def emu(clock: Clock) -> AsyncIterator[FeishuEmulator]:
    async with FeishuEmulator(time_scale=0.001, clock=clock) as running:
        yield running


@pytest.fixture
async def http(emu: FeishuEmulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=emu.url, trust_env=False, timeout=5.0) as client:
        answer = await client.post(
            TOKEN_PATH, json={"app_id": emu.app_id, "app_secret": emu.app_secret}
        )
        client.headers["Authorization"] = f"Bearer {answer.json()['tenant_access_token']}"
        yield client


def _reply_body(uuid: str) -> dict[str, str]:
    return {"msg_type": "text", "content": json.dumps({"text": "hi"}), "uuid": uuid}


async def _reply(emu: FeishuEmulator, http: httpx.AsyncClient, uuid: str) -> httpx.Response:
    user = emu.messages(sender_type="user")
    message_id = user[0].message_id if user else (await emu.send_user_message("hi")).message_id
    return await http.post(f"{MESSAGES}/{message_id}/reply", json=_reply_body(uuid))


async def test_503_refuses_every_message_call_with_feishus_envelope(
    emu: FeishuEmulator, http: httpx.AsyncClient
) -> None:
    emu.fail_next("POST", f"{MESSAGES}/*/reply", FaultKind.SERVER_ERROR)
    emu.set_api_outage("503")
    answer = await _reply(emu, http, "u1")
    assert answer.status_code == 503
    assert answer.headers["content-type"].startswith("application/json")
    assert re.fullmatch(r"[0-9A-F]{32}", answer.headers["x-tt-logid"])
    body = answer.json()
    assert (body["code"], body["msg"]) == (1500, "internal error")
    assert re.fullmatch(r"[0-9A-F]{32}", body["error"]["log_id"])
    # Only the message API is down: the token, the bot info and (by default) cardkit answer.
    assert (await http.get("/open-apis/bot/v3/info")).status_code == 200
    assert (await http.post(CARDS, json=NEW_CARD)).status_code == 200
    assert emu.bot_messages() == []
    [refused] = emu.refused_calls()
    assert (refused.method, refused.path, refused.mode) == ("POST", answer.url.path, "503")
    assert emu.calls(MESSAGES)[-1].fault == "outage_503"

    emu.set_api_outage("up")
    # The armed fault waited for the API to come back, then the call goes through.
    assert (await _reply(emu, http, "u1")).status_code == 500
    assert (await _reply(emu, http, "u1")).json()["code"] == 0
    assert len(emu.bot_messages()) == 1
    assert len(emu.refused_calls()) == 1


async def test_cardkit_is_refused_when_asked(emu: FeishuEmulator, http: httpx.AsyncClient) -> None:
    emu.set_api_outage("503", cardkit=True)
    assert (await http.post(CARDS, json=NEW_CARD)).status_code == 503
    assert [c.path for c in emu.refused_calls()] == [CARDS]


async def test_429_sends_the_rate_limit_code_and_headers(
    emu: FeishuEmulator, http: httpx.AsyncClient, clock: Clock
) -> None:
    emu.set_api_outage([("429", 30)])
    clock.now += 12.5
    answer = await _reply(emu, http, "u1")
    assert answer.status_code == 429
    assert (answer.json()["code"], answer.json()["msg"]) == (
        99991400,
        "request trigger frequency limit",
    )
    # The reset header is the seconds left until the limit lifts, as Feishu's is.
    assert answer.headers["x-ogw-ratelimit-reset"] == "18"
    assert answer.headers["x-ogw-ratelimit-limit"] == "50"
    emu.set_api_outage("429", reset_seconds=7, limit=100)
    fixed = await _reply(emu, http, "u1")
    assert (fixed.headers["x-ogw-ratelimit-reset"], fixed.headers["x-ogw-ratelimit-limit"]) == (
        "7",
        "100",
    )
    assert emu.bot_messages() == []


async def test_timeout_holds_the_call_and_never_answers(
    emu: FeishuEmulator, http: httpx.AsyncClient
) -> None:
    emu.set_api_outage("timeout", hold_seconds=30.0)
    with pytest.raises(httpx.ReadTimeout):  # the client gives up first
        await http.post(
            f"{MESSAGES}/{(await emu.send_user_message('hi')).message_id}/reply",
            json=_reply_body("u1"),
            timeout=0.1,
        )
    # Past the hold the connection is closed without a status line.
    emu.set_api_outage("timeout", hold_seconds=0.05)
    with pytest.raises(httpx.RemoteProtocolError):
        await _reply(emu, http, "u2")
    assert emu.bot_messages() == []  # unlike a timeout fault, nothing was done
    assert [c.mode for c in emu.refused_calls()] == ["timeout", "timeout"]
    assert [(c.status, c.response) for c in emu.calls(MESSAGES)] == [(0, None), (0, None)]


async def test_a_schedule_advances_on_the_clock_then_the_api_is_up(
    emu: FeishuEmulator, http: httpx.AsyncClient, clock: Clock
) -> None:
    state = emu.set_api_outage(
        [("503", 20), ("429", 20), ("timeout", 20)], hold_seconds=0.05, reset_seconds=None
    )
    assert (state.mode, state.remaining_seconds) == ("503", 20)
    assert [(s.mode, s.seconds) for s in state.next_steps] == [("429", 20), ("timeout", 20)]
    seen = []
    for at in (0.0, 19.9, 20.0, 39.5, 40.0, 59.0, 60.0):
        clock.now = 1000.0 + at
        try:
            seen.append((at, (await _reply(emu, http, f"u{at}")).status_code))
        except httpx.RemoteProtocolError:
            seen.append((at, "no answer"))
    assert seen == [
        (0.0, 503),
        (19.9, 503),
        (20.0, 429),
        (39.5, 429),
        (40.0, "no answer"),
        (59.0, "no answer"),
        (60.0, 200),
    ]
    assert emu.outage.state().mode == "up"
    # Each refusal carries its clock time: a test can count calls per second of outage.
    assert [c.at for c in emu.refused_calls()] == [1000.0 + at for at, _ in seen[:-1]]


async def test_a_schedule_is_checked(emu: FeishuEmulator) -> None:
    bad_plans = {
        "only the last step": [("503", None), ("429", 5)],
        "finite and >= 0": [("503", -1)],
        "'down' is not a valid": [("down", 5)],
        "'slow' is not a valid": "slow",
    }
    for why, plan in bad_plans.items():
        with pytest.raises(ValueError, match=why):
            emu.set_api_outage(plan)
    with pytest.raises(ValueError, match="hold_seconds > 0"):
        emu.set_api_outage("timeout", hold_seconds=0)
    assert emu.outage.state().mode == "up"


async def test_the_control_endpoint_sets_and_reports_the_outage(
    emu: FeishuEmulator, http: httpx.AsyncClient, clock: Clock
) -> None:
    control = "/_emulator/outage"
    down = await http.post(control, json={"mode": "503", "cardkit": True})
    assert down.json() == {
        "mode": "503",
        "remaining_seconds": None,
        "next": [],
        "cardkit": True,
        "hold_seconds": 60.0,
        "refused": 0,
    }
    assert (await _reply(emu, http, "u1")).status_code == 503
    report = (await http.get(control)).json()
    [refused] = report["refused_calls"]
    assert (refused["method"], refused["mode"], refused["at"]) == ("POST", "503", 1000.0)
    assert refused["path"].startswith(MESSAGES)
    assert report["refused"] == 1

    schedule = [{"mode": "429", "seconds": 20}, {"mode": "timeout", "seconds": 20}]
    state = (await http.post(control, json={"schedule": schedule, "reset_seconds": 3})).json()
    assert (state["mode"], state["remaining_seconds"], state["next"]) == (
        "429",
        20,
        [{"mode": "timeout", "seconds": 20}],
    )
    assert (await _reply(emu, http, "u1")).headers["x-ogw-ratelimit-reset"] == "3"
    clock.now += 40
    assert (await http.get(control)).json()["mode"] == "up"
    assert (await _reply(emu, http, "u1")).status_code == 200

    for bad in (
        {"mode": "slow"},
        {"mode": "503", "schedule": []},
        {},
        {"schedule": [{"mode": "503"}, {"mode": "429", "seconds": 1}]},
        {"schedule": "503"},
        {"mode": "503", "cardkit": "yes"},
        {"mode": "timeout", "hold_seconds": -1},
    ):
        answer = await http.post(control, json=bad)
        assert answer.status_code == 400, bad
    assert (await http.post(control, content=b"[")).status_code == 400
    assert emu.outage.state().mode == "up"


async def test_the_chat_page_has_the_switch_wired_to_the_endpoint(
    emu: FeishuEmulator, http: httpx.AsyncClient
) -> None:
    page = (await http.get("/")).text
    select = re.search(r'<select id="api-mode" data-endpoint="([^"]+)">(.*?)</select>', page, re.S)
    assert select is not None
    assert 'id="api-state"' in page
    assert select.group(1) == "/_emulator/outage"
    assert re.findall(r'<option value="([^"]+)"', select.group(2)) == [
        "up",
        "503",
        "429",
        "timeout",
        "drill",
    ]
    script = (await http.get("/_emulator/static/app.js")).text
    assert '$("#api-mode").addEventListener("change"' in script
    assert "dataset.endpoint" in script
    assert 'method: "POST"' in script

    # What the page does on a change: POST the choice; its long-poll wakes and shows it.
    revision = emu.revision
    poll = asyncio.create_task(http.get("/_emulator/timeline", params={"since": revision}))
    drill = [{"mode": m, "seconds": 20} for m in ("503", "429", "timeout")]
    assert (await http.post("/_emulator/outage", json={"schedule": drill})).status_code == 200
    timeline = (await poll).json()
    assert timeline["revision"] > revision
    assert (timeline["outage"]["mode"], timeline["outage"]["remaining_seconds"]) == ("503", 20)
    assert emu.outage.state().mode == "503"
