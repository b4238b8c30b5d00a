"""User-visible texts, looked up by key in translations/<locale>.json.

Code never holds a user-visible sentence; it names a key and passes parameters (the core's
`Text` values, possibly nested, become sentences through `render_text`). zh_CN is the
default and the reference catalog; every locale must have the same keys.
"""

from __future__ import annotations

import json
import string
from functools import cache
from pathlib import Path
from typing import Any

from bridge.core.text import Params, Text

DEFAULT_LOCALE = "zh_CN"
LOCALES = ("zh_CN", "en_US")


def catalog_dir() -> Path:
    """translations/ beside the package in a checkout, or bundled inside it in a wheel."""
    bundled = Path(__file__).parent / "_translations"
    if bundled.is_dir():
        return bundled
    return Path(__file__).resolve().parent.parent / "translations"


@cache
def load_catalog(locale: str) -> dict[str, str]:
    path = catalog_dir() / f"{locale}.json"
    data: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
    return data


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


class Translator:
    """Renders a key in one locale; a key missing there falls back to zh_CN, then fails loudly."""

    def __init__(self, locale: str = DEFAULT_LOCALE) -> None:
        if locale not in LOCALES:
            raise ValueError(f"unknown locale {locale!r}; expected one of {LOCALES}")
        self.locale = locale
        self._catalog = load_catalog(locale)
        self._fallback = load_catalog(DEFAULT_LOCALE)

    def __call__(self, key: str, **params: Any) -> str:
        template = self._catalog.get(key) or self._fallback.get(key)
        if template is None:
            raise KeyError(f"no text for key {key!r}")
        return template.format_map(params) if params else template


def render(t: Translator, key: str, params: Params) -> str:
    return t(key, **{name: _value(t, value) for name, value in params.items()})


def render_text(t: Translator, text: Text) -> str:
    return render(t, text.key, text.params)


def _value(t: Translator, value: str | int | Text) -> str | int:
    return render_text(t, value) if isinstance(value, Text) else value
