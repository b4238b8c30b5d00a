"""The SDK's log lines, made safe and useful: the connection ticket, access keys and event
payloads are redacted before any handler sees them, and the lines that say how the
connection is doing are passed to the long connection, which derives its state from them."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Final

# The handshake URL's query holds the connection ticket and access key.
WEBSOCKETS_LOGGER: Final = "websockets.client"
_URL_QUERY = re.compile(r"((?:wss?|https?)://[^\s?\"']+)\?[^\s\"']*")
_REQUEST_LINE_QUERY = re.compile(r"((?:GET|POST) /[^\s?]*)\?\S*")
_PAYLOAD = re.compile(r", payload: .*", re.DOTALL)


def _redact(message: str) -> str:
    message = _URL_QUERY.sub(r"\1?<redacted>", message)
    message = _REQUEST_LINE_QUERY.sub(r"\1?<redacted>", message)
    return _PAYLOAD.sub(", payload: <redacted>", message)


def _redact_record(record: logging.LogRecord) -> str | None:
    """Redact `record` in place; its message, or None when it cannot be formatted."""
    try:
        message = record.getMessage()
    except Exception:  # a malformed record must not break logging
        return None
    redacted = _redact(message)
    if redacted != message:
        record.msg, record.args = redacted, None
    return redacted


class RedactFilter(logging.Filter):
    """For the `websockets.client` logger, whose DEBUG lines show the handshake request."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _redact_record(record) is not None


class LarkLogFilter(logging.Filter):
    """Redacts SDK records, derives the connection state from them, applies the level."""

    def __init__(self, observe: Callable[[str], None], level: int) -> None:
        super().__init__()
        self._observe = observe
        self._level = level

    def filter(self, record: logging.LogRecord) -> bool:
        message = _redact_record(record)
        if message is None:
            return False
        self._observe(message)
        return record.levelno >= self._level
