"""Feishu's in-app urgent notification (加急) as the emulator serves it:
`PATCH /open-apis/im/v1/messages/:message_id/urgent_app?user_id_type=open_id` with
`{"user_id_list": [...]}`. As the Open Platform documents it: the gateway's 99991672 without
the scope im:message.urgent (checked first), `user_id_type` open_id and a non-empty list
required (99992402), only a message the bot itself sent (230001; 230011 once recalled), and
only members of the message's chat are urged — the others come back in
`invalid_user_id_list`. Every accepted urge is recorded for tests (and the chat page)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bridge.devtools.emulator import codes
from bridge.devtools.emulator.chats import ChatWorld

SCOPE = "im:message.urgent"
NO_SCOPE = codes.FeishuError(
    400, 99991672, f"Access denied. One of the following scopes is required: [{SCOPE}]"
)


@dataclass(frozen=True)
class Urgent:
    """One urgent notification Feishu sent: on which message, to whom."""

    message_id: str
    chat_id: str
    user_ids: tuple[str, ...]  # those urged (members of the chat)
    invalid: tuple[str, ...]  # those named who could not be (not in the chat)
    at: float  # wall-clock seconds
    app_id: str = ""  # the app that urged (the ids above are its open_ids)


class Urgents:
    def __init__(self, world: ChatWorld) -> None:
        self._world = world
        self.scope_granted = True
        self.sent: list[Urgent] = []

    def urge(
        self, app_id: str, message_id: str, query: Mapping[str, str], body: Any
    ) -> dict[str, Any]:
        if not self.scope_granted:
            raise NO_SCOPE
        if query.get("user_id_type") != "open_id":
            raise codes.FIELD_VALIDATION_FAILED.with_detail("user_id_type open_id is required")
        users = body.get("user_id_list") if isinstance(body, Mapping) else None
        if not isinstance(users, list) or not users or not all(isinstance(u, str) for u in users):
            raise codes.FIELD_VALIDATION_FAILED.with_detail("user_id_list is required")
        message = self._world.visible(app_id, message_id)
        if message.recalled:
            raise codes.MESSAGE_RECALLED
        if message.app_id != app_id:
            raise codes.MESSAGE_INVALID_PARAM.with_detail("only the bot's own messages")
        members = self._world.members_of(message.chat_id)
        person = self._world.people.person
        urged = tuple(dict.fromkeys(u for u in users if person(u) in members))
        invalid = tuple(dict.fromkeys(u for u in users if person(u) not in members))
        if urged:
            at = time.time()
            self.sent.append(Urgent(message_id, message.chat_id, urged, invalid, at, app_id))
            self._world.touched()
        return {"invalid_user_id_list": list(invalid)}
