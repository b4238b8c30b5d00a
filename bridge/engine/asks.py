"""/mode and /model: the agent is asked for what it offers, the choice is set and kept (a
preference of the conversation, restored on its next session), and the core is told."""

from __future__ import annotations

import logging
from collections.abc import Callable

from bridge.core.effects import AskConfig, AskModes
from bridge.core.inputs import ConfigAnswered, ModesAnswered
from bridge.engine.actor import ConversationActor
from bridge.engine.turn_runner import TurnRunner
from bridge.runtime.events import model_option
from bridge.runtime.port import (
    CONFIG_CHOICE,
    MODE_CHOICE,
    AgentRefused,
    AgentRuntime,
    RuntimeUnavailable,
)
from bridge.store.port import Store

log = logging.getLogger(__name__)


class Asks:
    def __init__(
        self,
        *,
        runtime: AgentRuntime,
        store: Store,
        runner: TurnRunner,
        clock: Callable[[], float],
    ) -> None:
        self._runtime = runtime
        self._store = store
        self._runner = runner
        self._clock = clock

    async def modes(self, actor: ConversationActor, work: AskModes) -> None:
        try:
            session_id = work.session_id or await self._runner.open_session(actor.key)
        except RuntimeUnavailable as exc:
            actor.feed(ModesAnswered(work.message_id, None, work.choice, exc.reason))
            return
        modes = await self._runtime.modes(session_id)
        error = None
        offered = modes is not None and any(m.mode_id == work.choice for m in modes.available)
        if offered and modes is not None and work.choice != modes.current:
            try:
                await self._runtime.set_mode(session_id, work.choice)
            except AgentRefused as exc:
                error = exc.reason
        if offered and error is None:
            await self._store.set_preference(actor.key, MODE_CHOICE, work.choice, self._clock())
        actor.feed(ModesAnswered(work.message_id, modes, work.choice, error))

    async def config(self, actor: ConversationActor, work: AskConfig) -> None:
        try:
            session_id = work.session_id or await self._runner.open_session(actor.key)
        except RuntimeUnavailable as exc:
            log.warning("/%s: no session (%s)", work.kind, exc.reason)
            actor.feed(ConfigAnswered(work.message_id, work.kind, (), work.choice))
            return
        options = await self._runtime.config(session_id)
        model, error = model_option(options), None
        offered = model is not None and any(v.mode_id == work.choice for v in model.values)
        if offered and model is not None and work.choice != model.current:
            try:
                await self._runtime.set_config(session_id, model.config_id, work.choice)
            except AgentRefused as exc:
                error = exc.reason
        if offered and model is not None and error is None:
            name = CONFIG_CHOICE + model.config_id
            await self._store.set_preference(actor.key, name, work.choice, self._clock())
        actor.feed(ConfigAnswered(work.message_id, work.kind, options, work.choice, error))
