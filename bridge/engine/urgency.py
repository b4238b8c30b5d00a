"""Whether Feishu will send the urgent notification (加急) the core asks for with `Urge`:
BRIDGE_URGENT, and the app's scope im:message.urgent as a start-up probe (or the first
refusal) finds it. Without the scope every conversation is told (`UrgentUnavailable`), and
its cards left unanswered are urged by an @-mention on the reminder line instead."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from bridge.feishu.errors import BusinessError, FeishuError
from bridge.feishu.urgent import PROBE_MESSAGE, PROBE_USER, SCOPE, scope_missing

log = logging.getLogger(__name__)


class UrgentApi(Protocol):
    async def urgent_app(self, message_id: str, open_ids: Sequence[str]) -> list[str]: ...


class UrgentMode:
    def __init__(self, enabled: bool, on_missing: Callable[[], None] | None = None) -> None:
        self.enabled = enabled
        self.scope_missing = False
        self.on_missing = on_missing  # tells the conversations (the engine sets it)

    def state(self) -> dict[str, object]:
        """For `/status`: how a card left unanswered reaches who may answer it."""
        by = "off" if not self.enabled else "mention" if self.scope_missing else "urgent_app"
        return {"enabled": self.enabled, "scope_missing": self.scope_missing, "by": by}

    async def probe(self, feishu: UrgentApi) -> None:
        """Asks Feishu to urge a message no chat holds: 99991672 says the scope is missing;
        any other refusal (the message is not found) that it is granted."""
        if not self.enabled:
            return
        try:
            await feishu.urgent_app(PROBE_MESSAGE, [PROBE_USER])
        except BusinessError as exc:
            if scope_missing(exc):
                self.missing()
                return
        except FeishuError as exc:
            log.warning("urgent notifications could not be checked at start-up (%s)", exc)
            return
        log.info("cards left unanswered: Feishu's urgent notification (scope %s granted)", SCOPE)

    def missing(self) -> None:
        """Feishu refused for lack of the scope (said once in the log)."""
        if self.scope_missing:
            return
        self.scope_missing = True
        log.warning(
            "cards left unanswered are urged by an @-mention on the reminder line: Feishu refuses"
            " its urgent notification because the app lacks the scope %s (grant it and restart"
            " to have them urged; BRIDGE_URGENT=false turns urging off)",
            SCOPE,
        )
        if self.on_missing is not None:
            self.on_missing()
