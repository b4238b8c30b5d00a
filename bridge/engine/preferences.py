"""What a conversation chose of its agent from the chat (`/mode`, `/model`), kept in the store
and set again on every session the conversation opens: after a bridge restart, after `/new`,
on another agent process. (An agent restart under a live session is handled in the runtime,
which sets the session's own choices again when it reloads it.)"""

from __future__ import annotations

import logging

from bridge.runtime.port import AgentRefused, AgentRuntime
from bridge.store.port import Store

log = logging.getLogger(__name__)

MODE = "mode"
CONFIG = "config:"  # + the config option's id


async def apply_preferences(
    runtime: AgentRuntime, store: Store, conversation_key: str, session_id: str
) -> None:
    chosen = await store.preferences(conversation_key)
    if not chosen:
        return
    mode = chosen.get(MODE)
    if mode is not None:
        modes = await runtime.modes(session_id)
        offered = modes is not None and any(m.mode_id == mode for m in modes.available)
        if offered and modes is not None and modes.current != mode:
            try:
                await runtime.set_mode(session_id, mode)
            except AgentRefused as exc:
                log.warning("could not set mode %s on a new session (%s)", mode, exc.reason)
    options = {o.config_id: o for o in await runtime.config(session_id)}
    for name, value in chosen.items():
        option = options.get(name.removeprefix(CONFIG)) if name.startswith(CONFIG) else None
        if option is None or option.current == value:
            continue
        if option.values and all(v.mode_id != value for v in option.values):
            continue  # no longer offered: the agent's default stands
        try:
            await runtime.set_config(session_id, option.config_id, value)
        except AgentRefused as exc:
            log.warning("could not set %s on a new session (%s)", name, exc.reason)
