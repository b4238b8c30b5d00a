"""Agents known to leave a tail after a cancel: the one table (docs/agents.md, "Known agent
quirks", `cancel-tail`), matched by the `agentInfo` name and version an agent reports in its
`initialize` answer.

A tail is the cancelled turn's leftover result handed to the next prompt (an immediate empty
`end_turn`), after which every answer is one turn behind. Only a new process clears it, so
after a cancel the bridge restarts such an agent and reloads the session before the next
prompt (or lets it go for a new one, when the agent cannot load it). Every other agent is
cancelled in place: the next prompt goes to the same process and session. A tail from an
agent not in the table is still caught on that prompt (see `turns.run_prompt`); the agent
is then remembered here for as long as the bridge runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from acp.schema import Implementation
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TailAgent:
    name: str  # `agentInfo.name` as the agent reports it (its npm package)
    versions: str  # the reported versions that leave a tail, as a specifier set (`>=0.23.1`)

    def matches(self, name: str, version: str) -> bool:
        if name != self.name:
            return False
        try:
            return Version(version) in SpecifierSet(self.versions)
        except (InvalidVersion, InvalidSpecifier):
            return False  # a version we cannot read: the tail check on the next prompt stays


# claude-agent-acp answers the prompt after a cancelled one with the cancelled turn's result
# (agentclientprotocol/claude-agent-acp#551): seen at 0.23.1 under its Zed name. Under its
# current name 0.101.0 settled a cancel in place in our tests, but the tail has come and gone
# with its releases, and one turn behind costs every later answer while a restart costs
# under a second: Claude's adapter is restarted after a cancel, whatever its release.
CANCEL_TAIL_AGENTS: tuple[TailAgent, ...] = (
    TailAgent("@zed-industries/claude-agent-acp", ">=0.23.1"),
    TailAgent("@agentclientprotocol/claude-agent-acp", ">=0"),
)


class CancelTails:
    """The table, and the agents this bridge has seen leave a tail since it started."""

    def __init__(self, table: tuple[TailAgent, ...] = CANCEL_TAIL_AGENTS) -> None:
        self._table = table
        self._seen: set[tuple[str, str]] = set()

    def leaves_tail(self, info: Implementation | None) -> bool:
        if info is None:
            return False
        if (info.name, info.version) in self._seen:
            return True
        return any(row.matches(info.name, info.version) for row in self._table)

    def saw_tail(self, info: Implementation | None) -> None:
        """A tail came from this agent: from now on it is restarted after a cancel."""
        if info is None or self.leaves_tail(info):
            return
        self._seen.add((info.name, info.version))
        logger.warning(
            "agent %s %s leaves a tail after a cancel and is not in the cancel-tail table"
            " (docs/agents.md); it is restarted after each cancel from now on",
            info.name[:64],
            info.version[:32],
        )
