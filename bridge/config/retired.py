"""Settings the bridge no longer reads. One still set, in the environment or in `.env`, is
named: by check-config as a problem (exit 2), by `run` as a warning in its log at start,
so that it is never ignored silently. The words (what is used instead) are the operator's
language, `cli.problem.<code>` in translations/, like every other configuration problem;
docs/configuration.md lists them with the reason each went."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dotenv import dotenv_values

from bridge.config.checks import ConfigProblem


@dataclass(frozen=True)
class Retired:
    """`code`: `retired_fixed` (the bridge uses `value`), `retired_derived` (from
    `setting`) or `retired_replaced` (set `setting` instead); `why`: for the docs."""

    code: str
    why: str
    params: Mapping[str, str] = field(default_factory=dict)


_APP_SHARE = {"setting": "BRIDGE_FEISHU_APP_CALLS_PER_SECOND"}
_GIVE_UP = {"setting": "BRIDGE_DELIVERY_GIVE_UP_SECONDS"}

RETIRED: dict[str, Retired] = {
    "BRIDGE_PROGRESS_INTERVAL_SECONDS": Retired(
        "retired_fixed",
        "Spacing progress lines out kept the bridge under Feishu's limits; the call budget"
        " does that now, and a line still waiting gives way to a newer one, so more spacing"
        " only hid news. For fewer lines, BRIDGE_PRESENCE_STYLE=card shows progress in the"
        " card.",
        {"value": "3 s"},
    ),
    "BRIDGE_FEISHU_SENDS_PER_MINUTE": Retired(
        "retired_derived",
        "Feishu's published limit (1,000 a minute) is a constant. What an operator set it"
        " for, an instance's share of the app, follows BRIDGE_FEISHU_APP_CALLS_PER_SECOND:"
        " 1,000 × its share of 50.",
        _APP_SHARE,
    ),
    "BRIDGE_FEISHU_CHAT_CALLS_PER_SECOND": Retired(
        "retired_fixed",
        "Feishu's published limit (5 sends a second to one chat) is a constant; a chat is"
        " run by one instance at a time, so there is no share to set.",
        {"value": "5/s"},
    ),
    "BRIDGE_FEISHU_BUDGET_MARGIN": Retired(
        "retired_replaced",
        "The bridge paces itself to 80% of each limit, always. To leave room for other"
        " programs on the same app, give this instance a smaller share with"
        " BRIDGE_FEISHU_APP_CALLS_PER_SECOND.",
        _APP_SHARE,
    ),
    "BRIDGE_DELIVERY_FIRST_PROBE_SECONDS": Retired(
        "retired_derived",
        "A test knob. The first probe after Feishu's API fails comes after a sixtieth of"
        " BRIDGE_DELIVERY_GIVE_UP_SECONDS, at most 1 s (the old default).",
        _GIVE_UP,
    ),
    "BRIDGE_DELIVERY_MAX_PROBE_SECONDS": Retired(
        "retired_derived",
        "A test knob. The wait between probes doubles up to a quarter of"
        " BRIDGE_DELIVERY_GIVE_UP_SECONDS, at most 15 s (the old default).",
        _GIVE_UP,
    ),
}


def retired_problems(
    environ: Mapping[str, str] | None = None, env_file: Path | None = Path(".env")
) -> list[ConfigProblem]:
    """Every retired setting set in `environ` (default: this process's) or in `env_file`,
    names matched in any case, as the settings read them."""
    names = {name.upper() for name in (os.environ if environ is None else environ)}
    if env_file is not None and env_file.is_file():
        names |= {name.upper() for name in dotenv_values(env_file)}
    return [ConfigProblem(n, r.code, r.params) for n, r in RETIRED.items() if n in names]
