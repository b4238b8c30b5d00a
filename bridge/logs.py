"""Logging set-up: one line per record, key=value friendly, secrets scrubbed as a last guard.

Call sites never log message text, prompts or secrets; the filter below is a second line
of defence that masks any configured secret value that slips into a record anyway.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class SecretMask(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = [s for s in secrets if s and len(s) >= 4]

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._secrets:
            return True
        message = record.getMessage()
        masked = message
        for secret in self._secrets:
            masked = masked.replace(secret, "***")
        if masked != message:
            record.msg, record.args = masked, None
        return True


def configure_logging(level: str = "INFO", secrets: Iterable[str] = ()) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler.addFilter(SecretMask(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # lark-oapi logs request details at INFO; keep it to warnings.
    logging.getLogger("Lark").setLevel(logging.WARNING)
    # httpx logs every request line at INFO; the Feishu client logs what matters itself.
    logging.getLogger("httpx").setLevel(logging.WARNING)
