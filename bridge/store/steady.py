"""A store call retried through a database outage (a restart, a failover): with backoff
(tenacity) while the store says it is unavailable, up to a bound, then the last error.

Only for calls that are safe to make twice (first-wins claims, first-terminal-wins ends,
upserts, reads): a call that failed on a dropped connection may have committed.

As in feishu/retry.py, the first try is the caller's own, outside tenacity: almost every
call succeeds at once and should pay nothing for the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from bridge.retry_from import retry_from
from bridge.store.port import StoreUnavailable

log = logging.getLogger(__name__)

_T = TypeVar("_T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class StoreRetry:
    """How long a turn waits for its store: `max_attempts` tries (the first included),
    `base_delay` doubling to `max_delay` between them (about a minute in all by default,
    longer than a database restart). Tests set the delays to 0."""

    max_attempts: int = 35
    base_delay: float = 0.1
    max_delay: float = 2.0
    sleep: Sleep = asyncio.sleep

    async def call(self, op: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """`call()`, tried again while the store is unavailable."""
        try:
            return await call()
        except StoreUnavailable as first:
            return await self._again(op, first, call)

    async def _again(
        self, op: str, first: StoreUnavailable, call: Callable[[], Awaitable[_T]]
    ) -> _T:
        def before_sleep(state: RetryCallState) -> None:
            delay = state.next_action.sleep if state.next_action else 0.0
            log.warning("store %s: unavailable, retrying in %.2fs", op, delay)

        retrying = AsyncRetrying(
            sleep=self.sleep,
            stop=stop_after_attempt(self.max_attempts),
            wait=wait_exponential(multiplier=self.base_delay, max=self.max_delay),
            retry=retry_if_exception_type(StoreUnavailable),
            before_sleep=before_sleep,
            reraise=True,
        )
        return await retry_from(retrying, first, call)
