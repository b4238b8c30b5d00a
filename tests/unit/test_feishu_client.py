"""FeishuClient over respx: exact wire format, retries, token handling, reactions."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from bridge.feishu.api import BotInfo, FeishuApi
from bridge.feishu.budget import BudgetPolicy, CallBudget
from bridge.feishu.client import FeishuClient, RetryPolicy
from bridge.feishu.delivery import BreakerState
from bridge.feishu.errors import (
    BusinessError,
    RateLimited,
    ServerError,
    TokenInvalid,
    TransportError,
    check_response,
)
from bridge.feishu.requests import UUID_MAX_LEN, message_uuid

DOMAIN = "https://open.feishu.test"
TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES = "/open-apis/im/v1/messages"
SECRET = "app-secret-do-not-log"
TEXT = "the private words of the user"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """Records the waits tenacity asks for; never sleeps."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def ok(data: dict[str, Any] | None = None, **top: Any) -> httpx.Response:
    return httpx.Response(200, json={"code": 0, "msg": "success", "data": data or {}, **top})


def token_response(token: str = "t-1", expire: int = 7200) -> httpx.Response:
    return httpx.Response(
        200, json={"code": 0, "msg": "ok", "tenant_access_token": token, "expire": expire}
    )


def body_of(call: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(call.request.content)
    return result


@pytest.fixture
def router() -> Iterator[respx.MockRouter]:
    # using="httpx": mocked where the client picks its transport (ours is not httpcore's)
    with respx.mock(base_url=DOMAIN, assert_all_called=False, using="httpx") as mock:
        mock.post(TOKEN_PATH, name="token").mock(return_value=token_response())
        yield mock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def client(clock: Clock, sleeps: Sleeps) -> AsyncIterator[FeishuClient]:
    policy = RetryPolicy(max_attempts=3, base_delay=0, max_delay=0, max_rate_limit_wait=60)
    async with FeishuClient(
        "cli_test", SECRET, DOMAIN, retry=policy, clock=clock, sleep=sleeps, max_chars=40
    ) as c:
        yield c


async def test_client_satisfies_the_port() -> None:
    client = FeishuClient("cli_test", SECRET, DOMAIN, clock=Clock())
    api: FeishuApi = client
    assert SECRET not in repr(api)
    assert SECRET not in repr(client.tokens)
    await api.aclose()


# --- wire format ------------------------------------------------------------------------


async def test_send_text_wire_format(router: respx.MockRouter, client: FeishuClient) -> None:
    route = router.post(MESSAGES).mock(return_value=ok({"message_id": "om_1"}))

    ids = await client.send_text("oc_chat", "hello 你好", uuid="turn-1")

    assert ids == ["om_1"]
    request = route.calls.last.request
    assert request.url.params["receive_id_type"] == "chat_id"
    assert request.headers["authorization"] == "Bearer t-1"
    body = body_of(route.calls.last)
    assert body["receive_id"] == "oc_chat"
    assert body["msg_type"] == "text"
    assert body["uuid"] == "turn-1"
    assert isinstance(body["content"], str)
    assert json.loads(body["content"]) == {"text": "hello 你好"}
    token_call = router.routes["token"].calls.last
    assert body_of(token_call) == {"app_id": "cli_test", "app_secret": SECRET}


async def test_reply_text_in_thread(router: respx.MockRouter, client: FeishuClient) -> None:
    route = router.post(f"{MESSAGES}/om_parent/reply").mock(return_value=ok({"message_id": "om_r"}))

    assert await client.reply_text("om_parent", "ok", uuid="u1", in_thread=True) == ["om_r"]

    body = body_of(route.calls.last)
    assert body == {
        "msg_type": "text",
        "content": '{"text":"ok"}',
        "reply_in_thread": True,
        "uuid": "u1",
    }


async def test_long_reply_is_split_in_order_with_part_uuids(
    router: respx.MockRouter, client: FeishuClient
) -> None:
    ids = iter(["om_a", "om_b", "om_c", "om_d"])
    route = router.post(f"{MESSAGES}/om_p/reply").mock(
        side_effect=lambda request: ok({"message_id": next(ids)})
    )
    text = "First paragraph here.\n\nSecond paragraph is this.\n\nThird one ends it."

    result = await client.reply_text("om_p", text, uuid="u1")

    bodies = [body_of(call) for call in route.calls]
    assert result == ["om_a", "om_b", "om_c"]
    assert [b["uuid"] for b in bodies] == ["u1", "u1-2", "u1-3"]
    texts = [json.loads(b["content"])["text"] for b in bodies]
    assert "".join(texts) == text
    assert all(len(t) <= 40 for t in texts)


async def test_a_reply_past_the_part_limit_is_cut_and_says_so(
    router: respx.MockRouter, clock: Clock, sleeps: Sleeps
) -> None:
    ids = iter(f"om_{i}" for i in range(100))
    route = router.post(f"{MESSAGES}/om_p/reply").mock(
        side_effect=lambda request: ok({"message_id": next(ids)})
    )
    policy = RetryPolicy(max_attempts=1, base_delay=0, max_delay=0)
    paragraphs = "\n\n".join(f"Paragraph number {i:02d} is here." for i in range(30))
    async with FeishuClient(
        "cli_test",
        SECRET,
        DOMAIN,
        retry=policy,
        clock=clock,
        sleep=sleeps,
        max_chars=40,
        max_parts=3,
    ) as capped:
        result = await capped.reply_text("om_p", paragraphs, uuid="u1")

    texts = [json.loads(body_of(call)["content"])["text"] for call in route.calls]
    assert result == ["om_0", "om_1", "om_2"]
    assert texts[0].startswith("Paragraph number 00")
    assert "Paragraph number 03" not in "".join(texts)
    # The default notice is the zh_CN catalogue's, with the real counts.
    assert texts[2].endswith(
        "\n（回复太长：只发出了前 3 段，共 30 段，其余已截去。需要全文可以让助手写入文件。）"
    )


async def test_cards_and_update(router: respx.MockRouter, client: FeishuClient) -> None:
    card = {"schema": "2.0", "body": {"elements": [{"tag": "markdown", "content": "**hi**"}]}}
    send = router.post(MESSAGES).mock(return_value=ok({"message_id": "om_card"}))
    reply = router.post(f"{MESSAGES}/om_x/reply").mock(return_value=ok({"message_id": "om_rc"}))
    patch = router.patch(f"{MESSAGES}/om_card").mock(return_value=ok())

    assert await client.send_card("oc_1", card, uuid="c1") == "om_card"
    assert await client.reply_card("om_x", card, uuid="c2") == "om_rc"
    await client.update_card("om_card", card)

    sent = body_of(send.calls.last)
    assert sent["msg_type"] == "interactive"
    assert sent["uuid"] == "c1"
    assert json.loads(sent["content"]) == card
    assert send.calls.last.request.url.params["receive_id_type"] == "chat_id"
    replied = body_of(reply.calls.last)
    assert replied["reply_in_thread"] is False
    assert replied["uuid"] == "c2"
    assert body_of(patch.calls.last) == {"content": json.dumps(card, separators=(",", ":"))}


async def test_bot_info(router: respx.MockRouter, client: FeishuClient) -> None:
    router.get("/open-apis/bot/v3/info").mock(
        return_value=httpx.Response(
            200,
            json={"code": 0, "msg": "ok", "bot": {"open_id": "ou_bot", "app_name": "Helper"}},
        )
    )
    assert await client.bot_info() == BotInfo(open_id="ou_bot", app_name="Helper")


async def test_empty_text_is_refused(router: respx.MockRouter, client: FeishuClient) -> None:
    with pytest.raises(ValueError, match="empty"):
        await client.send_text("oc_1", "  \n", uuid="u")


# --- uuids ------------------------------------------------------------------------------


def test_message_uuid_stays_within_feishu_limit() -> None:
    assert message_uuid("abc") == "abc"
    assert message_uuid("abc", 2) == "abc-2"
    exact = "x" * UUID_MAX_LEN
    assert message_uuid(exact) == exact
    long = "evt_" + "y" * 80
    parts = [message_uuid(long, n) for n in range(1, 12)]
    assert all(len(p) <= UUID_MAX_LEN for p in parts)
    assert len(set(parts)) == len(parts)
    assert parts == [message_uuid(long, n) for n in range(1, 12)]  # stable across retries
    assert message_uuid("x" * 49, 2) != message_uuid("x" * 48, 2)
    with pytest.raises(ValueError, match="uuid"):
        message_uuid("")


# --- retries ----------------------------------------------------------------------------


async def test_rate_limit_then_success_reposts_same_bytes(
    router: respx.MockRouter, client: FeishuClient, sleeps: Sleeps
) -> None:
    limited = httpx.Response(
        429,
        headers={"x-ogw-ratelimit-reset": "7", "x-tt-logid": "log-1"},
        json={"code": 99991400, "msg": "request trigger frequency limit"},
    )
    route = router.post(MESSAGES).mock(side_effect=[limited, ok({"message_id": "om_1"})])

    assert await client.send_text("oc_1", "hi", uuid="u-429") == ["om_1"]

    assert route.call_count == 2
    first, second = (call.request.content for call in route.calls)
    assert first == second
    assert body_of(route.calls[0])["uuid"] == "u-429"
    assert sleeps.delays == [7.0]  # Feishu's reset header, not our backoff


async def test_server_error_is_retried_a_bounded_number_of_times(
    router: respx.MockRouter, client: FeishuClient, sleeps: Sleeps
) -> None:
    route = router.post(MESSAGES).mock(
        return_value=httpx.Response(503, text="upstream unavailable")
    )

    with pytest.raises(ServerError) as info:
        await client.send_text("oc_1", "hi", uuid="u")

    assert route.call_count == 3
    assert len(sleeps.delays) == 2
    assert info.value.http_status == 503
    assert {body_of(call)["uuid"] for call in route.calls} == {"u"}


async def test_transport_error_is_retried(router: respx.MockRouter, client: FeishuClient) -> None:
    route = router.post(MESSAGES).mock(
        side_effect=[httpx.ReadTimeout("slow"), ok({"message_id": "om_t"})]
    )
    assert await client.send_text("oc_1", "hi", uuid="u") == ["om_t"]
    assert route.call_count == 2


async def test_transport_errors_exhausted_raise_typed(
    router: respx.MockRouter, client: FeishuClient
) -> None:
    router.post(MESSAGES).mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(TransportError):
        await client.send_text("oc_1", "hi", uuid="u")


async def test_business_error_not_retried_and_logged_once_without_secrets(
    router: respx.MockRouter, client: FeishuClient, caplog: pytest.LogCaptureFixture
) -> None:
    route = router.post(MESSAGES).mock(
        return_value=httpx.Response(
            400,
            json={
                "code": 230002,
                "msg": "The bot can not be outside the group.",
                "error": {"log_id": "20240911LOG"},
            },
        )
    )
    caplog.set_level(logging.DEBUG, logger="bridge.feishu")

    with pytest.raises(BusinessError) as info:
        await client.send_text("oc_1", TEXT, uuid="u")

    assert route.call_count == 1
    assert (info.value.code, info.value.log_id) == (230002, "20240911LOG")
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].levelno == logging.WARNING
    assert "230002" in failures[0].getMessage()
    assert "outside the group" in failures[0].getMessage()
    for record in caplog.records:
        message = record.getMessage()
        assert SECRET not in message
        assert "t-1" not in message
        assert TEXT not in message


async def test_a_named_apps_failure_line_names_the_app(
    router: respx.MockRouter, clock: Clock, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    # A bridge serving several apps: the operator must tell whose Feishu refused.
    router.post(MESSAGES).mock(return_value=httpx.Response(400, json={"code": 230002, "msg": "x"}))
    caplog.set_level(logging.INFO, logger="bridge.feishu")
    async with FeishuClient("cli_b", SECRET, DOMAIN, clock=clock, sleep=sleeps, app="b") as b:
        with pytest.raises(BusinessError):
            await b.send_text("oc_1", TEXT, uuid="u")
    [failure] = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failure.startswith("app b: feishu ")


async def test_long_rate_limit_wait_is_raised_not_slept(
    router: respx.MockRouter, client: FeishuClient, sleeps: Sleeps
) -> None:
    route = router.post(MESSAGES).mock(
        return_value=httpx.Response(
            429, headers={"x-ogw-ratelimit-reset": "3600"}, json={"code": 99991400, "msg": "x"}
        )
    )
    with pytest.raises(RateLimited) as info:
        await client.send_text("oc_1", "hi", uuid="u")
    assert info.value.reset_after == 3600
    assert route.call_count == 1
    assert sleeps.delays == []


async def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    for number, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delay = policy.backoff(number)
        assert ceiling / 2 <= delay <= ceiling


# --- token ------------------------------------------------------------------------------


async def test_invalid_token_is_refetched_once_and_retried(
    router: respx.MockRouter, client: FeishuClient
) -> None:
    router.routes["token"].mock(side_effect=[token_response("t-1"), token_response("t-2")])
    stale = httpx.Response(400, json={"code": 99991663, "msg": "Invalid access token"})
    route = router.post(MESSAGES).mock(side_effect=[stale, ok({"message_id": "om_1"})])

    assert await client.send_text("oc_1", "hi", uuid="u") == ["om_1"]

    auth = [call.request.headers["authorization"] for call in route.calls]
    assert auth == ["Bearer t-1", "Bearer t-2"]
    assert router.routes["token"].call_count == 2


class HeldInBudget:
    """The app's call budget as a 429's reset makes it: each call waits its turn (the next
    of `waits`, in seconds) while the clock moves on."""

    def __init__(self, clock: Clock, waits: list[float]) -> None:
        self._clock, self._waits = clock, waits

    async def before_call(self, *args: Any) -> None:
        self._clock.now += self._waits.pop(0)

    def going(self, *args: Any) -> str:
        return ""

    def answered(self, *args: Any) -> None:
        pass

    def rate_limited(self, *args: Any) -> None:
        pass


async def test_the_token_is_taken_once_the_call_has_waited_its_turn_in_the_budget(
    router: respx.MockRouter, clock: Clock
) -> None:
    """A token taken before the wait may lapse meanwhile: Feishu would refuse the try."""
    router.routes["token"].mock(
        side_effect=[token_response("t-1", expire=40), token_response("t-2", expire=40)]
    )
    route = router.post(MESSAGES).mock(return_value=ok({"message_id": "om_1"}))
    budget: Any = HeldInBudget(clock, [0.0, 35.0])
    async with FeishuClient("cli_test", SECRET, DOMAIN, clock=clock, budget=budget) as client:
        await client.send_text("oc_1", "first", uuid="u1")  # t-1, good for 40 s
        clock.now += 10.0
        await client.send_text("oc_1", "then", uuid="u2")  # goes out at 45 s: t-1 lapsed

    auth = [call.request.headers["authorization"] for call in route.calls]
    assert auth == ["Bearer t-1", "Bearer t-2"]


async def test_token_rejected_twice_raises(router: respx.MockRouter, client: FeishuClient) -> None:
    stale = httpx.Response(400, json={"code": 99991668, "msg": "Invalid access token"})
    route = router.post(MESSAGES).mock(return_value=stale)
    with pytest.raises(TokenInvalid):
        await client.send_text("oc_1", "hi", uuid="u")
    assert route.call_count == 2  # the original and exactly one retry with a new token


async def test_concurrent_calls_share_one_token_fetch(
    router: respx.MockRouter, client: FeishuClient
) -> None:
    release = asyncio.Event()

    async def slow_token(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return token_response("t-shared")

    router.routes["token"].mock(side_effect=slow_token)
    route = router.post(MESSAGES).mock(return_value=ok({"message_id": "om"}))

    tasks = [asyncio.create_task(client.send_text("oc", "hi", uuid=f"u{i}")) for i in range(20)]
    for _ in range(5):
        await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*tasks)

    assert router.routes["token"].call_count == 1
    assert route.call_count == 20
    assert {c.request.headers["authorization"] for c in route.calls} == {"Bearer t-shared"}


async def test_a_call_that_waited_for_its_turn_past_its_tokens_life_goes_with_a_fresh_one(
    router: respx.MockRouter, clock: Clock, sleeps: Sleeps
) -> None:
    """The token is taken once the budget gives the call its turn: one taken before a wait
    longer than its life went stale (the simulator's seed 1881: acks held 40 s by an
    outage's paused API, refused as sent with an expired token, then waiting again)."""
    router.routes["token"].mock(
        side_effect=[token_response("t-1", expire=100), token_response("t-2", expire=100)]
    )

    def feishu(request: httpx.Request) -> httpx.Response:
        if request.headers["authorization"] == "Bearer t-1" and clock.now >= 1100.0:
            return httpx.Response(400, json={"code": 99991663, "msg": "Invalid access token"})
        return ok({"message_id": "om"})

    route = router.post(MESSAGES).mock(side_effect=feishu)
    timers: list[tuple[float, Callable[[], None]]] = []

    class Timer:
        def cancel(self) -> None:
            pass

    def call_at(when: float, callback: Callable[[], None]) -> Timer:
        timers.append((when, callback))
        return Timer()

    # One send a minute's worth: a send every two minutes, longer than the token lives.
    budget = CallBudget(BudgetPolicy(sends_per_minute=1.0), now=clock, call_at=call_at)
    async with FeishuClient(
        "cli_test", SECRET, DOMAIN, clock=clock, sleep=sleeps, budget=budget
    ) as c:
        await c.send_text("oc", "first", uuid="u1")  # at once: the minute's one send
        second = asyncio.create_task(c.send_text("oc", "second", uuid="u2"))
        while not second.done():
            await asyncio.sleep(0)
            if timers and not second.done():
                timers.sort(key=lambda t: t[0])
                when, wake = timers.pop(0)
                clock.now = max(clock.now, when)
                wake()
        await second

    auth = [call.request.headers["authorization"] for call in route.calls]
    assert auth == ["Bearer t-1", "Bearer t-2"]  # none refused: Feishu saw two calls


async def test_token_server_error_is_retried_by_the_call(
    router: respx.MockRouter, client: FeishuClient
) -> None:
    router.routes["token"].mock(side_effect=[httpx.Response(500), token_response("t-9")])
    route = router.post(MESSAGES).mock(return_value=ok({"message_id": "om"}))
    assert await client.send_text("oc", "hi", uuid="u") == ["om"]
    assert route.calls.last.request.headers["authorization"] == "Bearer t-9"


# --- reactions --------------------------------------------------------------------------


async def test_add_and_remove_reaction(router: respx.MockRouter, client: FeishuClient) -> None:
    add = router.post(f"{MESSAGES}/om_1/reactions").mock(
        return_value=ok({"reaction_id": "re_1", "reaction_type": {"emoji_type": "OnIt"}})
    )
    remove = router.delete(f"{MESSAGES}/om_1/reactions/re_1").mock(return_value=ok())

    assert await client.add_reaction("om_1", "OnIt") == "re_1"
    await client.remove_reaction("om_1", "re_1")

    assert body_of(add.calls.last) == {"reaction_type": {"emoji_type": "OnIt"}}
    assert remove.call_count == 1


async def test_reaction_failures_never_raise(
    router: respx.MockRouter, client: FeishuClient
) -> None:
    router.post(f"{MESSAGES}/om_1/reactions").mock(
        return_value=httpx.Response(400, json={"code": 231001, "msg": "reaction type is invalid"})
    )
    router.delete(f"{MESSAGES}/om_1/reactions/re_1").mock(side_effect=httpx.ConnectError("x"))

    assert await client.add_reaction("om_1", "Nope") is None
    await client.remove_reaction("om_1", "re_1")
    assert client.breaker.state is BreakerState.CLOSED


async def test_reaction_rate_limit_opens_breaker_then_half_open_probe(
    router: respx.MockRouter, client: FeishuClient, clock: Clock, sleeps: Sleeps
) -> None:
    limited = httpx.Response(
        429, headers={"x-ogw-ratelimit-reset": "20"}, json={"code": 99991400, "msg": "limit"}
    )
    route = router.post(f"{MESSAGES}/om_1/reactions").mock(
        side_effect=[limited, ok({"reaction_id": "re_2"})]
    )
    remove = router.delete(f"{MESSAGES}/om_1/reactions/re_1").mock(return_value=ok())

    assert await client.add_reaction("om_1", "OnIt") is None
    assert route.call_count == 1
    assert sleeps.delays == []
    assert client.breaker.state is BreakerState.OPEN

    assert await client.add_reaction("om_1", "OnIt") is None  # skipped, not sent
    await client.remove_reaction("om_1", "re_1")
    assert route.call_count == 1
    assert remove.call_count == 0

    clock.now += 20
    assert client.breaker.state is BreakerState.HALF_OPEN
    assert await client.add_reaction("om_1", "OnIt") == "re_2"
    assert route.call_count == 2
    assert client.breaker.state is BreakerState.CLOSED


# --- error mapping ----------------------------------------------------------------------


def _response(status: int, body: Any = None, **headers: str) -> httpx.Response:
    if body is None:
        return httpx.Response(status, headers=headers, text="<html>bad gateway</html>")
    return httpx.Response(status, headers=headers, json=body)


@pytest.mark.parametrize(
    ("response", "kind", "code"),
    [
        (_response(429, {"code": 99991400, "msg": "limit"}), RateLimited, 99991400),
        (_response(400, {"code": 99991400, "msg": "limit"}), RateLimited, 99991400),
        (_response(429), RateLimited, 99991400),
        (_response(400, {"code": 230020, "msg": "frequency"}), RateLimited, 230020),
        (_response(401, {"code": 99991663, "msg": "bad token"}), TokenInvalid, 99991663),
        (_response(400, {"code": 99991664, "msg": "bad token"}), TokenInvalid, 99991664),
        (_response(502), ServerError, 502),
        (_response(500, {"code": 1500, "msg": "internal"}), ServerError, 1500),
        (_response(200, ["not", "an", "envelope"]), ServerError, 200),
        (_response(400, {"code": 230001, "msg": "invalid receive_id"}), BusinessError, 230001),
        (_response(200, {"code": 230011, "msg": "recalled"}), BusinessError, 230011),
        (_response(404), BusinessError, 404),
    ],
)
def test_check_response_maps_to_typed_errors(
    response: httpx.Response, kind: type[Exception], code: int
) -> None:
    with pytest.raises(kind) as info:
        check_response(response)
    assert type(info.value) is kind
    assert getattr(info.value, "code", None) == code


def test_check_response_success_and_metadata() -> None:
    assert check_response(_response(200, {"code": 0, "data": {"a": 1}}))["data"] == {"a": 1}
    with pytest.raises(RateLimited) as limited:
        check_response(
            _response(429, {"code": 99991400}, **{"x-ogw-ratelimit-reset": "52", "x-tt-logid": "L"})
        )
    assert (limited.value.reset_after, limited.value.log_id) == (52.0, "L")
    assert "L" in str(limited.value)


async def test_aclose_only_closes_owned_http() -> None:
    shared = httpx.AsyncClient()
    client = FeishuClient("cli", SECRET, DOMAIN, clock=Clock(), http=shared)
    await client.aclose()
    assert not shared.is_closed
    await shared.aclose()


async def test_the_client_keeps_no_cookie_feishu_sets(
    router: respx.MockRouter, client: FeishuClient
) -> None:
    # httpx would parse every response's cookies (urllib, on the hot path) and send them back.
    answer = ok({"message_id": "om_1"})
    answer.headers["Set-Cookie"] = "tracker=abc; Path=/"
    route = router.post(MESSAGES).mock(return_value=answer)
    await client.send_text("oc_1", "one", uuid="u1")
    await client.send_text("oc_1", "two", uuid="u2")
    assert [call.request.headers.get("cookie") for call in route.calls] == [None, None]


# --- issue 35: text that is not Unicode never makes a call raise; U+FFFD goes out ----------
# (the agent's stdout is repaired where it is read: tests/unit/test_capped_lines.py)


async def test_text_card_and_stream_with_a_lone_surrogate_go_out_repaired(
    router: respx.MockRouter, client: FeishuClient
) -> None:
    text = router.post(f"{MESSAGES}/om_p/reply").mock(return_value=ok({"message_id": "om_r"}))
    stream = router.put("/open-apis/cardkit/v1/cards/c1/elements/answer/content").mock(
        return_value=ok()
    )

    await client.reply_text("om_p", "a\ud800b", uuid="u1")
    await client.reply_card(
        "om_p", {"elements": [{"tag": "markdown", "content": "c\udfffd"}]}, uuid="u2"
    )
    await client.stream_card_text("c1", "answer", "e\ud83d", sequence=1)

    first, second = (body_of(call) for call in text.calls)
    assert json.loads(first["content"]) == {"text": "a\ufffdb"}
    assert json.loads(second["content"])["elements"][0]["content"] == "c\ufffdd"
    assert body_of(stream.calls.last)["content"] == "e\ufffd"


async def test_a_file_name_of_non_utf8_bytes_is_uploaded_repaired(
    router: respx.MockRouter, client: FeishuClient, tmp_path: Path
) -> None:
    path = tmp_path / os.fsdecode(b"r\xffport.txt")  # "r\udcffport.txt"
    path.write_bytes(b"data")
    upload = router.post("/open-apis/im/v1/files").mock(return_value=ok({"file_key": "fk"}))
    router.post(f"{MESSAGES}/om_p/reply").mock(return_value=ok({"message_id": "om_f"}))

    assert await client.upload_and_reply("om_p", path, uuid="u3") == "om_f"

    sent = upload.calls.last.request
    assert isinstance(sent, httpx.Request)
    assert 'filename="r\ufffdport.txt"'.encode() in sent.content
    assert "\r\n\r\nr\ufffdport.txt\r\n".encode() in sent.content  # the file_name field


# --- issue 42: the session builds each request as httpx's build_request would --------------


@pytest.mark.parametrize(
    ("method", "path", "params", "content"),
    [
        ("POST", MESSAGES, {"receive_id_type": "chat_id"}, b'{"receive_id":"oc_1"}'),
        ("DELETE", MESSAGES + "/om_1/reactions/r_1", None, None),
        ("POST", MESSAGES + "/om_1/urgent_app", {"user_id_type": "open_id"}, None),
        ("GET", MESSAGES + "/om_1", None, None),
    ],
)
async def test_the_request_sent_is_the_one_httpx_builds(
    method: str, path: str, params: dict[str, str] | None, content: bytes | None
) -> None:
    from bridge.feishu.requests import FeishuRequest
    from bridge.feishu.session import HttpTransport, Sending

    class Call(FeishuRequest[None]):
        op = "call"

        @property
        def path(self) -> str:
            return path

        def params(self) -> dict[str, str] | None:
            return params

    Call.method = method  # type: ignore[misc]
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return ok()

    http = httpx.AsyncClient(transport=httpx.MockTransport(answer), timeout=7.0)
    transport = HttpTransport(http, DOMAIN)
    for token in ("t-1", "t-2"):  # the second from what the first kept ready
        assert await transport(Sending(Call(), content, token)) == ok().json()
    headers = {"Authorization": "Bearer t-2"}
    if content is not None:
        headers["Content-Type"] = "application/json; charset=utf-8"
    built = http.build_request(
        method, DOMAIN + path, params=params, content=content, headers=headers
    )
    request = sent[-1]
    assert (request.method, request.url, request.content) == (
        built.method,
        built.url,
        built.content,
    )
    assert sorted(request.headers.raw) == sorted(built.headers.raw)
    assert request.extensions["timeout"] == built.extensions["timeout"]
    await http.aclose()
