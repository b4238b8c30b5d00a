"""Command line: `feishu-bridge run | demo | check-config | status`. Settings are read here,
once (bridge/service.py builds everything from them). `--help` describes the product in
the language of BRIDGE_LOCALE (`cli.description`), not this module."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TextIO

from pydantic import ValidationError

from bridge.config import Settings
from bridge.config.apps_file import load_apps, problems_for_config, secret_variables
from bridge.config.checks import (
    ConfigProblem,
    SandboxCheck,
    check_for_run,
    problems_from_validation,
)
from bridge.config.ops import OpsSection
from bridge.config.retired import retired_problems
from bridge.environ import take_secrets, take_variables
from bridge.i18n import DEFAULT_LOCALE, LOCALES, Translator
from bridge.loops import loop_factory
from bridge.runtime.sandbox import forbid_environ_reading, sandbox_problems

EXIT_CONFIG = 2

STATUS_CLIENT_ID = "feishu-bridge-status"  # names this command in the operator access log


def report_problems(problems: Sequence[ConfigProblem], t: Translator, out: TextIO) -> None:
    """Every problem at once, in plain words, with an example; never the value itself."""
    print(t("cli.config_problems", count=len(problems)), file=out)
    for problem in problems:
        text = problem.in_words(t)
        print(t("cli.config_problem", variable=problem.variable, problem=text), file=out)
        if problem.example:
            example = problem.example
            print(t("cli.config_example", variable=problem.variable, example=example), file=out)


def _translator_for_env() -> Translator:
    # Other settings may be broken; the locale alone still decides the language of the report.
    locale = os.environ.get("BRIDGE_LOCALE", DEFAULT_LOCALE)
    return Translator(locale if locale in LOCALES else DEFAULT_LOCALE)


def settings_for_run(
    out: TextIO,
    secrets: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings | None:
    """Settings from the environment (`secrets`, taken out of it, passed explicitly), or
    None once every problem is reported to `out`, retired settings still set among them.
    With BRIDGE_CONFIG_FILE, the file's problems in the single app's place (`environ`:
    where its apps' secret variables are found)."""
    check = partial(_problems_for_config, environ=environ)
    settings, problems = check_for_run(secrets or {}, sandbox_problems, check)
    if settings is None:
        report_problems([*problems, *retired_problems()], _translator_for_env(), out)
    return settings


def _problems_for_config(
    settings: Settings, sandbox: SandboxCheck | None, *, environ: Mapping[str, str] | None
) -> list[ConfigProblem]:
    return problems_for_config(settings, sandbox, environ)


def cmd_check_config(_: argparse.Namespace) -> int:
    """Like `run`'s checks; with BRIDGE_CONFIG_FILE, every problem of the file too, in the
    place of the single app's (`problems_for_config`)."""
    settings, problems = check_for_run({}, sandbox_problems, problems_for_config)
    if settings is None:
        report_problems([*problems, *retired_problems()], _translator_for_env(), sys.stderr)
        return EXIT_CONFIG
    t = Translator(settings.presence.bridge_locale)
    retired = retired_problems()
    if retired:  # `run` starts and warns in its log; check-config asks to remove them
        report_problems(retired, t, sys.stderr)
        return EXIT_CONFIG
    feishu = settings.feishu
    if feishu.bridge_config_file is None:
        print(t("cli.config_ok", mode=feishu.feishu_event_mode, domain=feishu.feishu_domain))
        return 0
    apps, problems = load_apps(settings)  # read again for what it holds: it may have changed
    if apps is None:
        report_problems(problems, t, sys.stderr)
        return EXIT_CONFIG
    counts = {"apps": len(apps.apps), "projects": len(apps.projects), "routes": len(apps.routes)}
    print(t("cli.config_ok_file", file=str(feishu.bridge_config_file), **counts))
    for app in apps.apps.values():
        mode, project = app.intake, app.default_project
        print(
            t(
                "cli.config_ok_app",
                app=app.name,
                app_id=app.app_id,
                mode=mode,
                domain=app.domain,
                project=project,
            )
        )
    return 0


def cmd_run(_: argparse.Namespace) -> int:
    # First the secrets leave the environment (os.environ and what /proc/<pid>/environ
    # shows), while this process may still open its own /proc files; nothing it starts
    # inherits them, and root reading its environ finds none.
    taken = take_secrets()
    # So do the variables a config file names for its apps' secrets.
    named = _config_file_from_env()
    file_secrets = take_variables(secret_variables(named)) if named is not None else {}
    # Then an agent of the same user can no longer read our environ or memory at all.
    forbid_environ_reading()
    environ = {**os.environ, **file_secrets}
    settings = settings_for_run(sys.stderr, taken.values, environ)
    if settings is None:
        return EXIT_CONFIG
    apps, _problems = load_apps(settings, environ)  # checked: None only for a file gone since
    if apps is None:
        return EXIT_CONFIG
    from bridge import heap
    from bridge.running import run_service

    retired = retired_problems()  # it starts anyway: each is a warning in its log
    heap.settle()
    with asyncio.Runner(loop_factory=loop_factory(settings.ops.bridge_event_loop)) as runner:
        return runner.run(
            run_service(settings, apps=apps, environ_left=taken.left, retired=retired)
        )


def _config_file_from_env() -> Path | None:
    """BRIDGE_CONFIG_FILE as the environment sets it (whatever its case), before the
    settings are read: its secret variables leave the environment first."""
    for name, value in os.environ.items():
        if name.upper() == "BRIDGE_CONFIG_FILE" and value:
            return Path(value).expanduser()
    return None


def cmd_demo(args: argparse.Namespace) -> int:
    from bridge.config.checks import UnsafeConfiguration
    from bridge.demo import run_demo

    try:
        return asyncio.run(run_demo(port=args.port, locale=args.locale, agent=args.agent))
    except UnsafeConfiguration as refused:  # `--agent` as root without a sandbox
        report_problems(refused.problems, _translator_for_env(), sys.stderr)
        return EXIT_CONFIG


def ops_for_status(out: TextIO) -> OpsSection | None:
    """The operator API's settings (BRIDGE_OPS_*, from the environment and `.env` like `run`
    reads them), read once; None once their problems are reported to `out`. Only this
    section: a problem elsewhere does not keep `status` from asking a running bridge."""
    try:
        return OpsSection()
    except ValidationError as exc:
        report_problems(problems_from_validation(exc), _translator_for_env(), out)
        return None


def cmd_status(args: argparse.Namespace) -> int:
    import httpx

    t = _translator_for_env()
    if args.all:
        return _status_all()
    ops = ops_for_status(sys.stderr)
    if ops is None:
        return EXIT_CONFIG
    url = args.url or ops.status_url()
    headers = {"X-Bridge-Client-Id": STATUS_CLIENT_ID}
    if ops.bridge_ops_token is not None:
        headers["Authorization"] = f"Bearer {ops.bridge_ops_token.get_secret_value()}"
    try:
        response = httpx.get(f"{url.rstrip('/')}/status", headers=headers, timeout=5.0)
    except httpx.HTTPError as exc:
        print(t("cli.status_unreachable", url=url, error=str(exc)), file=sys.stderr)
        return 1
    try:
        body = response.json()
    except ValueError:
        print(t("cli.status_not_json", url=url, status=response.status_code), file=sys.stderr)
        return 1
    print(json.dumps(body, ensure_ascii=False, indent=2))
    return 0 if response.status_code == 200 else 1


def _status_all() -> int:
    from bridge.clock import LoopClock
    from bridge.ops.cluster_view import instances_view

    settings = settings_for_run(sys.stderr)
    if settings is None:
        return EXIT_CONFIG
    view = asyncio.run(instances_view(settings, LoopClock().wall()))
    print(json.dumps(view, ensure_ascii=False, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    description = _translator_for_env()("cli.description")
    parser = argparse.ArgumentParser(prog="feishu-bridge", description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the bridge against Feishu (reads FEISHU_* / BRIDGE_*)")
    demo = sub.add_parser("demo", help="local demo: emulator + scripted agent, no account needed")
    demo.add_argument("--port", type=int, default=8765, help="port of the chat page (0: any)")
    demo.add_argument("--locale", choices=("zh_CN", "en_US"), default=None)
    demo.add_argument(
        "--agent", default=None, help="an ACP agent command instead of the scripted agent"
    )
    sub.add_parser("check-config", help="validate the configuration and exit")
    status = sub.add_parser(
        "status",
        help="print the status of a running bridge (its operator API; sends BRIDGE_OPS_TOKEN)",
    )
    status.add_argument(
        "--url",
        default=None,
        help="the operator API (default: http://BRIDGE_OPS_HOST:BRIDGE_OPS_PORT, 127.0.0.1:8081)",
    )
    status.add_argument(
        "--all",
        action="store_true",
        help="every instance on this bridge's database (BRIDGE_DATABASE_URL), from the database",
    )
    return parser


COMMANDS = {
    "run": cmd_run,
    "demo": cmd_demo,
    "check-config": cmd_check_config,
    "status": cmd_status,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
