"""CircuitBreaker transitions with an injected clock."""

from __future__ import annotations

from bridge.feishu.delivery import MAX_COOLDOWN, MIN_COOLDOWN, BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_closed_allows_everything() -> None:
    breaker = CircuitBreaker(now=Clock())
    assert breaker.state is BreakerState.CLOSED
    assert all(breaker.allow() for _ in range(10))


def test_rate_limit_opens_for_the_suggested_wait() -> None:
    clock = Clock()
    breaker = CircuitBreaker(cooldown=30, now=clock)

    assert breaker.record_rate_limited(12) == 12
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow()

    clock.now += 11.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.state is BreakerState.HALF_OPEN


def test_default_window_when_feishu_gives_none_and_bounds() -> None:
    clock = Clock()
    breaker = CircuitBreaker(cooldown=30, now=clock)
    assert breaker.record_rate_limited(None) == 30
    assert breaker.record_rate_limited(0) == MIN_COOLDOWN
    assert breaker.record_rate_limited(10**6) == MAX_COOLDOWN


def test_half_open_lets_one_probe_through() -> None:
    clock = Clock()
    breaker = CircuitBreaker(cooldown=10, now=clock)
    breaker.record_rate_limited(None)
    clock.now += 10

    assert breaker.allow()  # the probe
    assert not breaker.allow()  # others wait for its outcome
    breaker.record_ok()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.allow()


def test_probe_rate_limited_again_reopens() -> None:
    clock = Clock()
    breaker = CircuitBreaker(cooldown=10, now=clock)
    breaker.record_rate_limited(None)
    clock.now += 10
    assert breaker.allow()

    breaker.record_rate_limited(5)
    assert breaker.state is BreakerState.OPEN
    clock.now += 5
    assert breaker.allow()


def test_lost_probe_expires() -> None:
    clock = Clock()
    breaker = CircuitBreaker(cooldown=10, now=clock)
    breaker.record_rate_limited(None)
    clock.now += 10
    assert breaker.allow()  # probe whose task is then cancelled, never reporting
    clock.now += 9
    assert not breaker.allow()
    clock.now += 1
    assert breaker.allow()


def test_late_success_does_not_close_an_open_breaker() -> None:
    clock = Clock()
    breaker = CircuitBreaker(cooldown=10, now=clock)
    breaker.record_rate_limited(None)
    breaker.record_ok()  # a call that started before the limit hit
    assert breaker.state is BreakerState.OPEN
