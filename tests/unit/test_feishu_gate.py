"""The delivery gate's two log lines, as an operator of a bridge serving several apps reads
them: whose Feishu went down, and when it came back."""

from __future__ import annotations

import itertools
import logging
import random

import pytest

from bridge.feishu.delivery import FeishuGate
from bridge.feishu.errors import ServerError


async def test_the_gate_names_its_app_when_feishu_goes_down_and_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ticks = itertools.count(0.0, 10.0)  # each look at the clock: ten seconds on (no waiting)
    gate = FeishuGate(lambda: next(ticks), random.Random(0), app="b")
    answers = iter([ServerError(-1, "down", http_status=503), "om_1"])

    async def call() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    caplog.set_level(logging.WARNING, logger="bridge.feishu")
    assert await gate.attempt(call, owed_since=0.0) == "om_1"
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "app b: Feishu looks down (ServerError); owed posts wait for it"
    assert lines[1].startswith("app b: Feishu answers again after ")
    assert len(lines) == 2
