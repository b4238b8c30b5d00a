"""The bridge's settings: a package of sections (feishu, access, agent, presence, voice,
schedules, budget, store, cluster, ops), assembled into one `Settings` in settings.py and
checked in checks.py. Every name is documented in docs/configuration.md."""

from bridge.config.feishu import FEISHU_DOMAIN, LARK_DOMAIN
from bridge.config.settings import OLD_NAMES, SECTIONS, Settings, env_fields, operator_fields
from bridge.config.tuning import Tuning

__all__ = [
    "FEISHU_DOMAIN",
    "LARK_DOMAIN",
    "OLD_NAMES",
    "SECTIONS",
    "Settings",
    "Tuning",
    "env_fields",
    "operator_fields",
]
