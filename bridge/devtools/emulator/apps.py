"""The Feishu apps (bots) the emulator hosts, each with what Feishu keeps apart per app: its
credentials and tenant tokens, its event keys and subscription (a webhook URL, or its own
long connection: `longconn.py`), its bot's open_id and name, its rate-limit meters (Feishu
meters "每个应用") and its event pushes.

`AppSpec` declares one (`FeishuEmulator(apps=[AppSpec(…), …])`, or `--app` on the command
line: `parse_app_spec`); `HostedApp` is one at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from bridge.devtools.emulator.delivery import EventDelivery
from bridge.devtools.emulator.limits import RateLimits
from bridge.devtools.emulator.tokens import TokenIssuer

# Which group messages a bot is pushed: "mentioned", those that @-mention it (the scope
# im:message.group_at_msg:readonly), or "all" (the sensitive scope im:message.group_msg).
GroupMessages = Literal["all", "mentioned"]


@dataclass(frozen=True)
class AppSpec:
    """One app as its developer console shows it."""

    app_id: str
    app_secret: str = "emulator-app-secret"
    encrypt_key: str = ""
    verification_token: str = "emulator-verification-token"
    bot_name: str = "Presence Bot"
    webhook_url: str | None = None  # where its events go (none: only a long connection)
    # None: "all" when the emulator hosts this app alone (what it always did), "mentioned"
    # when it hosts several (the usual grant, and the only way two bots in a group split it).
    group_messages: GroupMessages | None = None

    def __post_init__(self) -> None:
        if not self.app_id:
            raise ValueError("an app needs an app_id")
        if self.group_messages not in (None, "all", "mentioned"):
            raise ValueError("group_messages is 'all' or 'mentioned'")


# The fields a one-app emulator takes as its own (`EmulatorOptions.app_id` and the rest).
SINGLE_APP_FIELDS = tuple(f.name for f in fields(AppSpec) if f.name != "group_messages")

# The keys `parse_app_spec` takes, short for the fields.
_SPEC_KEYS = {
    "id": "app_id",
    "secret": "app_secret",
    "encrypt_key": "encrypt_key",
    "token": "verification_token",
    "name": "bot_name",
    "webhook": "webhook_url",
    "group": "group_messages",
}


def parse_app_spec(text: str) -> AppSpec:
    """`id=cli_a,secret=s,name=Claude Bot,webhook=http://…,encrypt_key=k,token=t,group=all`:
    one app for `python -m bridge.devtools.emulator --app …` (`id` required)."""
    values: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in _SPEC_KEYS:
            known = ", ".join(_SPEC_KEYS)
            raise ValueError(f"{part.strip()!r}: an app is key=value pairs of {known}")
        values[_SPEC_KEYS[key]] = value.strip()
    if "app_id" not in values:
        raise ValueError(f"{text!r}: an app needs id=cli_…")
    return AppSpec(**values)


class HostedApp:
    """One app at run time. Its bot is a person of the emulator (`bot_person`) whom the app
    itself knows as `bot_open_id`, and other apps by their own open_id for it."""

    def __init__(
        self,
        spec: AppSpec,
        *,
        group_messages: GroupMessages,
        bot_person: str,
        bot_open_id: str,
        tokens: TokenIssuer,
        limits: RateLimits,
        delivery: Callable[[HostedApp], EventDelivery],  # made for this app (its keys, URL)
    ) -> None:
        self.spec = spec
        self.app_id = spec.app_id
        self.app_secret = spec.app_secret
        self.encrypt_key = spec.encrypt_key
        self.verification_token = spec.verification_token
        self.bot_name = spec.bot_name
        self.webhook_url = spec.webhook_url
        self.group_messages: GroupMessages = group_messages
        self.bot_person = bot_person
        self.bot_open_id = bot_open_id
        self.tokens = tokens
        self.limits = limits
        self.delivery = delivery(self)

    def bot_info(self) -> Mapping[str, Any]:
        """`GET /open-apis/bot/v3/info`'s `bot`."""
        return {
            "activate_status": 2,
            "app_name": self.bot_name,
            "avatar_url": "",
            "ip_white_list": [],
            "open_id": self.bot_open_id,
        }

    def __repr__(self) -> str:
        return f"HostedApp({self.app_id!r}, {self.bot_name!r})"
