"""Retrying a Feishu call: the policy (bounded attempts, exponential backoff with jitter,
Feishu's rate-limit reset honoured up to a bound) and the tenacity loop that applies it.

The first try of a call is made by the caller, outside tenacity: almost every call
succeeds at once, and tenacity's per-call state (its retrying object, a Future with a
lock, the closures below) costs more than the call's own bookkeeping and leaves reference
cycles for the garbage collector. A first failure is handed to `retried`, which gives it to
tenacity as the first attempt's outcome, so waits, retries and logs are as if tenacity had
made that try too.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from bridge.clock import system_random
from bridge.feishu.errors import FeishuError, RateLimited, ServerError, TransportError
from bridge.retry_from import retry_from

log = logging.getLogger("bridge.feishu.client")  # the client's calls, logged as its own

_T = TypeVar("_T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and jitter. Tests set the delays to 0."""

    max_attempts: int = 4  # tries in all, the first included
    base_delay: float = 0.5  # first backoff; doubles each retry
    max_delay: float = 8.0
    # Feishu's x-ogw-ratelimit-reset is honoured up to this wait; a longer one is raised
    # to the caller at once rather than parking a conversation's worker.
    max_rate_limit_wait: float = 60.0
    # Reactions are best-effort: one retry at most, so an ack never holds up a turn.
    best_effort_attempts: int = 2
    # The jitter's source: a seeded one where a run must repeat, else the OS-seeded port
    # (bridge/clock.py), never the global one.
    rng: random.Random = field(default_factory=system_random, compare=False, repr=False)

    def backoff(self, retry_number: int) -> float:
        """Delay before retry `retry_number` (1-based): half fixed, half random."""
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (retry_number - 1))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)


async def retried(
    first: FeishuError,
    call: Callable[[], Awaitable[_T]],
    *,
    op: str,
    policy: RetryPolicy,
    sleep: Sleep,
    attempts: int | None = None,
    retry_rate_limited: bool = True,
) -> _T:
    """The rest of a call whose first try failed with `first`: retried on 5xx, 429 and
    transport errors while `attempts` (the first included) last; the last error raised."""

    def should_retry(exc: BaseException) -> bool:
        if isinstance(exc, RateLimited):
            wait = exc.reset_after
            return retry_rate_limited and (wait is None or wait <= policy.max_rate_limit_wait)
        return isinstance(exc, ServerError | TransportError)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, RateLimited) and exc.reset_after is not None:
            return exc.reset_after
        return policy.backoff(state.attempt_number)

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        log.info("feishu %s: %s, retrying in %.2fs", op, exc, delay)

    retrying = AsyncRetrying(
        sleep=sleep,
        stop=stop_after_attempt(attempts or policy.max_attempts),
        wait=wait,
        retry=retry_if_exception(should_retry),
        before_sleep=before_sleep,
        reraise=True,
    )
    return await retry_from(retrying, first, call)
