"""Every text the core names exists in every locale, with exactly the params it passes."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

from bridge.core.effects import AnswerCallback, PostText
from bridge.core.presence import STATUS_KEYS, STOP_REASON_KEYS
from bridge.core.state import ActivityKind
from bridge.core.text import Text
from bridge.i18n import LOCALES, Translator, load_catalog, placeholders
from tests.unit.core.core_chaos import ChaosRun

CORE = Path(__file__).resolve().parents[3] / "bridge" / "core"


def render(t: Translator, key: str, params: Mapping[str, object]) -> str:
    flat = {k: render(t, v.key, v.params) if isinstance(v, Text) else v for k, v in params.items()}
    return t(key, **flat)


def texts_used(runs: list[ChaosRun]) -> list[Text]:
    found: list[Text] = []
    for run in runs:
        for s in run.steps:
            for e in s.effects:
                if isinstance(e, PostText):
                    found.append(Text(e.key, e.params))
                elif isinstance(e, AnswerCallback):
                    found.append(Text(e.key))
    return found


@pytest.mark.parametrize("locale", LOCALES)
def test_every_text_the_core_posts_renders(locale: str, chaos_runs: list[ChaosRun]) -> None:
    t, catalog = Translator(locale), load_catalog(locale)
    used = texts_used(chaos_runs)
    assert len({u.key for u in used}) >= 35  # the random runs reach nearly every line
    stack = list(used)
    while stack:
        text = stack.pop()
        assert text.key in catalog, text.key
        assert placeholders(catalog[text.key]) == set(text.params), text
        stack += [v for v in text.params.values() if isinstance(v, Text)]
        assert render(t, text.key, text.params)


def test_every_key_named_in_the_core_source_exists() -> None:
    catalog = load_catalog("zh_CN")
    named = set(STATUS_KEYS.values()) | set(STOP_REASON_KEYS.values()) | {"activity.none"}
    named |= {f"activity.{kind.value}" for kind in ActivityKind}
    named |= {f"time.{unit}" for unit in ("seconds", "minutes", "hours", "hours_minutes")}
    for path in CORE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                head = node.value.split(".")[0]
                if head in {"presence", "progress", "command", "card", "status"} and (
                    "." in node.value and " " not in node.value and not node.value.endswith(".")
                ):
                    named.add(node.value)
    missing = sorted(k for k in named if k not in catalog)
    assert missing == []


def test_time_left_rounds_up_and_time_passed_rounds_down() -> None:
    from bridge.core.text import Text, format_elapsed

    assert format_elapsed(899) == Text("time.minutes", {"n": 14})
    assert format_elapsed(899, round_up=True) == Text("time.minutes", {"n": 15})
    assert format_elapsed(0.4, round_up=True) == Text("time.seconds", {"n": 1})
    assert format_elapsed(3599, round_up=True) == Text("time.hours", {"n": 1})
