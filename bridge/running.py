"""`feishu-bridge run`'s life: logging with every secret masked, the service started,
SIGINT/SIGTERM for a clean stop, and the exit code."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr

from bridge.cluster.identity import DuplicateInstance
from bridge.config import Settings
from bridge.config.apps import Apps, apps_from_settings
from bridge.config.checks import ConfigProblem
from bridge.i18n import Translator
from bridge.logs import configure_logging
from bridge.service import build_service

log = logging.getLogger(__name__)

EXIT_DUPLICATE = 2  # a configuration problem: restarting cannot fix it (like check-config)


def _url_secrets(url: SecretStr | None) -> list[str]:
    """The database URL and its password (as written and decoded), to mask in the logs."""
    if url is None:
        return []
    value = url.get_secret_value()
    try:
        password = urlsplit(value).password or ""
    except ValueError:
        password = ""
    return [value, password, unquote(password)]


async def run_service(
    settings: Settings,
    *,
    apps: Apps | None = None,
    environ_left: Sequence[str] = (),
    retired: Sequence[ConfigProblem] = (),
) -> int:
    """`environ_left`: secret settings the start-up environment still shows (the kernel
    would not let `take_secrets` overwrite them), said in the log; `retired`: settings no
    longer read but still set, each a warning in the log (check-config refuses them)."""
    feishu = settings.feishu
    apps = apps or apps_from_settings(settings)
    keys = [(a.app_secret, a.encrypt_key, a.verification_token) for a in apps.apps.values()]
    secrets = [
        s.get_secret_value()
        for s in (
            feishu.feishu_app_secret,
            feishu.feishu_encrypt_key,
            feishu.feishu_verification_token,
            settings.ops.bridge_ops_token,
            *(key for app_keys in keys for key in app_keys),
        )
        if s is not None
    ] + _url_secrets(settings.store.bridge_database_url)
    configure_logging(settings.ops.bridge_log_level, secrets)
    t = Translator(settings.presence.bridge_locale)
    for problem in retired:
        words = problem.in_words(t)
        log.warning("%s", t("cli.config_warning", variable=problem.variable, problem=words))
    if environ_left:
        log.warning(
            "/proc/%d/environ still shows %s (it could not be overwritten): root can read"
            " them there; run the agents sandboxed (docs/sandbox.md)",
            os.getpid(),
            ", ".join(environ_left),
        )
    service = build_service(settings, apps=apps)
    try:
        await service.start()
    except DuplicateInstance as exc:
        log.error(
            "another running instance is named %s: give every instance its own "
            "BRIDGE_INSTANCE_ID (two under one name would run conversations twice)",
            exc,
        )
        await service.store.close()
        return EXIT_DUPLICATE
    try:
        await until_signalled()
    finally:
        log.info("shutting down")
        await service.stop()
    return 0


async def until_signalled() -> None:
    """Until SIGINT or SIGTERM (`feishu-bridge run` and `demo` stop cleanly on either)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
