"""The Feishu app the bridge acts as, and how its events reach the bridge; or the file of
several apps (bridge/config/apps_file.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, SecretStr, field_validator

from bridge.config.base import Section, clock, empty_is_unset, why

FEISHU_DOMAIN = "https://open.feishu.cn"
LARK_DOMAIN = "https://open.larksuite.com"
_DOMAIN_ALIASES = {"feishu": FEISHU_DOMAIN, "lark": LARK_DOMAIN}

# An empty value is unset (never an empty secret that quietly turns a check off).
OptionalSecret = Annotated[SecretStr | None, BeforeValidator(empty_is_unset)]


class FeishuSection(Section):
    """The app's credentials (from the developer console), the Open Platform it lives on, and
    the listener Feishu's events arrive at in webhook mode."""

    title: ClassVar[str] = "Feishu app"

    bridge_config_file: Annotated[Path | None, BeforeValidator(empty_is_unset)] = Field(
        default=None,
        description="A TOML file of several Feishu apps, the projects their chats work on and"
        " the routes between them (docs/operators/apps.md); it replaces the FEISHU_* app"
        " settings and the allow-lists, and gives each project's agent settings. Unset: the"
        " one app of FEISHU_APP_ID. `run` serves every app of it, each with its own long"
        " connection or webhook path, data and health (/status `apps`, /metrics `app`).",
        json_schema_extra=why("To serve several Feishu apps (bots) from one bridge."),
    )
    feishu_app_id: Annotated[str | None, BeforeValidator(empty_is_unset)] = Field(
        default=None,
        description="The app's App ID (cli_…).",
        json_schema_extra=why("Always: it names the app the bot is."),
    )
    feishu_app_secret: OptionalSecret = Field(
        default=None,
        description="The app's App Secret.",
        json_schema_extra=why("Always; again after rotating the secret in the console."),
    )
    feishu_domain: str = Field(
        default=FEISHU_DOMAIN,
        description="Open Platform base URL; `feishu`, `lark`, or any http(s) URL.",
        json_schema_extra=why(
            "`lark` for a Lark (international) tenant; a URL for a private deployment or the"
            " local emulator."
        ),
    )
    feishu_event_mode: Literal["websocket", "webhook"] = Field(
        default="websocket",
        description="How events arrive: long connection or request URL.",
        json_schema_extra=why(
            "`webhook` when the app delivers events to a request URL (a public HTTPS endpoint)"
            " instead of the long connection."
        ),
    )
    feishu_encrypt_key: OptionalSecret = Field(
        default=None,
        description="Event encrypt key (webhook mode; also enables signatures).",
        json_schema_extra=why(
            "When the app has an Encrypt Key (advised in webhook mode): every request is then"
            " signed and checked."
        ),
    )
    feishu_verification_token: OptionalSecret = Field(
        default=None,
        description="Event verification token (webhook mode).",
        json_schema_extra=why(
            "Webhook mode needs it: it tells Feishu's requests from anyone else's."
        ),
    )
    bridge_host: str = Field(
        default="127.0.0.1",
        description="Address the Feishu listener (webhook, /healthz) binds.",
        json_schema_extra=why(
            "`0.0.0.0` in a container or behind a reverse proxy, so the webhook reaches it."
        ),
    )
    bridge_port: int = Field(
        default=8080,
        ge=0,
        le=65535,
        description="Port of the Feishu listener.",
        json_schema_extra=why("When 8080 is taken, or the proxy forwards to another port."),
    )
    bridge_max_event_age_seconds: float = Field(
        default=43200.0,
        ge=0,
        description="Drop a message event older than this (a replay); 0 turns the check off.",
        json_schema_extra=clock(
            "Lower it so that, after a long outage, messages older than that go unanswered"
            " instead of answered hours late; 0 where the host's clock cannot be trusted."
        ),
    )
    bridge_bot_menu: bool = Field(
        default=True,
        description=(
            "Act on clicks in the bot's custom menu (`application.bot.menu_v6`): stop, new"
            " session, status, help, agent and project; off: they are ignored (logged)."
        ),
        json_schema_extra=why(
            "`false` when the app's menu sends events another service handles, or to take the"
            " menu's commands away without changing the app (docs/feishu-app-setup.md)."
        ),
    )

    @field_validator("feishu_domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        return domain_url(value)


def domain_url(value: str) -> str:
    """`feishu`, `lark` or an http(s) URL, as the Open Platform's base URL."""
    value = _DOMAIN_ALIASES.get(value.strip().lower(), value.strip())
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be `feishu`, `lark` or an http(s) URL")
    return value.rstrip("/")
