"""The Feishu apps one bridge serves, the projects their chats work on, and the routes that
send a chat to a project: one model, whichever source it comes from. The file that
BRIDGE_CONFIG_FILE names is read into it by bridge/config/apps_file.py; the single-app
environment settings are one app and one project, both named `default` (`apps_from_settings`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, SecretStr, StringConstraints

from bridge.config.agent import AgentSection
from bridge.config.base import NamedList
from bridge.config.commands import agent_profiles, workspace_roots
from bridge.config.settings import Settings

DEFAULT = "default"  # the name of the one app and the one project of the environment
# The single app's webhook path: bridge/feishu/webhook.py serves it (EVENTS_PATH).
SINGLE_WEBHOOK_PATH = "/feishu/events"
WEBHOOK_PATHS = "/feishu/events/"  # + the app's name: each app of the file its own path

# An app's or a project's name: a short word, usable in a URL path and after /project.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
Name = Annotated[str, StringConstraints(pattern=f"^{NAME.pattern}$")]


def store_name(app: str) -> str:
    """The name an app's data goes by beside the others' (its PostgreSQL schema's,
    bridge/stores.py): two names that differ only in case or in `-` for `_` would share it."""
    return app.lower().replace("-", "_")


Intake = Literal["longconn", "webhook"]
Sandbox = Literal["none", "bwrap"]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Project(Frozen):
    """What a chat works on: the agents it may run, the folders it works in, the sandbox
    they run in, and the mode and model a new session starts with (None: the agent's own).
    The fields are the agent settings of the same name without `bridge_` (BRIDGE_WORKDIR ↔
    `workdir`)."""

    name: str
    agent_command: str
    agents: NamedList = ()
    workdir: Path
    workspaces: NamedList = ()
    agent_sandbox: Sandbox = "none"
    agent_sandbox_hidden: tuple[str, ...] = ()
    mode: str | None = None
    model: str | None = None

    @property
    def agent_argv(self) -> list[str]:
        return shlex.split(self.agent_command)

    @property
    def agent_profiles(self) -> tuple[tuple[str, list[str]], ...]:
        """(name, argv) of every agent a chat may use; the first is the default."""
        return agent_profiles(self.agents, self.agent_command)

    @property
    def workspace_roots(self) -> tuple[tuple[str, Path], ...]:
        """(name, resolved folder) of every workspace; the first is the default."""
        return workspace_roots(self.workspaces, self.workdir)


# The project fields an app's environment gives: the file's projects take them as defaults.
PROJECT_SETTINGS = (
    "agent_command",
    "agents",
    "workdir",
    "workspaces",
    "agent_sandbox",
    "agent_sandbox_hidden",
)


def project_from_agent(name: str, agent: AgentSection) -> Project:
    """A project with the agent settings of the environment."""
    values = {key: getattr(agent, f"bridge_{key}") for key in PROJECT_SETTINGS}
    return Project(name=name, **values)


class Access(Frozen):
    """Who may reach an app's agent and who may approve: BRIDGE_ALLOWED_USERS and the rest,
    per app (a user's open_id differs from one app to another)."""

    allowed_users: tuple[str, ...] = ()
    allowed_chats: tuple[str, ...] = ()
    allow_all: bool = False
    approvers: tuple[str, ...] = ()
    requester_may_approve: bool = True


class App(Frozen):
    """One Feishu app (one bot): its credentials, where its events come in, who may use it,
    and the project a chat works on unless a route says otherwise. `app_id` and
    `app_secret` are None only from environment settings that lack them (check-config
    names them); an app of the file always has both. Secrets are `SecretStr`: their repr
    and str are stars."""

    name: str
    app_id: str | None
    app_secret: SecretStr | None
    encrypt_key: SecretStr | None = None
    verification_token: SecretStr | None = None
    domain: str
    intake: Intake = "longconn"
    webhook_path: str
    access: Access = Access()
    default_project: str


class Route(Frozen):
    """A chat of an app (or one topic thread in it) → the project it works on."""

    app: str
    chat: str
    thread: str | None = None
    project: str


class Apps(Frozen):
    """Every app, project and route the bridge serves. Every name an app or route gives is
    a project of `projects`, every route's app one of `apps` (checked as it is read)."""

    projects: dict[str, Project]
    apps: dict[str, App]
    routes: tuple[Route, ...] = ()

    def project_for(self, app: str, chat: str, thread: str | None = None) -> Project:
        """The project a chat of `app` works on: the route of its thread, else of the chat,
        else the app's default project."""
        by_chat: str | None = None
        for route in self.routes:
            if route.app != app or route.chat != chat:
                continue
            if route.thread is not None and route.thread == thread:
                return self.projects[route.project]
            if route.thread is None:
                by_chat = route.project
        return self.projects[by_chat or self.apps[app].default_project]


def apps_from_settings(settings: Settings) -> Apps:
    """The single-app environment settings as the model of several: the app of FEISHU_* and
    the allow-lists, named `default`, working on the project of the agent settings, also
    `default`; no routes."""
    feishu, access = settings.feishu, settings.access
    app = App(
        name=DEFAULT,
        app_id=feishu.feishu_app_id,
        app_secret=feishu.feishu_app_secret,
        encrypt_key=feishu.feishu_encrypt_key,
        verification_token=feishu.feishu_verification_token,
        domain=feishu.feishu_domain,
        intake="webhook" if feishu.feishu_event_mode == "webhook" else "longconn",
        webhook_path=SINGLE_WEBHOOK_PATH,
        access=Access(
            allowed_users=access.bridge_allowed_users,
            allowed_chats=access.bridge_allowed_chats,
            allow_all=access.bridge_allow_all,
            approvers=access.bridge_approvers,
            requester_may_approve=access.bridge_requester_may_approve,
        ),
        default_project=DEFAULT,
    )
    project = project_from_agent(DEFAULT, settings.agent)
    return Apps(projects={DEFAULT: project}, apps={DEFAULT: app})
