"""The file BRIDGE_CONFIG_FILE names: several Feishu apps, the projects their chats work on,
and routes, read into the model of bridge/config/apps.py (`load_apps`, which gives the same
model from the single-app environment settings when it is unset).

    [projects.<name>]   agent_command, agents, workdir, workspaces, agent_sandbox,
                        agent_sandbox_hidden (the agent settings' names without `bridge_`;
                        left out: the environment's setting), mode, model
    [apps.<name>]       app_id, app_secret_env | app_secret_file, encrypt_key_env | …_file,
                        verification_token_env | …_file, domain, mode (longconn | webhook),
                        webhook_path, allowed_users, allowed_chats, allow_all, approvers,
                        requester_may_approve, default_project
    [[routes]]          app, chat, thread (optional), project

It is read with pydantic-settings' TOML source (tomllib), and every problem is named at once,
each at its line and dotted key (`bridge.toml:12 apps.codex.default_project: …`): unknown
keys, wrong types, names that name nothing, app_ids and webhook paths given twice, a secret
written in the file, a secret referenced but not there, and what `run` needs of each app and
project. A secret is only ever referenced (an environment variable or a file); its value is
read for the model and never written into a problem. Relative paths are relative to the
file's folder.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from dotenv import dotenv_values
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, TomlConfigSettingsSource

from bridge.config.access import Ids
from bridge.config.apps import (
    NAME,
    PROJECT_SETTINGS,
    WEBHOOK_PATHS,
    Access,
    App,
    Apps,
    Intake,
    Name,
    Project,
    Route,
    Sandbox,
    apps_from_settings,
    store_name,
)
from bridge.config.base import NamedList
from bridge.config.checks import (
    ConfigProblem,
    SandboxCheck,
    ops_exposure_problems,
    problems_for_run,
    project_problems,
    root_problems,
    secure_domain,
)
from bridge.config.commands import named_list, split_command
from bridge.config.feishu import FEISHU_DOMAIN, domain_url
from bridge.config.settings import Settings, env_fields
from bridge.config.toml_lines import Path as KeyPath
from bridge.config.toml_lines import key_lines, line_of

SECRETS = ("app_secret", "encrypt_key", "verification_token")
# Upper case only: a secret pasted where its variable's name belongs is refused, not named.
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Z_][A-Z0-9_]*$")]
_ENV_NAME_HINT = "FEISHU_APP_SECRET"

# The single app's settings the file replaces: set as well, they would be silently unread.
REPLACED = (
    "FEISHU_APP_ID",
    "FEISHU_APP_SECRET",
    "FEISHU_ENCRYPT_KEY",
    "FEISHU_VERIFICATION_TOKEN",
    "FEISHU_DOMAIN",
    "FEISHU_EVENT_MODE",
    "BRIDGE_ALLOWED_USERS",
    "BRIDGE_ALLOWED_CHATS",
    "BRIDGE_ALLOW_ALL",
    "BRIDGE_APPROVERS",
    "BRIDGE_REQUESTER_MAY_APPROVE",
)
# The agent settings' names in a project: a problem `run` finds with one is the project's.
_PROJECT_KEYS = {f"BRIDGE_{key.upper()}": key for key in PROJECT_SETTINGS}


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProjectEntry(_Entry):
    """`[projects.<name>]` as written; a key left out takes the environment's setting."""

    agent_command: str | None = None
    agents: NamedList = ()
    workdir: Path | None = None
    workspaces: NamedList = ()
    agent_sandbox: Sandbox | None = None
    agent_sandbox_hidden: Ids = ()
    mode: Annotated[str, StringConstraints(min_length=1)] | None = None
    model: Annotated[str, StringConstraints(min_length=1)] | None = None

    @field_validator("agent_command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None:
            split_command(value)
        return value

    @field_validator("agents", "workspaces", mode="before")
    @classmethod
    def _named_list(cls, value: Any, info: ValidationInfo) -> Any:
        return named_list(value, commands=info.field_name == "agents")


class AppEntry(_Entry):
    """`[apps.<name>]` as written: its secrets by reference only."""

    app_id: Annotated[str, StringConstraints(min_length=1)]
    app_secret_env: EnvName | None = None
    app_secret_file: Path | None = None
    encrypt_key_env: EnvName | None = None
    encrypt_key_file: Path | None = None
    verification_token_env: EnvName | None = None
    verification_token_file: Path | None = None
    domain: str = FEISHU_DOMAIN
    mode: Intake = "longconn"
    webhook_path: Annotated[str, StringConstraints(pattern=r"^/\S*$")] | None = None
    allowed_users: Ids = ()
    allowed_chats: Ids = ()
    allow_all: StrictBool = False
    approvers: Ids = ()
    requester_may_approve: StrictBool = True
    default_project: str | None = None

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        return domain_url(value)


class RouteEntry(_Entry):
    """`[[routes]]`: a chat of an app, or one thread of it, → a project."""

    app: str
    chat: Annotated[str, StringConstraints(min_length=1)]
    thread: Annotated[str, StringConstraints(min_length=1)] | None = None
    project: str


class AppsFile(_Entry):
    """The whole file."""

    projects: dict[Name, ProjectEntry] = Field(default_factory=dict)
    apps: dict[Name, AppEntry] = Field(default_factory=dict)
    routes: tuple[RouteEntry, ...] = ()


class _TomlFile(BaseSettings):
    """What pydantic-settings' TOML source reads the file for. Its data is validated by
    `AppsFile`, a plain model: given to a settings class, a key like `_cli_parse_args` would
    be taken as an option of pydantic-settings, not refused as an unknown key."""


def load_apps(
    settings: Settings,
    environ: Mapping[str, str] | None = None,
    sandbox: SandboxCheck | None = None,
) -> tuple[Apps | None, list[ConfigProblem]]:
    """The apps, projects and routes the bridge serves: those of BRIDGE_CONFIG_FILE, or the
    one app and project of the environment settings (whose problems `problems_for_run`
    names). With the file, None and every problem it has, `run`'s checks of each app and
    project among them (`sandbox` starts each project's sandbox once). `environ`: where
    `*_env` secrets are looked up; default this process's environment over `.env`."""
    path = settings.feishu.bridge_config_file
    if path is None:
        return apps_from_settings(settings), []
    return _FileReading(path, settings, _environ() if environ is None else environ).read(sandbox)


def problems_for_config(
    settings: Settings,
    sandbox: SandboxCheck | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[ConfigProblem]:
    """check-config's and run's checks (a `checks.RunCheck`): `problems_for_run`, or with
    BRIDGE_CONFIG_FILE the file's problems in its place, beside those of the process."""
    if settings.feishu.bridge_config_file is None:
        return problems_for_run(settings, sandbox)
    _, problems = load_apps(settings, environ, sandbox)
    return ops_exposure_problems(settings) + problems


def secret_variables(path: Path) -> frozenset[str]:
    """The environment variables the file at `path` names for its apps' secrets (none when
    it cannot be read: its problems are check-config's to tell)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return frozenset()
    return frozenset(_env_references(data))


def _environ() -> dict[str, str]:
    """As the settings read theirs: the environment wins over `.env`."""
    found = {k: v for k, v in dotenv_values(".env").items() if v is not None}
    return {**found, **os.environ}


@dataclass
class _FileReading:
    path: Path
    settings: Settings
    environ: Mapping[str, str]
    lines: dict[KeyPath, int] = field(default_factory=dict)
    found: list[tuple[int, ConfigProblem]] = field(default_factory=list)

    def read(self, sandbox: SandboxCheck | None) -> tuple[Apps | None, list[ConfigProblem]]:
        data = self._data()
        if data is None:
            return None, [problem for _, problem in self.found]
        try:
            AppsFile.model_validate(data)
        except ValidationError as exc:
            self._schema(exc)
        projects = self._projects(data)
        apps = self._apps(data, projects)
        routes = self._routes(data, projects, apps)
        for project in projects.values():
            if project is not None:
                self._run_checks(project, sandbox)
        # Ordered by line; the environment's own problems first (they have no line).
        self.found.sort(key=lambda item: item[0])
        problems = [*self._replaced(data), *(problem for _, problem in self.found)]
        if problems:
            return None, problems
        return Apps(
            projects={n: p for n, p in projects.items() if p is not None},
            apps={n: a for n, a in apps.items() if a is not None},
            routes=tuple(routes),
        ), []

    # --- reading ------------------------------------------------------------------------

    def _data(self) -> dict[str, Any] | None:
        where = "BRIDGE_CONFIG_FILE"
        if not self.path.is_file():
            self._add_at(0, where, "file_not_found", file=str(self.path))
            return None
        try:
            text = self.path.read_text(encoding="utf-8")
            source = TomlConfigSettingsSource(_TomlFile, toml_file=self.path)
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            self._add_at(0, where, "file_unreadable", file=str(self.path), reason=str(reason))
            return None
        except tomllib.TOMLDecodeError as exc:
            # tomllib's words say where ("… (at line 3, column 7)"), never the value.
            match = re.search(r"at line (\d+)", str(exc))
            line = int(match.group(1)) if match else 1
            self._add_at(line, f"{self.path}:{line}", "file_syntax", detail=str(exc))
            return None
        self.lines = key_lines(text)
        return dict(source.toml_data)

    def _schema(self, error: ValidationError) -> None:
        for item in error.errors(include_input=False, include_url=False):
            loc = tuple(item["loc"])
            if "[key]" in loc:  # a table's name: `[apps."my app"]`
                self._add(loc[: loc.index("[key]")], "file_bad_name")
                continue
            key = str(loc[-1]) if loc else ""
            if item["type"] == "extra_forbidden" and len(loc) == 3 and key in SECRETS:
                self._add(loc, "file_literal_secret", env_key=f"{key}_env", file_key=f"{key}_file")
            elif item["type"] == "extra_forbidden":
                self._add(loc, "file_unknown_key")
            elif item["type"] == "missing":
                self._add(loc, "missing")
            elif item["type"] == "string_pattern_mismatch" and key.endswith("_env"):
                self._add(loc, "file_env_name", example=_ENV_NAME_HINT)
            else:
                self._add(loc, "invalid", detail=str(item["msg"]))

    # --- projects, apps, routes ---------------------------------------------------------

    def _projects(self, data: Mapping[str, Any]) -> dict[str, Project | None]:
        """Each project written (None: one whose own problems are named already)."""
        raw = data.get("projects", {})
        if not isinstance(raw, dict):
            return {}  # named with the whole file's
        if not raw:
            self._add(("projects",), "file_no_projects")
        return {
            name: None if entry is None else self._project(name, entry)
            for name, entry in _entries(raw, ProjectEntry).items()
        }

    def _project(self, name: str, entry: ProjectEntry) -> Project:
        """The entry over the environment's agent settings."""
        agent = self.settings.agent
        values = {key: getattr(agent, f"bridge_{key}") for key in PROJECT_SETTINGS}
        given = entry.model_dump(exclude_unset=True)
        # A pair is taken whole: the file's workdir must not lose to BRIDGE_WORKSPACES,
        # nor its agent_command to BRIDGE_AGENTS.
        if "agent_command" in given or "agents" in given:
            values["agents"] = ()
        if "workdir" in given or "workspaces" in given:
            values["workspaces"] = ()
        folder = self.path.parent
        if "workdir" in given:
            given["workdir"] = _beside(folder, given["workdir"])
        if "workspaces" in given:
            given["workspaces"] = tuple(
                (n, str(_beside(folder, Path(p)))) for n, p in given["workspaces"]
            )
        if "agent_sandbox_hidden" in given:
            given["agent_sandbox_hidden"] = tuple(
                str(_beside(folder, Path(p))) for p in given["agent_sandbox_hidden"]
            )
        return Project(name=name, **{**values, **given})

    def _apps(
        self, data: Mapping[str, Any], projects: Mapping[str, Project | None]
    ) -> dict[str, App | None]:
        raw = data.get("apps", {})
        if not isinstance(raw, dict):
            return {}  # named with the whole file's
        if not raw:
            self._add(("apps",), "file_no_apps")
        entries = _entries(raw, AppEntry)
        apps: dict[str, App | None] = {}
        seen_ids: dict[str, str] = {}
        seen_paths: dict[str, str] = {}
        seen_stores: dict[str, str] = {}
        for name, item in raw.items():
            apps[name] = None
            if not isinstance(item, dict):
                continue
            at = ("apps", name)
            self._once(seen_stores, store_name(name), at, "file_duplicate_app_name")
            # Across apps, on what is written: found even in an app with problems of its own.
            if isinstance(item.get("app_id"), str):
                self._once(seen_ids, item["app_id"], (*at, "app_id"), "file_duplicate_app_id")
            path = item.get("webhook_path")
            path = path if isinstance(path, str) else f"{WEBHOOK_PATHS}{name}"
            if item.get("mode") == "webhook":
                where = (*at, "webhook_path")
                self._once(seen_paths, path, where, "file_duplicate_webhook_path")
            project = self._default_project(at, item.get("default_project"), projects)
            entry = entries.get(name)
            if entry is not None:
                apps[name] = self._app(name, entry, path, project)
        return apps

    def _once(self, seen: dict[str, str], value: str, at: KeyPath, code: str) -> None:
        """`value` of the app at `at` given by an earlier app already: a problem."""
        other = seen.setdefault(value, str(at[1]))
        if other != at[1]:
            self._add(at, code, other=f"apps.{other}")

    def _default_project(
        self, at: KeyPath, written: Any, projects: Mapping[str, Project | None]
    ) -> str | None:
        """The app's default project: as written, or the one project there is."""
        if isinstance(written, str):
            if written in projects:
                return written
            known = _list(projects)
            self._add((*at, "default_project"), "file_no_such_project", name=written, known=known)
        elif written is None and len(projects) == 1:
            return next(iter(projects))
        elif written is None and projects:
            self._add((*at, "default_project"), "file_choose_project", known=_list(projects))
        return None  # of another type: named with the whole file's

    def _app(self, name: str, entry: AppEntry, path: str, project: str | None) -> App | None:
        at = ("apps", name)
        secret = self._secret(at, entry, "app_secret", required=True)
        encrypt_key = self._secret(at, entry, "encrypt_key")
        token = self._secret(at, entry, "verification_token")
        if entry.mode == "webhook" and _reference(entry, "verification_token") is None:
            self._add((*at, "verification_token_env"), "missing_for_webhook")
        if not secure_domain(entry.domain):
            self._add((*at, "domain"), "domain_not_https")
        if not entry.allowed_users and not entry.allowed_chats and not entry.allow_all:
            self._add((*at, "allowed_users"), "file_nobody_allowed")
        if not entry.requester_may_approve and not entry.approvers:
            self._add((*at, "approvers"), "file_no_approvers")
        if secret is None or project is None:
            return None
        access = Access(
            allowed_users=entry.allowed_users,
            allowed_chats=entry.allowed_chats,
            allow_all=entry.allow_all,
            approvers=entry.approvers,
            requester_may_approve=entry.requester_may_approve,
        )
        return App(
            name=name,
            app_id=entry.app_id,
            app_secret=secret,
            encrypt_key=encrypt_key,
            verification_token=token,
            domain=entry.domain,
            intake=entry.mode,
            webhook_path=path,
            access=access,
            default_project=project,
        )

    def _routes(
        self,
        data: Mapping[str, Any],
        projects: Mapping[str, Project | None],
        apps: Mapping[str, App | None],
    ) -> list[Route]:
        routes: list[Route] = []
        seen: dict[tuple[str, str, str | None], int] = {}
        raw = data.get("routes", [])
        for index, item in enumerate(raw if isinstance(raw, list) else []):
            if not isinstance(item, dict):
                continue  # named with the whole file's
            at = ("routes", index)
            app, chat, thread, project = (item.get(k) for k in ("app", "chat", "thread", "project"))
            if isinstance(app, str) and app not in apps:
                self._add((*at, "app"), "file_no_such_app", name=app, known=_list(apps))
            if isinstance(project, str) and project not in projects:
                known = _list(projects)
                self._add((*at, "project"), "file_no_such_project", name=project, known=known)
            if isinstance(app, str) and isinstance(chat, str) and isinstance(thread, str | None):
                other = seen.setdefault((app, chat, thread), index)
                if other != index:
                    self._add(
                        (*at, "chat"), "file_duplicate_route", other=_dotted(("routes", other))
                    )
            try:
                routes.append(Route(**RouteEntry.model_validate(item).model_dump()))
            except ValidationError:
                continue  # named with the whole file's
        return routes

    # --- secrets ------------------------------------------------------------------------

    def _secret(
        self, at: KeyPath, entry: AppEntry, key: str, required: bool = False
    ) -> SecretStr | None:
        """The value a secret's reference gives; None (and the problem named) if none."""
        env_key, file_key = f"{key}_env", f"{key}_file"
        variable, path = getattr(entry, env_key), getattr(entry, file_key)
        if variable is not None and path is not None:
            self._add((*at, file_key), "file_secret_twice", env_key=env_key, file_key=file_key)
            return None
        if variable is not None:
            value = self.environ.get(variable)
            if value is None:
                self._add((*at, env_key), "file_env_not_set", variable=variable)
            elif not value.strip():
                self._add((*at, env_key), "file_env_empty", variable=variable)
            else:
                return SecretStr(value.strip())
            return None
        if path is not None:
            full = _beside(self.path.parent, path)
            try:
                value = full.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                self._add(
                    (*at, file_key), "file_secret_unreadable", path=str(full), reason=str(reason)
                )
                return None
            if not value:
                self._add((*at, file_key), "file_secret_empty", path=str(full))
                return None
            return SecretStr(value)
        if required:
            self._add((*at, key), "file_secret_missing", env_key=env_key, file_key=file_key)
        return None

    # --- what `run` needs ---------------------------------------------------------------

    def _run_checks(self, project: Project, sandbox: SandboxCheck | None) -> None:
        """`run`'s checks of the agent settings (programs, folders, sandbox, root), on the
        project's: each problem at the project's key."""
        agent = self.settings.agent.model_copy(
            update={f"bridge_{key}": getattr(project, key) for key in PROJECT_SETTINGS}
        )
        settings = self.settings.model_copy(update={"agent": agent})
        for problem in [*project_problems(settings, sandbox), *root_problems(settings)]:
            key = _PROJECT_KEYS.get(problem.variable, problem.variable.lower())
            self._add(("projects", project.name, key), problem.code, **problem.params)

    def _replaced(self, data: Mapping[str, Any]) -> list[ConfigProblem]:
        """The single app's settings still set beside the file (in the environment, `.env`
        or given in process): unread, so named; but for a secret an app references."""
        referenced = _env_references(data)
        fields = env_fields()
        found = []
        for name in REPLACED:
            section, field_name, _ = fields[name]
            if field_name not in getattr(self.settings, section).model_fields_set:
                continue
            secret = name.removeprefix("FEISHU_").lower()
            if secret not in SECRETS:
                found.append(ConfigProblem(name, "file_replaced"))
            elif name not in referenced:
                found.append(
                    ConfigProblem(name, "file_replaced_secret", {"reference": f"{secret}_env"})
                )
        return found

    # --- problems -----------------------------------------------------------------------

    def _add(self, at: KeyPath, code: str, /, **params: str) -> None:
        line = line_of(self.lines, at)
        self._add_at(line, f"{self.path}:{line} {_dotted(at)}", code, **params)

    def _add_at(self, line: int, where: str, code: str, /, **params: str) -> None:
        self.found.append((line, ConfigProblem(where, code, params)))


def _entries(raw: Mapping[str, Any], model: type[_Entry]) -> dict[str, Any]:
    """Each `[table.<name>]` validated on its own: the entry, or None when it has problems
    of its own (named with the whole file's), so that the checks across entries still run."""
    found: dict[str, Any] = {}
    for name, item in raw.items():
        try:
            found[name] = model.model_validate(item) if NAME.fullmatch(name) else None
        except ValidationError:
            found[name] = None
    return found


def _env_references(data: Mapping[str, Any]) -> set[str]:
    """The environment variables the file's apps name (`app_secret_env = "…"` and kin)."""
    apps = data.get("apps")
    if not isinstance(apps, dict):
        return set()
    return {
        value
        for entry in apps.values()
        if isinstance(entry, dict)
        for key, value in entry.items()
        if key.endswith("_env") and isinstance(value, str)
    }


def _reference(entry: AppEntry, key: str) -> Path | str | None:
    found: Path | str | None = getattr(entry, f"{key}_env") or getattr(entry, f"{key}_file")
    return found


def _beside(folder: Path, path: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else folder / path


def _list(names: Mapping[str, Any]) -> str:
    return ", ".join(names) or "-"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _dotted(path: KeyPath) -> str:
    """("apps", "my app", "app_id") → `apps."my app".app_id`; ("routes", 0) → `routes[1]`
    (counted from 1, as one counts the [[routes]] in the file)."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part + 1}]"
        else:
            key = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
            text += f".{key}" if text else key
    return text
