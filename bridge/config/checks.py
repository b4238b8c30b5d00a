"""Checking the configuration: every problem at once, in words a user can act on (never the
value that was set), and the one start-up line that says who can reach the agent."""

from __future__ import annotations

import ipaddress
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from bridge.config.settings import Settings, env_fields
from bridge.i18n import Translator
from bridge.paths import within

# Examples shown next to a problem; they never contain a real secret.
EXAMPLES: dict[str, str] = {
    "FEISHU_APP_ID": "cli_a1b2c3d4e5f6",
    "FEISHU_APP_SECRET": "<the App Secret from the developer console>",
    "BRIDGE_DATABASE_URL": "postgresql://bridge:<password>@db.internal:5432/bridge",
    "FEISHU_DOMAIN": "https://open.feishu.cn",
    "FEISHU_EVENT_MODE": "websocket",
    "FEISHU_ENCRYPT_KEY": "<the Encrypt Key from Events and Callbacks>",
    "FEISHU_VERIFICATION_TOKEN": "<the Verification Token from Events and Callbacks>",
    "BRIDGE_HOST": "127.0.0.1",
    "BRIDGE_PORT": "8080",
    "BRIDGE_LOCALE": "zh_CN",
    "BRIDGE_AGENT_COMMAND": "claude-agent-acp",
    "BRIDGE_WORKDIR": "/srv/feishu-bridge/workspace",
    "BRIDGE_AGENTS": "claude=claude-agent-acp;codex=codex-acp;qwen=qwen --acp",
    "BRIDGE_WORKSPACES": "app=/srv/app;docs=/srv/docs",
    "BRIDGE_AGENT_SANDBOX": "bwrap",
    "BRIDGE_ALLOWED_USERS": "ou_1a2b3c,ou_4d5e6f",
    "BRIDGE_APPROVERS": "ou_9f8e7d",
    "BRIDGE_OPS_TOKEN": "<a long random string, e.g. from `openssl rand -hex 32`>",
}


@dataclass(frozen=True)
class ConfigProblem:
    """One problem with the configuration (never the value itself). `code` names its text,
    `cli.problem.<code>` in translations/; `params` fill it."""

    variable: str
    code: str
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def example(self) -> str:
        return EXAMPLES.get(self.variable, "")

    def in_words(self, t: Translator) -> str:
        """What is wrong, in the operator's language (`cli.problem.<code>`)."""
        return t(f"cli.problem.{self.code}", **self.params)


class UnsafeConfiguration(Exception):
    """Settings that would expose the agent or the operator API (see `exposure_problems`),
    refused by the service whoever starts it; `run` reports the same problems before."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        super().__init__(", ".join(f"{p.variable}: {p.code}" for p in problems))
        self.problems = problems


# The sandbox's own checks, which start bubblewrap once (bridge/runtime/sandbox.py): the CLI
# passes them in, since the settings never reach up to the runtime.
SandboxCheck = Callable[[Settings], list[ConfigProblem]]


def problems_from_validation(error: ValidationError) -> list[ConfigProblem]:
    found: list[ConfigProblem] = []
    for item in error.errors(include_input=False, include_url=False):
        field = str(item["loc"][0]) if item["loc"] else "?"
        if item["type"] == "missing":
            found.append(ConfigProblem(field.upper(), "missing"))
        else:  # pydantic's own words for what is wrong with the value (never the value)
            found.append(ConfigProblem(field.upper(), "invalid", {"detail": str(item["msg"])}))
    return found


def problems_for_run(
    settings: Settings, sandbox: SandboxCheck | None = None
) -> list[ConfigProblem]:
    """What `run` needs beyond a well-formed model; `sandbox` checks the agents' sandbox
    once the workspaces are sound."""
    found: list[ConfigProblem] = []
    feishu = settings.feishu
    if not feishu.feishu_app_id:
        found.append(ConfigProblem("FEISHU_APP_ID", "missing"))
    if feishu.feishu_app_secret is None:
        found.append(ConfigProblem("FEISHU_APP_SECRET", "missing"))
    if feishu.feishu_event_mode == "webhook" and feishu.feishu_verification_token is None:
        found.append(ConfigProblem("FEISHU_VERIFICATION_TOKEN", "missing_for_webhook"))
    found += project_problems(settings, sandbox, domain=True)
    return found + exposure_problems(settings) + root_problems(settings)


def project_problems(
    settings: Settings, sandbox: SandboxCheck | None = None, domain: bool = False
) -> list[ConfigProblem]:
    """What `run` needs of the agent settings: programs found, workspaces sound, the sandbox
    able to start (`sandbox`, once the workspaces are sound). The projects of
    BRIDGE_CONFIG_FILE are checked by it one by one (bridge/config/apps_file.py); `domain`:
    FEISHU_DOMAIN's check too, in the order the single app's problems have always come."""
    found: list[ConfigProblem] = []
    agent = settings.agent
    agents_field = "BRIDGE_AGENTS" if agent.bridge_agents else "BRIDGE_AGENT_COMMAND"
    for _, argv in agent.agent_profiles:
        if shutil.which(argv[0], path=os.environ.get("PATH")) is None:
            # Found now, not at the first user's message.
            found.append(ConfigProblem(agents_field, "program_not_found", {"program": argv[0]}))
    if domain and not secure_domain(settings.feishu.feishu_domain):
        found.append(ConfigProblem("FEISHU_DOMAIN", "domain_not_https"))
    roots = agent.workspace_roots
    workdir_problems = [p for _, root in roots for p in _root_problems(settings, root)]
    found += workdir_problems
    if not workdir_problems and sandbox is not None:
        found += sandbox(settings)
    return found


def effective_uid() -> int:
    """This process's effective uid; -1 where there is none (not POSIX)."""
    return os.geteuid() if hasattr(os, "geteuid") else -1


def root_without_sandbox(settings: Settings) -> bool:
    return effective_uid() == 0 and settings.agent.bridge_agent_sandbox == "none"


def root_problems(settings: Settings) -> list[ConfigProblem]:
    """As root without a sandbox the agent's shell is root: it reads every process's memory
    and environment, the bridge's secrets among them (non-dumpable stops only other users).
    Refused unless BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX says it is on purpose. The service
    refuses it too whenever it starts agents itself."""
    if root_without_sandbox(settings) and not settings.agent.bridge_allow_root_without_sandbox:
        return [ConfigProblem("BRIDGE_AGENT_SANDBOX", "root_without_sandbox")]
    return []


def secure_domain(domain: str) -> bool:
    """https, or http to this machine only (the emulator): the app secret travels on it."""
    url = urlsplit(domain)
    return url.scheme == "https" or is_loopback(url.hostname or "")


def _root_problems(settings: Settings, root: Path) -> list[ConfigProblem]:
    """The agent writes in each workspace: none may hold the bridge's store or the folder
    the bridge reads `.env` from, or the agent could rewrite the bridge's settings."""
    agent = settings.agent
    field = "BRIDGE_WORKSPACES" if agent.bridge_workspaces else "BRIDGE_WORKDIR"
    if not root.is_dir():
        return [ConfigProblem(field, "not_a_folder", {"folder": str(root)})]
    found: list[ConfigProblem] = []
    held = [
        ("workdir_holds_data", settings.store.bridge_data_dir),
        ("workdir_holds_env", Path.cwd()),
        *(("workdir_holds_hidden", Path(p)) for p in agent.bridge_agent_sandbox_hidden),
    ]
    for code, path in held:
        folder = path.resolve()
        if within(folder, root):
            found.append(ConfigProblem(field, code, {"folder": str(folder)}))
    return found


def exposure_problems(settings: Settings) -> list[ConfigProblem]:
    """Settings that would expose the agent or the operator API by omission. The service
    refuses them too (not only `run`), so no entry point starts them by accident."""
    found: list[ConfigProblem] = []
    access = settings.access
    everyone = not access.bridge_allowed_users and not access.bridge_allowed_chats
    if everyone and not access.bridge_allow_all:
        found.append(ConfigProblem("BRIDGE_ALLOWED_USERS", "nobody_allowed"))
    if not access.bridge_requester_may_approve and not access.bridge_approvers:
        found.append(ConfigProblem("BRIDGE_APPROVERS", "no_approvers"))
    return found + ops_exposure_problems(settings)


def ops_exposure_problems(settings: Settings) -> list[ConfigProblem]:
    """The operator API open to the network without a token."""
    ops = settings.ops
    if ops.bridge_ops_token is None and not is_loopback(ops.bridge_ops_host):
        return [
            ConfigProblem(
                "BRIDGE_OPS_TOKEN", "ops_token_for_public_host", {"host": ops.bridge_ops_host}
            )
        ]
    return []


def is_loopback(host: str) -> bool:
    """Only this machine can connect: `localhost` or a loopback address (names that resolve
    elsewhere, and the wildcard 0.0.0.0 / ::, are not)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def describe_access(settings: Settings) -> str:
    """One log line: who can reach the agent and who can approve (ids, never secrets)."""
    access = settings.access
    users, chats = access.bridge_allowed_users, access.bridge_allowed_chats
    if users or chats:
        reach = f"users={_ids(users, 'any')} chats={_ids(chats, 'any')}"
    else:
        reach = "everyone who can message the bot (BRIDGE_ALLOW_ALL=true)"
    deciders = "requester" if access.bridge_requester_may_approve else "not the requester"
    return f"access: who can reach the agent: {reach}; who can approve: {deciders}, " + (
        f"approvers={_ids(access.bridge_approvers, 'none')}"
    )


def _ids(ids: tuple[str, ...], empty: str) -> str:
    return f"{len(ids)} [{', '.join(ids)}]" if ids else empty


def load_settings(**overrides: Any) -> tuple[Settings | None, list[ConfigProblem]]:
    """Build Settings from the environment (explicit overrides win); never raises on bad input."""
    try:
        return Settings(**overrides), []
    except ValidationError as exc:
        return None, problems_from_validation(exc)


# What `run` (or check-config) needs beyond well-formed settings: `problems_for_run`, or
# with BRIDGE_CONFIG_FILE the file's checks too (bridge/config/apps_file.py, which imports
# this module and so is passed in).
RunCheck = Callable[[Settings, SandboxCheck | None], list[ConfigProblem]]


def check_for_run(
    overrides: Mapping[str, Any],
    sandbox: SandboxCheck | None = None,
    for_run: RunCheck = problems_for_run,
) -> tuple[Settings | None, list[ConfigProblem]]:
    """Settings for `run`, or every problem at once: the malformed values, and what `run`
    needs beyond them (`for_run`, checked with the malformed ones at their defaults)."""
    settings, problems = load_settings(**overrides)
    if settings is not None:
        problems = for_run(settings, sandbox)
        return (None if problems else settings), problems
    bad = {p.variable for p in problems}
    fields = env_fields()
    defaults = {
        fields[n][1]: fields[n][2].get_default(call_default_factory=True)
        for n in bad
        if n in fields
    }
    fallback, _ = load_settings(**{**overrides, **defaults})
    if fallback is not None:
        problems += [p for p in for_run(fallback, sandbox) if p.variable not in bad]
    return None, problems
