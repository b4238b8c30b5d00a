from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bridge.i18n import LOCALES, Translator, load_catalog, placeholders

ROOT = Path(__file__).resolve().parents[2]


def test_every_locale_has_the_same_keys_and_placeholders() -> None:
    reference = load_catalog("zh_CN")
    for locale in LOCALES:
        catalog = load_catalog(locale)
        assert catalog.keys() == reference.keys(), locale
        for key, text in catalog.items():
            assert text.strip(), (locale, key)
            assert placeholders(text) == placeholders(reference[key]), (locale, key)


def test_contract_strings_are_exact() -> None:
    t = Translator("zh_CN")
    assert t("presence.waiting_approval") == "当前已暂停，等待你审批后继续。"
    assert t("presence.waiting_reply") == "当前已暂停，等待你回复后继续。"
    assert t("presence.ended_empty") == (
        "[系统] 本轮已结束，当前没有更多动作；如需继续，请直接发下一条消息。"
    )
    assert "正在处理" in t("presence.running_hint")
    assert "正在恢复" in t("presence.recovering")
    assert "请重发上一条消息" in t("presence.unrecoverable")
    assert t("presence.received") == "已收到，开始处理"


def test_unknown_key_fails_loudly() -> None:
    with pytest.raises(KeyError):
        Translator("en_US")("no.such.key")


def test_unknown_locale_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown locale"):
        Translator("fr_FR")


_CJK = re.compile(r"[\u4e00-\u9fff]")


def test_no_chinese_sentence_is_inline_in_the_package() -> None:
    """User-visible texts live in translations/: no CJK string literal in bridge/ code."""
    offenders = []
    # The emulator plays Feishu itself: its texts are Feishu's, not the bridge's.
    emulator = ROOT / "bridge" / "devtools" / "emulator"
    for path in (ROOT / "bridge").rglob("*.py"):
        if emulator in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and _CJK.search(node.value)
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
