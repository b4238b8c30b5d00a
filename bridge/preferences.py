"""A conversation's kept preferences that are the operator's, not the agent's (`ops:`
names, such as the display name): the engine keeps them from the agent, the operator API
writes them. Shared by both, so it is a leaf. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

OPS_PREFIX: Final = "ops:"  # preferences of the operator's, never the agent's
DISPLAY_NAME_PREFERENCE: Final = OPS_PREFIX + "display_name"


def agent_choices(chosen: Mapping[str, str]) -> dict[str, str]:
    """A conversation's preferences without the operator's own (`ops:` names)."""
    return {name: value for name, value in chosen.items() if not name.startswith(OPS_PREFIX)}
