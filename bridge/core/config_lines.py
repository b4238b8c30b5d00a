"""The lines `/model` and `/config` answer with, chosen from what the agent offers."""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.effects import PostText
from bridge.core.inputs import ConfigAnswered
from bridge.core.text import Params
from bridge.runtime.events import model_option


def config_lines(ctx: StepContext, event: ConfigAnswered) -> None:
    mid, idem = event.message_id, f"{event.message_id}:{event.kind}"
    if event.kind == "config":
        if not event.options:
            ctx.emit(PostText("command.config_none", {}, mid, idem))
            return
        # The agent's own ids, names and values, one a line (data, not words of ours).
        listed = "\n".join(f"{o.config_id} — {o.name}: {o.current}" for o in event.options)
        ctx.emit(PostText("command.config_list", {"options": listed}, mid, idem))
        return
    option = model_option(event.options)
    if option is None:
        ctx.emit(PostText("command.model_unsupported", {}, mid, idem))
        return
    models = "\n".join(f"{v.mode_id} — {v.name}" for v in option.values)
    choice = event.choice
    params: Params
    if not choice:
        params = {"current": option.current, "models": models}
        ctx.emit(PostText("command.model_list", params, mid, idem))
    elif all(v.mode_id != choice for v in option.values):
        params = {"model": choice, "models": models}
        ctx.emit(PostText("command.model_unknown", params, mid, idem))
    elif event.error is not None:
        params = {"model": choice, "reason": event.error}
        ctx.emit(PostText("command.model_failed", params, mid, idem))
    else:
        ctx.emit(PostText("command.model_set", {"model": choice}, mid, idem))
