"""TenantTokenManager: caching, early refresh, single flight, invalidation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import respx

from bridge.feishu.client import TOKEN_PATH, TenantTokenManager
from bridge.feishu.errors import BusinessError, ServerError

DOMAIN = "http://127.0.0.1:9"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def token(value: str, expire: int = 7200) -> httpx.Response:
    return httpx.Response(
        200, json={"code": 0, "msg": "ok", "tenant_access_token": value, "expire": expire}
    )


@pytest.fixture
def route() -> Iterator[respx.Route]:
    # using="httpx": mocked where the client picks its transport (ours is not httpcore's)
    with respx.mock(base_url=DOMAIN, using="httpx") as mock:
        yield mock.post(TOKEN_PATH)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def manager(clock: Clock) -> AsyncIterator[TenantTokenManager]:
    async with httpx.AsyncClient() as http:
        yield TenantTokenManager(http, DOMAIN, "cli_a", "s3cret", clock=clock, refresh_margin=300)


async def test_fetches_once_and_caches(route: respx.Route, manager: TenantTokenManager) -> None:
    route.mock(return_value=token("t-1"))
    assert await manager.get() == "t-1"
    assert await manager.get() == "t-1"
    assert route.call_count == 1
    request = route.calls.last.request
    assert json.loads(request.content) == {"app_id": "cli_a", "app_secret": "s3cret"}
    assert request.headers["content-type"].startswith("application/json")


async def test_refreshes_before_expiry(
    route: respx.Route, manager: TenantTokenManager, clock: Clock
) -> None:
    route.mock(side_effect=[token("t-1"), token("t-2")])
    assert await manager.get() == "t-1"

    clock.now = 7200 - 300 - 1  # just before the refresh margin
    assert await manager.get() == "t-1"
    clock.now = 7200 - 300  # inside it: fetch while the old token still works
    assert await manager.get() == "t-2"
    assert route.call_count == 2


async def test_short_lived_token_refreshes_at_half_life(
    route: respx.Route, manager: TenantTokenManager, clock: Clock
) -> None:
    route.mock(side_effect=[token("t-1", expire=60), token("t-2", expire=60)])
    await manager.get()
    clock.now = 29
    assert await manager.get() == "t-1"
    clock.now = 30
    assert await manager.get() == "t-2"


async def test_failed_refresh_keeps_a_still_valid_token(
    route: respx.Route, manager: TenantTokenManager, clock: Clock
) -> None:
    route.mock(side_effect=[token("t-1"), httpx.Response(503), token("t-2")])
    await manager.get()
    clock.now = 7000  # inside the margin, not yet expired
    assert await manager.get() == "t-1"
    assert await manager.get() == "t-2"


async def test_failed_fetch_after_expiry_raises(
    route: respx.Route, manager: TenantTokenManager, clock: Clock
) -> None:
    route.mock(side_effect=[token("t-1"), httpx.Response(503)])
    await manager.get()
    clock.now = 7200
    with pytest.raises(ServerError):
        await manager.get()


async def test_bad_credentials_are_a_business_error(
    route: respx.Route, manager: TenantTokenManager
) -> None:
    route.mock(return_value=httpx.Response(200, json={"code": 10014, "msg": "app secret invalid"}))
    with pytest.raises(BusinessError) as info:
        await manager.get()
    assert info.value.code == 10014
    assert "s3cret" not in str(info.value)


async def test_response_without_token_is_a_server_error(
    route: respx.Route, manager: TenantTokenManager
) -> None:
    route.mock(return_value=httpx.Response(200, json={"code": 0, "msg": "ok"}))
    with pytest.raises(ServerError):
        await manager.get()


async def test_concurrent_callers_share_one_fetch(
    route: respx.Route, manager: TenantTokenManager
) -> None:
    release = asyncio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return token("t-once")

    route.mock(side_effect=slow)
    tasks = [asyncio.create_task(manager.get()) for _ in range(50)]
    for _ in range(5):
        await asyncio.sleep(0)
    release.set()

    assert set(await asyncio.gather(*tasks)) == {"t-once"}
    assert route.call_count == 1


async def test_invalidate_drops_only_the_rejected_token(
    route: respx.Route, manager: TenantTokenManager
) -> None:
    route.mock(side_effect=[token("t-1"), token("t-2"), token("t-3")])
    assert await manager.get() == "t-1"

    # Many calls fail with t-1 at once: the first invalidation refetches, the later
    # ones (still naming t-1) must not throw away t-2.
    await manager.invalidate("t-1")
    assert await manager.get() == "t-2"
    await manager.invalidate("t-1")
    assert await manager.get() == "t-2"
    assert route.call_count == 2
