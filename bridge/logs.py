"""Logging set-up: one line per record, key=value friendly, secrets scrubbed as a last guard.

Call sites never log message text, prompts or secrets; the formatter below is a second line
of defence that masks any secret value that slips into a line anyway, tracebacks included:
the bridge's configured secrets and the agents' credentials from the environment (every
variable named `*_API_KEY`, `*_TOKEN` or `*_SECRET`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Mapping

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_CREDENTIAL_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET")


def credentials_in(environ: Mapping[str, str]) -> list[str]:
    """The values of the environment's credential-looking variables (agents' API keys); short
    values (a flag such as `true`) are not secrets and would only blank out words."""
    return [
        value
        for name, value in environ.items()
        if name.upper().endswith(_CREDENTIAL_SUFFIXES) and len(value) >= 8
    ]


def app_prefix(app: str) -> str:
    """What starts a line about one app of a bridge that serves several ("app NAME: ";
    nothing when unnamed)."""
    return f"app {app}: " if app else ""


class SecretMask(logging.Formatter):
    """Formats a record (message and traceback), then masks every known secret in it."""

    def __init__(self, secrets: Iterable[str], fmt: str = _FORMAT) -> None:
        super().__init__(fmt)
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        for secret in self._secrets:
            line = line.replace(secret, "***")
        return line


def configure_logging(level: str = "INFO", secrets: Iterable[str] = ()) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SecretMask([*secrets, *credentials_in(os.environ)]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # lark-oapi logs request details at INFO; keep it to warnings.
    logging.getLogger("Lark").setLevel(logging.WARNING)
    # httpx logs every request line at INFO; the Feishu client logs what matters itself.
    logging.getLogger("httpx").setLevel(logging.WARNING)
