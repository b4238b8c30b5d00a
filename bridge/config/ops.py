"""The operator's side of the process: the operator API's listener and token (read by
`feishu-bridge status` too), the log level and the event loop."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, SecretStr

from bridge.config.base import Section, empty_is_unset, why
from bridge.loops import EVENT_LOOP_HELP


class OpsSection(Section):
    """The operator API (`/status`, `/metrics`, `/events`, the console), the log, the loop."""

    title: ClassVar[str] = "Operator API and process"

    bridge_ops_host: str = Field(
        default="127.0.0.1",
        description="Address the operator API listener binds.",
        json_schema_extra=why(
            "`0.0.0.0` (with BRIDGE_OPS_TOKEN) when monitoring, or the other instances of a"
            " cluster, must reach it."
        ),
    )
    bridge_ops_port: int = Field(
        default=8081,
        ge=0,
        le=65535,
        description="Port of the operator API listener (0: any).",
        json_schema_extra=why("When 8081 is taken, or several instances share a host."),
    )
    bridge_ops_token: Annotated[SecretStr | None, BeforeValidator(empty_is_unset)] = Field(
        default=None,
        description="Bearer token every operator route but /healthz requires.",
        json_schema_extra=why(
            "Off loopback always, and on a shared host: the API shows every conversation's state."
        ),
    )
    bridge_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO",
        description="Log level.",
        json_schema_extra=why(
            "`DEBUG` while troubleshooting (ignored messages, the agent's stderr); `WARNING`"
            " for a quieter log."
        ),
    )
    bridge_event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop",
        description=EVENT_LOOP_HELP,
        json_schema_extra=why("`asyncio` if uvloop misbehaves on the platform."),
    )

    def status_url(self) -> str:
        """The operator API of the bridge this machine runs, as `feishu-bridge status` asks
        it: a listener bound everywhere is reached on loopback."""
        host = self.bridge_ops_host.strip() or "127.0.0.1"
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"http://{f'[{host}]' if ':' in host else host}:{self.bridge_ops_port}"
