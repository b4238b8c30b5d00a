"""Configuration: one pydantic-settings model, read once in the composition root.

Every field maps to the environment variable of the same name in upper case
(``feishu_app_id`` ↔ ``FEISHU_APP_ID``); an optional ``.env`` file is read too.
The names are the public contract documented in docs/configuration.md.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bridge.config_budget import FeishuBudgetSettings
from bridge.config_cluster import (
    INSTANCE_ID_HELP,
    LEASE_HELP,
    check_instance_id,
    default_instance_id,
)
from bridge.config_commands import parse_named_list, profile_name, split_command
from bridge.config_schedules import (
    MIN_INTERVAL_HELP,
    SCHEDULES_HELP,
    TIMEZONE_HELP,
    ScheduleEntry,
    check_intervals,
    check_timezone,
    schedules_from_env,
)
from bridge.config_voice import VOICE_HELP, VOICE_MAX_HELP, VoiceChoice
from bridge.loops import EVENT_LOOP_HELP

FEISHU_DOMAIN = "https://open.feishu.cn"
LARK_DOMAIN = "https://open.larksuite.com"
_DOMAIN_ALIASES = {"feishu": FEISHU_DOMAIN, "lark": LARK_DOMAIN}

CommaList = Annotated[tuple[str, ...], NoDecode]
# `name=value;name=value` (BRIDGE_AGENTS, BRIDGE_WORKSPACES): the first is the default.
NamedList = Annotated[tuple[tuple[str, str], ...], NoDecode]

# Settings renamed: the old name is still read (the new one wins), and documented as such.
OLD_NAMES: dict[str, str] = {"BRIDGE_MAX_CONVERSATIONS": "BRIDGE_MAX_RUNNING_TURNS"}


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("feishu-presence-bridge", appauthor=False))


class Settings(BaseSettings, FeishuBudgetSettings):
    """All settings of the bridge. Timings are float seconds so tests can use milliseconds."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        case_sensitive=False,
    )

    # --- Feishu app -------------------------------------------------------------------------
    feishu_app_id: str | None = Field(default=None, description="The app's App ID (cli_…).")
    feishu_app_secret: SecretStr | None = Field(default=None, description="The app's App Secret.")
    feishu_domain: str = Field(
        default=FEISHU_DOMAIN,
        description="Open Platform base URL; `feishu`, `lark`, or any http(s) URL.",
    )
    feishu_event_mode: Literal["websocket", "webhook"] = Field(
        default="websocket", description="How events arrive: long connection or request URL."
    )
    feishu_encrypt_key: SecretStr | None = Field(
        default=None, description="Event encrypt key (webhook mode; also enables signatures)."
    )
    feishu_verification_token: SecretStr | None = Field(
        default=None, description="Event verification token (webhook mode)."
    )

    # --- HTTP server and storage ------------------------------------------------------------
    bridge_host: str = Field(
        default="127.0.0.1", description="Address the Feishu listener (webhook, /healthz) binds."
    )
    bridge_port: int = Field(
        default=8080, ge=0, le=65535, description="Port of the Feishu listener."
    )
    bridge_data_dir: Path = Field(
        default_factory=_default_data_dir, description="Folder holding the SQLite store."
    )
    bridge_database_url: SecretStr | None = Field(
        default=None,
        description="PostgreSQL database of the store instead of the SQLite file, e.g."
        " `postgresql://bridge:<password>@db.internal:5432/bridge` (a secret: it holds the"
        " password); unset: SQLite in BRIDGE_DATA_DIR.",
    )
    bridge_lease_seconds: float = Field(default=15.0, gt=0, description=LEASE_HELP)
    bridge_instance_id: Annotated[str, AfterValidator(check_instance_id)] = Field(
        default_factory=default_instance_id, description=INSTANCE_ID_HELP
    )
    bridge_locale: Literal["zh_CN", "en_US"] = Field(
        default="zh_CN", description="Language of every text the bridge shows."
    )
    bridge_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level."
    )
    bridge_event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop", description=EVENT_LOOP_HELP
    )
    bridge_ack_emoji: str = Field(
        default="OnIt", min_length=1, description="Feishu emoji_type of the ack reaction."
    )

    # --- Agent runtime ----------------------------------------------------------------------
    bridge_agent_command: str = Field(
        default="claude-agent-acp",
        description="The ACP agent command line, split like a shell would.",
    )
    bridge_workdir: Path = Field(
        default_factory=Path.cwd, description="Working directory of the agent."
    )
    bridge_agents: NamedList = Field(
        default=(),
        description="Agent profiles a chat can switch between with /agent, e.g."
        " `claude=claude-agent-acp;codex=codex-acp` (the first is the default); unset: the one"
        " agent of BRIDGE_AGENT_COMMAND.",
    )
    bridge_workspaces: NamedList = Field(
        default=(),
        description="Named folders a chat can move to with /cd, e.g. `app=/srv/app;docs=/srv/docs`"
        " (the first is the default); unset: the one folder of BRIDGE_WORKDIR.",
    )
    bridge_max_attachment_mb: int = Field(
        default=20,
        ge=1,
        le=1024,
        description="Largest image or file (MB) a user may send the agent; past it, one line"
        " says the limit.",
    )
    bridge_voice: VoiceChoice | None = Field(default=None, description=VOICE_HELP)
    bridge_voice_max_seconds: int = Field(default=300, ge=1, le=3600, description=VOICE_MAX_HELP)
    bridge_usage_footer: bool = Field(
        default=False,
        description="End each turn's last message with a line of context use (and cost) when"
        " the agent reports it.",
    )
    bridge_max_agents: int = Field(
        default=2, ge=1, le=64, description="Most agent processes running at once."
    )
    bridge_sessions_per_agent: int = Field(
        default=0,
        ge=0,
        description="Most conversations one agent process serves (0: no limit).",
    )
    bridge_elicitation: bool = Field(
        default=False, description="Declare ACP elicitation (unstable) to the agent."
    )
    bridge_agent_sandbox: Literal["none", "bwrap"] = Field(
        default="none",
        description=(
            "Run every agent under bubblewrap (`bwrap`): its own pid namespace, the workdir and"
            " HOME writable, the system read-only, the bridge's data and working folders"
            " hidden. Default `none`; the deploy files set `bwrap`."
        ),
    )
    bridge_allow_root_without_sandbox: bool = Field(
        default=False,
        description="Let the bridge start as root with BRIDGE_AGENT_SANDBOX=none. Refused"
        " otherwise: the agent's shell would be root and could read every process's memory and"
        " environment, the bridge's secrets included. Turn the sandbox on instead"
        " (docs/sandbox.md).",
    )
    bridge_agent_sandbox_hidden: CommaList = Field(
        default=(),
        description=(
            "Comma-separated further paths a sandboxed agent never sees (a secrets file or its"
            " folder), besides the data folder and the bridge's working folder."
        ),
    )

    # --- Conversation behaviour -------------------------------------------------------------
    bridge_first_hint_seconds: float = Field(
        default=5.0, gt=0, description="One early 'working on it' line if nothing shows by then."
    )
    bridge_heartbeat_seconds: float = Field(
        default=60.0, gt=0, description="A heartbeat line after this much silence while running."
    )
    bridge_stale_seconds: float = Field(
        default=600.0, gt=0, description="No sign of life this long: tell the user (not killed)."
    )
    bridge_approval_timeout_seconds: float = Field(
        default=1800.0, gt=0, description="Unanswered approval/question: reminder at half, cancel."
    )
    bridge_finish_grace_seconds: float = Field(
        default=3.0, ge=0, description="Grace after a non-final stop reason before the end line."
    )
    bridge_progress_interval_seconds: float = Field(
        default=3.0, ge=0, description="Least time between two relayed progress lines."
    )
    bridge_cancel_notice_seconds: float = Field(
        default=5.0, gt=0, description="A stop the agent has not confirmed by then: say so."
    )
    bridge_max_event_age_seconds: float = Field(
        default=43200.0,
        ge=0,
        description="Drop a message event older than this (a replay); 0 turns the check off.",
    )
    bridge_cancel_limit_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A stop not confirmed by then: end the round and restart the agent.",
    )
    bridge_received_text: bool = Field(
        default=False, description="Also post a 'received' line after the ack reaction."
    )
    bridge_presence_style: Literal["messages", "card"] = Field(
        default="messages",
        description="How a turn shows it is working: lines in the chat, or one live status"
        " card per turn.",
    )
    bridge_card_update_interval_seconds: float = Field(
        default=0.5, gt=0, description="Least time between two updates of one status card."
    )
    bridge_delivery_first_probe_seconds: float = Field(
        default=1.0,
        gt=0,
        description="When Feishu's API fails (5xx, 429, timeout), the wait before the first"
        " probe; owed posts wait for it instead of retrying on their own.",
    )
    bridge_delivery_max_probe_seconds: float = Field(
        default=15.0, gt=0, description="The longest wait between two probes while it is down."
    )
    bridge_delivery_give_up_seconds: float = Field(
        default=3600.0,
        gt=0,
        le=3600.0,
        description="A post Feishu has not taken after this long is given up and its chat told"
        " (at most an hour: Feishu's uuid de-duplication window).",
    )
    bridge_allowed_users: CommaList = Field(
        default=(), description="Comma-separated open_ids allowed to talk to the bot."
    )
    bridge_allowed_chats: CommaList = Field(
        default=(), description="Comma-separated chat_ids the bot answers in."
    )
    bridge_approvers: CommaList = Field(
        default=(), description="Comma-separated open_ids who may answer any approval."
    )
    bridge_max_running_turns: int = Field(
        default=64,
        ge=1,
        # The setting's first name, still read so existing deployments keep their limit.
        validation_alias=AliasChoices("bridge_max_running_turns", "bridge_max_conversations"),
        description="Turns that may run at once (at most one per conversation).",
    )

    # --- Scheduled prompts -------------------------------------------------------------------
    bridge_timezone: Annotated[str, AfterValidator(check_timezone)] = Field(
        default="", description=TIMEZONE_HELP
    )
    bridge_schedule_min_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description=MIN_INTERVAL_HELP,
    )
    bridge_schedules: Annotated[
        tuple[ScheduleEntry, ...], NoDecode, BeforeValidator(schedules_from_env)
    ] = Field(default=(), description=SCHEDULES_HELP)

    # --- Who can reach the agent, who can approve -------------------------------------------
    bridge_allow_all: bool = Field(
        default=False,
        description="Allow everyone who can message the bot (both allow-lists empty).",
    )
    bridge_requester_may_approve: bool = Field(
        default=True, description="The requester may answer their own approval cards."
    )

    # --- Operator API -----------------------------------------------------------------------
    bridge_ops_host: str = Field(
        default="127.0.0.1", description="Address the operator API listener binds."
    )
    bridge_ops_port: int = Field(
        default=8081, ge=0, le=65535, description="Port of the operator API listener (0: any)."
    )
    bridge_ops_token: SecretStr | None = Field(
        default=None, description="Bearer token every operator route but /healthz requires."
    )

    @field_validator(
        "feishu_app_id",
        "feishu_app_secret",
        "feishu_encrypt_key",
        "feishu_verification_token",
        "bridge_ops_token",
        "bridge_database_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # `FEISHU_VERIFICATION_TOKEN=` in an env file must not quietly turn a check off.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("bridge_data_dir", "bridge_workdir", mode="before")
    @classmethod
    def _empty_path_is_default(cls, value: Any, info: ValidationInfo) -> Any:
        # An empty path would silently mean "the current directory".
        if isinstance(value, str) and not value.strip():
            return _default_data_dir() if info.field_name == "bridge_data_dir" else Path.cwd()
        return value

    @field_validator("bridge_database_url")
    @classmethod
    def _database_url(cls, value: SecretStr | None) -> SecretStr | None:
        # The message never quotes the value: it holds a password.
        if value is None:
            return None
        url = value.get_secret_value().strip()
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a URL starting with postgresql:// or postgres://")
        return SecretStr(url)

    @field_validator("feishu_domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        value = _DOMAIN_ALIASES.get(value.strip().lower(), value.strip())
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be `feishu`, `lark` or an http(s) URL")
        return value.rstrip("/")

    @field_validator(
        "bridge_allowed_users",
        "bridge_allowed_chats",
        "bridge_approvers",
        "bridge_agent_sandbox_hidden",
        mode="before",
    )
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return value

    @model_validator(mode="after")
    def _schedules_not_too_often(self) -> Settings:
        check_intervals(self.bridge_schedules, self.bridge_schedule_min_interval_seconds)
        return self

    @field_validator("bridge_agent_command")
    @classmethod
    def _command(cls, value: str) -> str:
        split_command(value)
        return value

    @field_validator("bridge_agents", "bridge_workspaces", mode="before")
    @classmethod
    def _named_list(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value
        pairs = parse_named_list(value)
        if info.field_name == "bridge_agents":
            for _, command in pairs:
                split_command(command)
        return pairs

    @property
    def agent_profiles(self) -> tuple[tuple[str, list[str]], ...]:
        """(name, argv) of every agent a chat may use; the first is the default."""
        if self.bridge_agents:
            return tuple((name, shlex.split(command)) for name, command in self.bridge_agents)
        return ((profile_name(self.agent_argv), self.agent_argv),)

    @property
    def workspace_roots(self) -> tuple[tuple[str, Path], ...]:
        """(name, resolved folder) of every workspace; the first is the default."""
        if self.bridge_workspaces:
            return tuple((n, Path(p).expanduser().resolve()) for n, p in self.bridge_workspaces)
        workdir = self.bridge_workdir.resolve()
        return ((workdir.name or "workdir", workdir),)

    @property
    def agent_argv(self) -> list[str]:
        return shlex.split(self.bridge_agent_command)

    @property
    def db_path(self) -> Path:
        return self.bridge_data_dir / "bridge.sqlite3"
