"""Turn the core's text values (key + params, possibly nested) into sentences."""

from __future__ import annotations

from bridge.core.text import Params, Text
from bridge.i18n import Translator


def render(t: Translator, key: str, params: Params) -> str:
    return t(key, **{name: _value(t, value) for name, value in params.items()})


def render_text(t: Translator, text: Text) -> str:
    return render(t, text.key, text.params)


def _value(t: Translator, value: str | int | Text) -> str | int:
    return render_text(t, value) if isinstance(value, Text) else value
