"""Feishu's error answers, as the Open Platform documents them (code, msg, HTTP status).

One catalog, so the emulator answers every failure the way Feishu does and the bridge's error
mapping is exercised against the real numbers. Sources: the "通用错误码" page and the error
tables of the im/v1 message, reply, patch and reaction pages.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FeishuError(Exception):
    """A Feishu business error: raised inside the emulator, answered as Feishu's envelope."""

    http_status: int
    code: int
    msg: str

    def with_detail(self, detail: str) -> FeishuError:
        # Feishu appends the specific reason as ", ext=…" to the generic message.
        return FeishuError(self.http_status, self.code, f"{self.msg}, ext={detail}")

    def body(self) -> dict[str, Any]:
        log_id = secrets.token_hex(16).upper()
        return {
            "code": self.code,
            "msg": self.msg,
            "error": {
                "log_id": log_id,
                "troubleshooter": (
                    "排查建议查看（Troubleshooting suggestions）: "
                    f"https://open.feishu.cn/search?from=openapi&log_id={log_id}&code={self.code}"
                ),
            },
        }


# --- auth/v3 ---------------------------------------------------------------------------------
INVALID_PARAM = FeishuError(400, 10003, "invalid param")  # unknown app_id / malformed body
APP_SECRET_INVALID = FeishuError(400, 10014, "app secret invalid")

# --- gateway (every /open-apis call) ---------------------------------------------------------
MISSING_ACCESS_TOKEN = FeishuError(
    400,
    99991661,
    "Missing access token for authorization. Please make a request with token attached.",
)
INVALID_TENANT_TOKEN = FeishuError(
    400,
    99991663,
    "Invalid access token for authorization. Please make a request with token attached.",
)
RATE_LIMITED = FeishuError(429, 99991400, "request trigger frequency limit")
FIELD_VALIDATION_FAILED = FeishuError(400, 99992402, "field validation failed")
INTERNAL_ERROR = FeishuError(500, 1500, "Internal Server Error")  # gateway's generic 5xx body
NOT_FOUND = FeishuError(404, 404, "404 page not found")

# --- im/v1 messages --------------------------------------------------------------------------
MESSAGE_INVALID_PARAM = FeishuError(
    400, 230001, "Your request contains an invalid request parameter."
)
BOT_NOT_IN_CHAT = FeishuError(400, 230002, "The bot can not be outside the group.")
MESSAGE_RECALLED = FeishuError(400, 230011, "The message is recalled.")
RESOURCE_NOT_IN_MESSAGE = FeishuError(400, 234003, "File not in msg.")
RESOURCE_TYPE_MISMATCH = FeishuError(400, 234043, "Unsupported message resource type.")
MESSAGE_TOO_LONG = FeishuError(400, 230025, "The length of the message content reaches its limit.")
CARD_CONTENT_FAILED = FeishuError(400, 230099, "Failed to create card content")

# --- cardkit/v1 (card entities; the error tables of the card and element pages) ------------
CARD_ENTITY_NOT_FOUND = FeishuError(400, 200740, "The card entity does not exist")
CARD_STREAMING_CLOSED = FeishuError(400, 300309, "Card streaming closed")
CARD_ONLY_TEXT = FeishuError(400, 300310, "Only update text")
CARD_SEQUENCE = FeishuError(
    400, 300317, "The sequence number for operating on the card did not increment consecutively"
)
CARD_ELEMENT_NOT_FOUND = FeishuError(400, 300311, "The element does not exist in the card")
CARD_ELEMENT_TAG = FeishuError(400, 300312, "The element's tag cannot be changed")
CARD_TOO_LARGE = FeishuError(400, 200860, "Card content exceeds limit.")
CARD_GENERATE_FAILED = FeishuError(400, 200220, "Failed to generate card content")
CARD_UPDATE_MULTI = FeishuError(400, 300302, "update_multi property is false")
CARDKIT_NO_SCOPE = FeishuError(
    400, 99991672, "Access denied. One of the following scopes is required: [cardkit:card:write]"
)

# --- im/v1 message reactions -----------------------------------------------------------------
REACTION_TYPE_INVALID = FeishuError(400, 231001, "reaction type is invalid.")
REACTION_MESSAGE_NOT_FOUND = FeishuError(
    400, 231003, "The message is not found, maybe not exist or deleted."
)
REACTION_NOT_OF_MESSAGE = FeishuError(400, 231010, "The reaction does not belong to the message.")
REACTION_ID_INVALID = FeishuError(400, 231011, "The request has an invalid reaction_id.")

# Request-body limits from the send/reply/patch pages: text 150 KB, card and post 30 KB.
TEXT_LIMIT_BYTES = 150 * 1024
CARD_LIMIT_BYTES = 30 * 1024
UUID_MAX_CHARS = 50
