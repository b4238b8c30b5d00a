"""`/status` `apps.<name>.problem`: what is wrong with one app, said so an operator knows
which app and why, never with a secret in it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bridge.ops.app_health import AppFacts, health, problems, without_secrets

UP = {"down": 0.0, "down_seconds": 0.0, "probes": 0.0, "failures": 0.0}
NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def _budget(rate: float, limited: int = 0) -> dict[str, Any]:
    return {"rate": rate, "limit": 40.0, "rate_limited": limited}


HEALTHY = AppFacts(
    started=True,
    bot_open_id="ou_bot",
    identity_error=None,
    long_connection="connected",
    long_connection_error=None,
    gate=UP,
    budget=_budget(40.0),
)


def test_a_healthy_app_has_no_problem() -> None:
    assert health(HEALTHY, now=NOW) == {"healthy": True, "problem": None}
    webhook = replace(HEALTHY, long_connection=None)
    assert problems(webhook, now=NOW) == []
    # Before its start nothing was tried: a missing identity is not yet a problem.
    assert problems(replace(HEALTHY, started=False, bot_open_id=None), now=NOW) == []


def test_a_wrong_secret_says_the_identity_and_the_long_connection_failed() -> None:
    facts = replace(
        HEALTHY,
        bot_open_id=None,
        identity_error="BusinessError: code=10014 msg='app secret invalid'",
        long_connection="failed",
        long_connection_error="ClientException: code=1000040343 msg='app secret invalid'",
    )
    found = problems(facts, now=NOW)
    assert found == [
        "cannot fetch the bot's identity (a wrong app id or secret, or the app lacks the bot"
        " capability or its scope): BusinessError: code=10014 msg='app secret invalid'; group"
        " @-mentions are not recognised",
        "its long connection failed and is not retried (Feishu refused it: check the app id"
        " and secret and the event subscription): ClientException: code=1000040343"
        " msg='app secret invalid'; no event comes in",
    ]
    assert health(facts, now=NOW) == {"healthy": False, "problem": "; ".join(found)}


def test_a_lost_long_connection_is_said_while_it_reconnects() -> None:
    found = problems(replace(HEALTHY, long_connection="reconnecting"), now=NOW)
    assert found == ["its long connection is lost; reconnecting"]


def test_feishu_down_for_the_app_says_since_when_and_what_waits() -> None:
    gate = {"down": 1.0, "down_seconds": 80.0, "probes": 4.0, "failures": 12.0}
    assert problems(replace(HEALTHY, gate=gate), now=NOW) == [
        "Feishu's API is taken to be down for this app since 2023-11-14 22:12:00 UTC (80 s,"
        " 12 failed posts): its posts are owed and go out, in order, when it answers again"
    ]


def test_a_budget_slowed_by_429s_is_rate_limited_until_it_grows_back() -> None:
    slowed = replace(HEALTHY, budget=_budget(10.0, limited=3))
    assert problems(slowed, now=NOW) == [
        "rate limited by Feishu (429s: 3): calls slowed to 10.0/s of 40.0/s until they stop"
    ]
    # 429s long ago, the pace grown back: no longer a problem.
    assert problems(replace(HEALTHY, budget=_budget(40.0, limited=3)), now=NOW) == []


def test_an_error_text_never_carries_the_apps_secrets() -> None:
    text = "refused: app_secret=s3cret-value token=tok-1"
    assert without_secrets(text, ["s3cret-value", None, "tok-1"]) == (
        "refused: app_secret=*** token=***"
    )
    assert len(without_secrets("x" * 1000, [])) == 300
