"""BRIDGE_VOICE and BRIDGE_VOICE_MAX_SECONDS: their type and their words (config.py is full)."""

from __future__ import annotations

from typing import Final, Literal

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
