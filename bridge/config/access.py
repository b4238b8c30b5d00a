"""Who can reach the agent, and who can approve what it does. Checked at start
(bridge/config/checks.py): an agent open to everyone, or four eyes with nobody to approve,
is refused unless said on purpose."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BeforeValidator, Field

from bridge.config.base import CommaList, Section, comma_list, why

Ids = Annotated[CommaList, BeforeValidator(comma_list)]


class AccessSection(Section):
    """Allow-lists of users and chats, and the approvers of the agent's actions."""

    title: ClassVar[str] = "Who can reach the agent"

    bridge_allowed_users: Ids = Field(
        default=(),
        description="Comma-separated open_ids allowed to talk to the bot.",
        json_schema_extra=why(
            "Set it (or BRIDGE_ALLOWED_CHATS): the agent runs commands, so name who may drive it."
        ),
    )
    bridge_allowed_chats: Ids = Field(
        default=(),
        description="Comma-separated chat_ids the bot answers in.",
        json_schema_extra=why("To let everyone in chosen group chats use the bot."),
    )
    bridge_allow_all: bool = Field(
        default=False,
        description="Allow everyone who can message the bot (both allow-lists empty).",
        json_schema_extra=why(
            "Only when everyone who can message the bot may drive the agent (an app visible"
            " to a small team only)."
        ),
    )
    bridge_approvers: Ids = Field(
        default=(),
        description="Comma-separated open_ids who may answer any approval.",
        json_schema_extra=why(
            "To let leads answer approvals for anyone's turn; with four eyes, who may."
        ),
    )
    bridge_requester_may_approve: bool = Field(
        default=True,
        description="The requester may answer their own approval cards.",
        json_schema_extra=why(
            "`false` for four eyes: someone other than the requester approves what the agent does."
        ),
    )
