"""Tenacity for a call whose first try was made before it (the fast path, with no retry
machinery around it): that try's failure is replayed as tenacity's first attempt, so the
stop, the waits and the logging count it like any other (bridge/feishu/retry.py for Feishu
calls, bridge/store/steady.py for the store)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying

_T = TypeVar("_T")


async def retry_from(
    retrying: AsyncRetrying, first: BaseException, call: Callable[[], Awaitable[_T]]
) -> _T:
    """`call` retried by `retrying`, its first attempt being the failure `first`."""
    failed: BaseException | None = first
    async for attempt in retrying:
        with attempt:
            if failed is not None:
                exc, failed = failed, None
                raise exc
            return await call()
    raise AssertionError("unreachable: tenacity either returns or raises")
