"""The prompt's content blocks: the user's text, and the images and files they sent.

An image goes as ACP image content when the agent declares `promptCapabilities.image`;
anything else (and an image for an agent without it) is put in the session's folder, under
`.feishu/inbox/<message>/`, and linked (`resource_link`). A voice message's audio (its
words are the text) goes as ACP audio content to an agent that declares
`promptCapabilities.audio`, and not at all to one that does not. The name was sanitized by the
engine; the target is checked once more to lie inside the folder.
"""

from __future__ import annotations

import base64
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acp.schema import (
    AudioContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
)

from bridge.paths import safe_name, within
from bridge.runtime.port import PromptFile

INBOX = Path(".feishu") / "inbox"
VOICE = "voice"  # a voice message heard by the engine (bridge/core/voice.py)


def prompt_blocks(
    text: str, files: Sequence[PromptFile], *, images: bool, cwd: str, audio: bool = False
) -> list[Any]:
    blocks: list[Any] = []
    if text.strip():
        blocks.append(TextContentBlock(type="text", text=text))
    for file in files:
        if file.kind == VOICE:
            if audio:
                data = base64.b64encode(file.path.read_bytes()).decode("ascii")
                blocks.append(AudioContentBlock(type="audio", data=data, mime_type=file.mime))
            continue
        if file.kind == "image" and images:
            data = base64.b64encode(file.path.read_bytes()).decode("ascii")
            blocks.append(ImageContentBlock(type="image", data=data, mime_type=file.mime))
            continue
        target = _inbox_path(Path(cwd), file)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file.path, target)
        blocks.append(
            ResourceContentBlock(
                type="resource_link",
                uri=target.as_uri(),
                name=file.name,
                mime_type=file.mime or None,
                size=target.stat().st_size,
            )
        )
    return blocks or [TextContentBlock(type="text", text="")]


def _inbox_path(cwd: Path, file: PromptFile) -> Path:
    folder = (cwd / INBOX / safe_name(file.message_id)).resolve()
    target = (folder / safe_name(file.name)).resolve()
    root = cwd.resolve()
    if target == root or not within(target, root):
        raise ValueError("an attachment would land outside the workspace")
    return target
