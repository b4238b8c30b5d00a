"""Fetching a turn's images and files from Feishu before its prompt: each streamed to the
bridge's data folder under the size limit, named safely, handed to the runtime, and removed
once the turn is over. One that cannot come is reported to the core (one line), and the
turn goes on without it."""

from __future__ import annotations

import logging
import mimetypes
import shutil
from collections.abc import Sequence
from pathlib import Path

from bridge.core.inputs import AttachmentFailed
from bridge.core.state import Attachment
from bridge.feishu.api import FeishuApi
from bridge.feishu.errors import FeishuError
from bridge.feishu.resources import TooLarge
from bridge.paths import safe_name
from bridge.runtime.port import PromptFile

log = logging.getLogger(__name__)

MB = 1024 * 1024


class Attachments:
    def __init__(self, *, feishu: FeishuApi, folder: Path, max_mb: int) -> None:
        self._feishu = feishu
        self._folder = folder
        self._max_mb = max_mb
        self._fetched: set[str] = set()  # turns with a folder to remove at their end

    async def fetch(
        self, turn_id: str, wanted: Sequence[Attachment]
    ) -> tuple[list[PromptFile], list[AttachmentFailed]]:
        files: list[PromptFile] = []
        failed: list[AttachmentFailed] = []
        if not wanted:
            return files, failed
        folder = self.folder_for(turn_id)
        for number, item in enumerate(wanted, start=1):
            name = safe_name(item.name) if item.name else f"{item.kind}-{number}"
            dest = folder / f"{number}-{name}"
            try:
                got = await self._feishu.download_resource(
                    item.message_id,
                    item.key,
                    item.resource_type,
                    dest,
                    max_bytes=self._max_mb * MB,
                )
            except TooLarge:
                failed.append(AttachmentFailed(turn_id, name, True, self._max_mb))
                continue
            except (FeishuError, OSError) as exc:
                log.warning("could not fetch an attachment of turn %s (%s)", turn_id, exc)
                failed.append(AttachmentFailed(turn_id, name, False))
                continue
            mime = got.mime or mimetypes.guess_type(name)[0] or "application/octet-stream"
            if not item.name:  # an image has no name of its own: one from its type
                name += mimetypes.guess_extension(mime) or ""
            files.append(PromptFile(dest, item.kind, mime, name, item.message_id))
        return files, failed

    def folder_for(self, turn_id: str) -> Path:
        """The turn's own folder (made now), removed with its other files at its end."""
        folder = self._folder / safe_name(turn_id)
        folder.mkdir(parents=True, exist_ok=True)
        self._fetched.add(turn_id)
        return folder

    def release(self, turn_id: str) -> None:
        """Removes the turn's files, if it had any (most turns have none: no folder to try,
        where rmtree's calls on a missing one cost more than the rest of a turn's end)."""
        if turn_id in self._fetched:
            self._fetched.discard(turn_id)
            shutil.rmtree(self._folder / safe_name(turn_id), ignore_errors=True)
