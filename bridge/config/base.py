"""What every section of the settings shares: where values come from, the shapes of values
more than one section reads, and the operator's reason to change a setting (`why`)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[tuple[str, ...], NoDecode]
# `name=value;name=value` (BRIDGE_AGENTS, BRIDGE_WORKSPACES): the first is the default.
NamedList = Annotated[tuple[tuple[str, str], ...], NoDecode]


class Section(BaseSettings):
    """One section of the settings. Each field is read from the environment variable of the
    same name in upper case (`bridge_port` ↔ `BRIDGE_PORT`, any case), else from `.env` in
    the working folder; names are unique across sections, so the variables stay one flat
    list. `title` heads the section in docs/configuration.md."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        case_sensitive=False,
    )

    title: ClassVar[str] = ""


def why(text: str) -> dict[str, Any]:
    """A field's `json_schema_extra`: why an operator would change it (docs/configuration.md)."""
    return {"why": text}


def clock(text: str) -> dict[str, Any]:
    """A field's `json_schema_extra` for a setting that only moves one of the product's own
    clocks (when a hint is due, how long Feishu's `uuid` window is, ...). Its default is the
    contract; it is kept so that tests, demos and benchmarks can run that clock in
    milliseconds, under the name earlier versions documented. Not an operator's setting:
    docs/configuration.md lists it apart. `text`: when one would still change it."""
    return {"why": text, "clock": True}


def is_clock(info: Any) -> bool:
    extra = getattr(info, "json_schema_extra", None)
    return isinstance(extra, dict) and bool(extra.get("clock"))


def comma_list(value: Any) -> Any:
    """`a, b,,c` → ("a", "b", "c"): spaces and empty items dropped."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


def empty_is_unset(value: Any) -> Any:
    """`FEISHU_VERIFICATION_TOKEN=` in an env file must not quietly turn a check off."""
    if isinstance(value, str) and not value.strip():
        return None
    return value
