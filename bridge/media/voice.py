"""A turn's voice message made words before its prompt: downloaded through the
message-resource API, decoded to 16 kHz mono PCM (PyAV, in a worker thread), recognized by
Feishu. The core is told what was heard (it shows the user one quoted line) or why nothing
was (it ends the round with one line, and the agent gets nothing). The transcript is the
prompt; the audio goes beside it only to an agent that takes audio (runtime/acp/prompting.py).
Never logged: what was said."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from bridge.core.effects import StartTurn
from bridge.core.inputs import VoiceHeard
from bridge.core.state import Attachment
from bridge.core.voice import VOICE
from bridge.feishu.errors import FeishuError
from bridge.feishu.opus import BYTES_PER_SECOND, TooLong, Undecodable, decode_pcm16k
from bridge.feishu.resources import Downloaded, TooLarge
from bridge.feishu.speech import SCOPE, scope_missing
from bridge.runtime.port import PromptFile

log = logging.getLogger(__name__)

MB = 1024 * 1024
VOICE_MIME = "audio/ogg"  # Feishu keeps voice messages as Ogg Opus


@runtime_checkable
class SpeechApi(Protocol):
    """What hearing a voice needs of Feishu (`FeishuClient` has both; a fake without
    `recognize_speech` leaves voice messages to pass as files)."""

    async def download_resource(
        self, message_id: str, key: str, resource_type: str, dest: Path, *, max_bytes: int
    ) -> Downloaded: ...

    async def recognize_speech(self, pcm: bytes) -> str: ...


class Fed(Protocol):
    def feed(self, event: VoiceHeard) -> object: ...


class TurnFolders(Protocol):
    def folder_for(self, turn_id: str) -> Path: ...


class _Failed(Exception):
    def __init__(self, failure: str, limit_seconds: int = 0) -> None:
        super().__init__(failure)
        self.failure = failure
        self.limit_seconds = limit_seconds


class Voice:
    def __init__(
        self, *, feishu: SpeechApi, folders: TurnFolders, max_seconds: int, max_mb: int
    ) -> None:
        self._feishu = feishu
        self._folders = folders
        self._max_seconds = max_seconds
        self._max_mb = max_mb

    async def hear(self, actor: Fed, work: StartTurn) -> tuple[StartTurn, list[PromptFile]] | None:
        """The turn with its voice made words (the prompt's text, after any typed text) and
        the audio files; None when a voice could not be heard (the core was told)."""
        voices = [a for a in work.attachments if a.kind == VOICE]
        if not voices:
            return work, []
        folder = self._folders.folder_for(work.turn_id)
        words: list[str] = []
        files: list[PromptFile] = []
        for number, item in enumerate(voices, start=1):
            dest = folder / f"voice-{number}.ogg"
            try:
                words.append(await self._hear_one(work.turn_id, item, dest))
            except Exception as exc:
                failed = exc if isinstance(exc, _Failed) else _Failed("failed")
                if failed is not exc:  # a bug must not strand the turn: said as a failure
                    log.exception("hearing the voice of turn %s raised", work.turn_id)
                log.info("voice of turn %s not heard: %s", work.turn_id, failed.failure)
                actor.feed(VoiceHeard(work.turn_id, "", failed.failure, failed.limit_seconds))
                return None
            files.append(PromptFile(dest, VOICE, VOICE_MIME, dest.name, item.message_id))
        heard = "\n".join(words)
        actor.feed(VoiceHeard(work.turn_id, heard))
        text = "\n\n".join(t for t in (work.text.strip(), heard) if t)
        rest = tuple(a for a in work.attachments if a.kind != VOICE)
        return replace(work, text=text, attachments=rest), files

    async def _hear_one(self, turn_id: str, item: Attachment, dest: Path) -> str:
        started = time.perf_counter()
        try:
            await self._feishu.download_resource(
                item.message_id, item.key, item.resource_type, dest, max_bytes=self._max_mb * MB
            )
        except TooLarge:
            raise _Failed("too_long", self._max_seconds) from None
        except (FeishuError, OSError) as exc:
            log.warning("could not fetch the voice of turn %s (%s)", turn_id, exc)
            raise _Failed("unfetched") from None
        fetched = time.perf_counter()
        try:
            pcm = await asyncio.to_thread(decode_pcm16k, dest, max_seconds=self._max_seconds)
        except TooLong:
            raise _Failed("too_long", self._max_seconds) from None
        except Undecodable as exc:
            log.warning("the voice of turn %s is not audio (%s)", turn_id, exc.reason)
            raise _Failed("undecodable") from None
        decoded = time.perf_counter()
        try:
            text = await self._feishu.recognize_speech(pcm)
        except FeishuError as exc:
            raise _Failed("refused" if scope_missing(exc) else "failed") from None
        log.info(
            "voice of turn %s: %.1f s of audio; fetched %.3f s, decoded %.3f s, heard %.3f s",
            turn_id,
            len(pcm) / BYTES_PER_SECOND,
            fetched - started,
            decoded - fetched,
            time.perf_counter() - decoded,
        )
        if not text.strip():
            raise _Failed("silent")
        return text.strip()


KINDS = {"transcribe": VOICE, "file": "audio", "off": "voice_off"}
PROBE_PCM = bytes(BYTES_PER_SECOND // 10)  # 100 ms of silence: enough to ask, nothing to hear


class VoiceMode:
    """BRIDGE_VOICE as it applies now. Unset, it is `transcribe` once Feishu took a probe,
    `file` when Feishu refuses recognition for lack of the scope (said plainly at start-up)."""

    def __init__(self, configured: str | None) -> None:
        self.configured = configured
        self.mode = configured or "transcribe"
        self.scope_missing = False

    def state(self) -> dict[str, object]:
        """For `/status`: the mode in force, and whether Feishu refused for the scope."""
        return {"mode": self.mode, "scope_missing": self.scope_missing}

    def kind(self) -> str:
        """The attachment kind the receiver gives an audio message (core/voice.py)."""
        return KINDS[self.mode]

    async def probe(self, speech: SpeechApi) -> None:
        if self.configured in ("file", "off"):
            return
        try:
            await speech.recognize_speech(PROBE_PCM)
        except FeishuError as exc:
            if not scope_missing(exc):
                log.warning("speech recognition could not be checked at start-up (%s)", exc)
                return
            self.scope_missing = True
            if self.configured is None:
                self.mode = "file"
                log.warning(
                    "voice messages go to the agent as audio files: Feishu refuses speech"
                    " recognition because the app lacks the scope %s (grant it and restart"
                    " to have them transcribed; BRIDGE_VOICE=file says this on purpose)",
                    SCOPE,
                )
            else:
                log.error(
                    "BRIDGE_VOICE=transcribe, but Feishu refuses speech recognition: the app"
                    " lacks the scope %s; every voice message will be answered with that",
                    SCOPE,
                )
            return
        log.info("voice messages: %s (speech recognition granted)", self.mode)
