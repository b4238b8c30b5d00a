"""Recognising chat commands (`/new`, `/stop`, `/status`, `/help`) in a message text."""

from __future__ import annotations

from bridge.core.inputs import Command, CommandName

_KNOWN = {name.value: name for name in CommandName if name is not CommandName.UNKNOWN}


def parse_command(text: str, *, message_id: str, sender: str) -> Command | None:
    """A Command when the text starts with `/`, else None. `/x` unknown → UNKNOWN (help)."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    word, _, arg = stripped.partition(" ")
    name = _KNOWN.get(word[1:].lower(), CommandName.UNKNOWN)
    return Command(name=name, message_id=message_id, sender=sender, raw=word, arg=arg.strip())
