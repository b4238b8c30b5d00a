"""All settings: one object made of sections, read once in the composition root.

Every field of every section is read from the environment variable of the same name in
upper case (`feishu_app_id` ↔ `FEISHU_APP_ID`), else from an optional `.env` file; the names
are the public contract documented in docs/configuration.md, one flat list. In code they
are grouped: `settings.feishu.feishu_app_id`, `settings.presence.bridge_stale_seconds`, and
each consumer is handed the section it reads. A field keeps its variable's name, so one
name leads from the environment through the docs to every reader.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails

from bridge.config.access import AccessSection
from bridge.config.agent import AgentSection
from bridge.config.base import Section, is_clock
from bridge.config.budget import BudgetSection
from bridge.config.cluster import ClusterSection
from bridge.config.feishu import FeishuSection
from bridge.config.ops import OpsSection
from bridge.config.presence import PresenceSection
from bridge.config.schedules import SchedulesSection
from bridge.config.store import StoreSection
from bridge.config.voice import VoiceSection

# Section name → its model, in the order docs/configuration.md lists them.
SECTIONS: dict[str, type[Section]] = {
    "feishu": FeishuSection,
    "access": AccessSection,
    "agent": AgentSection,
    "presence": PresenceSection,
    "voice": VoiceSection,
    "schedules": SchedulesSection,
    "budget": BudgetSection,
    "store": StoreSection,
    "cluster": ClusterSection,
    "ops": OpsSection,
}

# Settings renamed: the old name is still read (the new one wins), and documented as such.
OLD_NAMES: dict[str, str] = {"BRIDGE_MAX_CONVERSATIONS": "BRIDGE_MAX_RUNNING_TURNS"}


class Settings(BaseModel):
    """All settings of the bridge. Timings are float seconds so tests can use milliseconds."""

    model_config = ConfigDict(frozen=True)

    feishu: FeishuSection
    access: AccessSection
    agent: AgentSection
    presence: PresenceSection
    voice: VoiceSection
    schedules: SchedulesSection
    budget: BudgetSection
    store: StoreSection
    cluster: ClusterSection
    ops: OpsSection

    def __init__(self, **values: Any) -> None:
        """`Settings(bridge_port=0, …)`: values by their flat names win over the environment;
        `_env_file=None` reads no `.env`. A whole section may be given by its name. The
        problems of every section are raised at once, as one ValidationError."""
        super().__init__(**_read_sections(values))


def env_fields() -> dict[str, tuple[str, str, FieldInfo]]:
    """Variable name → (section, field, FieldInfo) of every setting, in the docs' order."""
    return {
        name.upper(): (section, name, info)
        for section, model in SECTIONS.items()
        for name, info in model.model_fields.items()
    }


def operator_fields() -> dict[str, tuple[str, str, FieldInfo]]:
    """The settings an operator chooses: every one but the product's clocks (`base.clock`)."""
    return {name: found for name, found in env_fields().items() if not is_clock(found[2])}


def _names(name: str, info: FieldInfo) -> list[str]:
    """A field's name and the other names it is read under (OLD_NAMES)."""
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return [name, *(str(choice) for choice in alias.choices)]
    return [name]


_OWNER: dict[str, str] = {
    known: section
    for section, model in SECTIONS.items()
    for name, info in model.model_fields.items()
    for known in _names(name, info)
}
if len(env_fields()) != sum(len(m.model_fields) for m in SECTIONS.values()):
    raise TypeError("two sections declare a setting of the same name")


def _read_sections(values: dict[str, Any]) -> dict[str, Any]:
    options = {k: v for k, v in values.items() if k.startswith("_")}  # `_env_file` and kin
    given: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    sections: dict[str, Any] = {}
    for key, value in values.items():
        if key.startswith("_"):
            continue
        if key in SECTIONS:
            sections[key] = value
        elif key.lower() in _OWNER:
            given[_OWNER[key.lower()]][key] = value
        else:
            raise TypeError(f"no setting is named {key!r}")
    errors: list[InitErrorDetails] = []
    for section, model in SECTIONS.items():
        if section in sections:
            continue
        try:
            sections[section] = model(**options, **given[section])
        except ValidationError as exc:
            errors += [_again(error) for error in exc.errors()]
    if errors:
        raise ValidationError.from_exception_data(Settings.__name__, errors)
    return sections


def _again(error: Any) -> InitErrorDetails:
    """One section's error as a line of the whole model's."""
    line: InitErrorDetails = {"type": error["type"], "loc": error["loc"], "input": error["input"]}
    if "ctx" in error:
        line["ctx"] = error["ctx"]
    return line
