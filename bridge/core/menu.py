"""The bot's custom menu: which command a click names.

Feishu's bot menu sends only the `event_key` an operator gave the item in the developer
console (docs/feishu-app-setup.md lists the ones to configure). It is read leniently: any
case, a leading "/", "-" for "_", and a few aliases; an argument may follow after ":" or a
space ("agent:codex", "agent codex"). A key that names nothing the menu drives is None (the
clicker is told so, politely).

`project` moves the conversation's folder as `/cd` does (the nearest switch there is today).
"""

from __future__ import annotations

from typing import Final

from bridge.core.inputs import CommandName

_ALIASES: Final = {
    "stop": CommandName.STOP,
    "cancel": CommandName.STOP,
    "new": CommandName.NEW,
    "new_session": CommandName.NEW,
    "reset": CommandName.NEW,
    "status": CommandName.STATUS,
    "help": CommandName.HELP,
    "agent": CommandName.AGENT,
    "project": CommandName.PROJECT,
    "cd": CommandName.CD,
}
# The menu switches; an argument to any other command is ignored.
_TAKES_ARG: Final = frozenset({CommandName.PROJECT, CommandName.AGENT, CommandName.CD})


def menu_command(event_key: str) -> tuple[CommandName, str] | None:
    """The command a menu item's `event_key` names, and its argument ("" for none)."""
    key = event_key.strip().lstrip("/")
    sep = min((i for i in (key.find(":"), key.find(" ")) if i >= 0), default=len(key))
    word, arg = key[:sep], key[sep + 1 :].strip()
    name = _ALIASES.get(word.lower().replace("-", "_"))
    if name is None:
        return None
    return name, arg if name in _TAKES_ARG else ""


def first_contact_key(admitted: bool) -> str:
    """The line that opens a private chat the bridge has never seen (a click before any
    message): found only by posting to the user. A stranger gets the refusal a message
    would get; anyone else a greeting, before the command's own answer."""
    return "menu.first_contact" if admitted else "access.refused"
