"""The agents the bridge starts, the folders they work in, how many run at once, and the
sandbox they run in."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, BeforeValidator, Field, ValidationInfo, field_validator

from bridge.config.base import CommaList, NamedList, Section, comma_list, why
from bridge.config.commands import agent_profiles, named_list, split_command, workspace_roots


class AgentSection(Section):
    """The ACP agent command (or several, for /agent), the workspace (or several, for /cd),
    the limits on agent processes and turns, and the bubblewrap sandbox."""

    title: ClassVar[str] = "Agents and workspaces"

    bridge_agent_command: str = Field(
        default="claude-agent-acp",
        description="The ACP agent command line, split like a shell would.",
        json_schema_extra=why(
            "To run another agent (Codex, Gemini, Qwen…), or pin the agent's version or path."
        ),
    )
    bridge_workdir: Path = Field(
        default_factory=Path.cwd,
        description="Working directory of the agent.",
        json_schema_extra=why(
            "In every deployment: the repository the agent works on (never the folder holding"
            " the bridge's data or `.env`)."
        ),
    )
    bridge_agents: NamedList = Field(
        default=(),
        description="Agent profiles a chat can switch between with /agent, e.g."
        " `claude=claude-agent-acp;codex=codex-acp` (the first is the default); unset: the one"
        " agent of BRIDGE_AGENT_COMMAND.",
        json_schema_extra=why("To let users choose between several agents in the chat."),
    )
    bridge_workspaces: NamedList = Field(
        default=(),
        description="Named folders a chat can move to with /cd, e.g. `app=/srv/app;docs=/srv/docs`"
        " (the first is the default); unset: the one folder of BRIDGE_WORKDIR.",
        json_schema_extra=why("To let users move a conversation between several repositories."),
    )
    bridge_max_agents: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Most agent processes running at once.",
        json_schema_extra=why(
            "Raise it when conversations wait for an agent and the host has memory to spare;"
            " lower it on a small host."
        ),
    )
    bridge_sessions_per_agent: int = Field(
        default=0,
        ge=0,
        description="Most conversations one agent process serves (0: no limit).",
        json_schema_extra=why(
            "Set a limit when one agent process slows down serving many conversations."
        ),
    )
    bridge_max_running_turns: int = Field(
        default=64,
        ge=1,
        # The setting's first name, still read so existing deployments keep their limit.
        validation_alias=AliasChoices("bridge_max_running_turns", "bridge_max_conversations"),
        description="Turns that may run at once (at most one per conversation).",
        json_schema_extra=why(
            "Lower it to bound what runs at once (model spend, CPU); messages beyond it wait."
        ),
    )
    bridge_elicitation: bool = Field(
        default=False,
        description="Declare ACP elicitation (unstable) to the agent.",
        json_schema_extra=why(
            "For an agent that asks questions as forms, if an unstable part of ACP is fine."
        ),
    )
    bridge_agent_sandbox: Literal["none", "bwrap"] = Field(
        default="none",
        description=(
            "Run every agent under bubblewrap (`bwrap`): its own pid namespace, the workdir and"
            " HOME writable, the system read-only, the bridge's data and working folders"
            " hidden. Default `none`; the deploy files set `bwrap`."
        ),
        json_schema_extra=why(
            "`bwrap` wherever the agent must not see the bridge's secrets and store (every"
            " deployment); `none` only where bubblewrap cannot run."
        ),
    )
    bridge_allow_root_without_sandbox: bool = Field(
        default=False,
        description="Let the bridge start as root with BRIDGE_AGENT_SANDBOX=none. Refused"
        " otherwise: the agent's shell would be root and could read every process's memory and"
        " environment, the bridge's secrets included. Turn the sandbox on instead"
        " (docs/sandbox.md).",
        json_schema_extra=why(
            "Only to run as root without a sandbox on purpose (a throw-away container)."
        ),
    )
    bridge_agent_sandbox_hidden: Annotated[CommaList, BeforeValidator(comma_list)] = Field(
        default=(),
        description=(
            "Comma-separated further paths a sandboxed agent never sees (a secrets file or its"
            " folder), besides the data folder and the bridge's working folder."
        ),
        json_schema_extra=why(
            "When secrets or other private files live elsewhere than those two folders (the"
            " systemd unit hides /etc/feishu-bridge)."
        ),
    )
    bridge_max_attachment_mb: int = Field(
        default=20,
        ge=1,
        le=1024,
        description="Largest image or file (MB) a user may send the agent; past it, one line"
        " says the limit.",
        json_schema_extra=why(
            "Lower it to keep big uploads off the disk and out of the agent's context; raise"
            " it for large files."
        ),
    )

    @field_validator("bridge_workdir", mode="before")
    @classmethod
    def _empty_path_is_default(cls, value: Any) -> Any:
        # An empty path would silently mean "the current directory".
        if isinstance(value, str) and not value.strip():
            return Path.cwd()
        return value

    @field_validator("bridge_agent_command")
    @classmethod
    def _command(cls, value: str) -> str:
        split_command(value)
        return value

    @field_validator("bridge_agents", "bridge_workspaces", mode="before")
    @classmethod
    def _named_list(cls, value: Any, info: ValidationInfo) -> Any:
        return named_list(value, commands=info.field_name == "bridge_agents")

    @property
    def agent_profiles(self) -> tuple[tuple[str, list[str]], ...]:
        """(name, argv) of every agent a chat may use; the first is the default."""
        return agent_profiles(self.bridge_agents, self.bridge_agent_command)

    @property
    def workspace_roots(self) -> tuple[tuple[str, Path], ...]:
        """(name, resolved folder) of every workspace; the first is the default."""
        return workspace_roots(self.bridge_workspaces, self.bridge_workdir)

    @property
    def agent_argv(self) -> list[str]:
        return shlex.split(self.bridge_agent_command)
