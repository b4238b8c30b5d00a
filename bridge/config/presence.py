"""What users see of a turn: the language, the ack, the lines or the live card, and when the
bridge speaks up while the agent works, waits or will not stop. The timings are read by
the core's presence policy (`Timings.from_settings`). The least time between two progress
lines is the core's own (3 s): the call budget already lets a waiting line give way to a
newer one, so more spacing would only hide news."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from bridge.config.base import Section, clock, why


class PresenceSection(Section):
    """The language and style of what the bridge shows, and the timings of its lines."""

    title: ClassVar[str] = "Presence: what users see while the agent works"

    bridge_locale: Literal["zh_CN", "en_US"] = Field(
        default="zh_CN",
        description="Language of every text the bridge shows.",
        json_schema_extra=why("`en_US` for English-speaking users."),
    )
    bridge_presence_style: Literal["messages", "card"] = Field(
        default="messages",
        description="How a turn shows it is working: lines in the chat, or one live status"
        " card per turn.",
        json_schema_extra=why(
            "`card` for one live card per turn instead of lines: tidier chats, and the style"
            " that scales to many streaming turns (needs the scope cardkit:card:write)."
        ),
    )
    bridge_ack_emoji: str = Field(
        default="OnIt",
        min_length=1,
        description="Feishu emoji_type of the ack reaction.",
        json_schema_extra=why("To match the team's habits, e.g. `THUMBSUP`."),
    )
    bridge_state_reactions: bool = Field(
        default=True,
        description="The ack reaction follows its round: waiting (Alarm) while the round waits"
        " for the user, then done (DONE), stopped (CrossMark) or fault (ERROR) when it ends;"
        " one reaction at a time.",
        json_schema_extra=why("`false` for the single ack reaction alone, as before."),
    )
    bridge_received_text: bool = Field(
        default=False,
        description="Also post a 'received' line after the ack reaction.",
        json_schema_extra=why("When users miss the reaction (clients that hide reactions)."),
    )
    bridge_first_hint_seconds: float = Field(
        default=3.0,
        gt=0,
        description="One early 'working on it' line if nothing shows by then.",
        json_schema_extra=clock(
            "Lower it for users who want to see sooner that work started; raise it when most"
            " answers come soon after anyway."
        ),
    )
    bridge_heartbeat_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A heartbeat line after this much silence while running.",
        json_schema_extra=clock(
            "Lower it when users doubt a long turn is alive; raise it when heartbeats feel noisy."
        ),
    )
    bridge_stale_seconds: float = Field(
        default=600.0,
        gt=0,
        description="No sign of life this long: tell the user (not killed).",
        json_schema_extra=clock(
            "Raise it for agents with long silent steps (big builds, long test runs); lower it"
            " to hear of a hung agent sooner."
        ),
    )
    bridge_approval_timeout_seconds: float = Field(
        default=1800.0,
        gt=0,
        description="Unanswered approval/question: reminder at half, cancel.",
        json_schema_extra=why(
            "Raise it when approvers answer slowly (other time zones); lower it to free"
            " waiting turns sooner."
        ),
    )
    bridge_urgent: bool = Field(
        default=True,
        description="A card left unanswered gets Feishu's in-app urgent notification"
        " to who may answer it, once; without the scope im:message.urgent the reminder"
        " @-mentions them instead.",
        json_schema_extra=why("`false` for the reminder line alone, as before."),
    )
    bridge_urgent_seconds: float | None = Field(
        default=None,
        gt=0,
        description="How long after a card is shown the urge goes out; unset: with the"
        " reminder, at half the approval timeout.",
        json_schema_extra=clock(
            "Lower it when approvals are urgent business; an urge later than the timeout"
            " never goes out."
        ),
    )
    bridge_finish_grace_seconds: float = Field(
        default=3.0,
        ge=0,
        description="Grace after a non-final stop reason before the end line.",
        json_schema_extra=clock(
            "Raise it for an agent that still sends output after such a stop; rarely changed."
        ),
    )
    bridge_cancel_notice_seconds: float = Field(
        default=5.0,
        gt=0,
        description="A stop the agent has not confirmed by then: say so.",
        json_schema_extra=clock(
            "Raise it for an agent slow to stop, so users are not told too early that it is"
            " still stopping."
        ),
    )
    bridge_cancel_limit_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A stop not confirmed by then: end the round and restart the agent.",
        json_schema_extra=clock(
            "Raise it for an agent that needs long to stop cleanly (and restarts slowly);"
            " lower it to get stuck turns out of the way sooner."
        ),
    )
    bridge_card_update_interval_seconds: float = Field(
        default=0.5,
        gt=0,
        description="Least time between two updates of one status card.",
        json_schema_extra=clock(
            "Raise it to spend fewer Feishu calls with many live cards; lower it for smoother"
            " streaming with few."
        ),
    )
    bridge_usage_footer: bool = Field(
        default=False,
        description="End each turn's last message with a line of context use (and cost) when"
        " the agent reports it.",
        json_schema_extra=why("When users should see what each turn used and cost."),
    )
