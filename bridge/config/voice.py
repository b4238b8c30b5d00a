"""Voice messages: recognized by Feishu and sent as words, sent as audio, or refused."""

from __future__ import annotations

from typing import ClassVar, Final, Literal

from pydantic import Field

from bridge.config.base import Section, why

VoiceChoice = Literal["transcribe", "file", "off"]

VOICE_HELP: Final = (
    "Voice messages: `transcribe` (Feishu's speech recognition; the words are the prompt),"
    " `file` (the audio goes to the agent as a file), `off` (refused politely). Unset:"
    " `transcribe` when the app has the speech_to_text:speech scope (asked at start-up), else"
    " `file`."
)
VOICE_MAX_HELP: Final = (
    "Longest voice message recognized (seconds); past it, one line names the limit. Up to 60 s"
    " is one recognition call, longer goes in 200 ms pieces of a stream."
)


class VoiceSection(Section):
    """What becomes of a voice message."""

    title: ClassVar[str] = "Voice messages"

    bridge_voice: VoiceChoice | None = Field(
        default=None,
        description=VOICE_HELP,
        json_schema_extra=why(
            "`file` when the agent understands audio itself; `off` to refuse voice; unset,"
            " the bridge chooses by the app's scopes."
        ),
    )
    bridge_voice_max_seconds: int = Field(
        default=300,
        ge=1,
        le=3600,
        description=VOICE_MAX_HELP,
        json_schema_extra=why(
            "Lower it to bound the recognition's cost and wait; raise it for long voice notes."
        ),
    )
