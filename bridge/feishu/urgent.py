"""Feishu's in-app urgent notification (加急, `PATCH /open-apis/im/v1/messages/:message_id/
urgent_app?user_id_type=open_id`, body `{"user_id_list": [...]}`), which
`FeishuClient.urgent_app` sends: only on a message the bot sent, only to members of its chat
(others come back in `data.invalid_user_id_list`). Without the app scope im:message.urgent
Feishu answers 99991672 ("Access denied. One of the following scopes is required").
"""

from __future__ import annotations

from typing import Final

from bridge.feishu.errors import BusinessError, FeishuError

SCOPE: Final = "im:message.urgent"
SCOPE_MISSING: Final = 99991672  # the gateway's "Access denied. One of the following scopes…"
# A message id no chat holds: the start-up probe urges it, to learn whether the scope is
# granted (the gateway checks the scope before it looks for the message).
PROBE_MESSAGE: Final = "om_bridge_urgent_probe"
PROBE_USER: Final = "ou_bridge_urgent_probe"  # the list may not be empty


def scope_missing(exc: FeishuError) -> bool:
    return isinstance(exc, BusinessError) and exc.code == SCOPE_MISSING
