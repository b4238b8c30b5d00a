"""The lines `/mode`, `/model` and `/config` answer with, chosen from what the agent offers."""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.effects import PostText
from bridge.core.inputs import ConfigAnswered, ModesAnswered
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


def mode_lines(ctx: StepContext, event: ModesAnswered) -> None:
    mid, modes = event.message_id, event.modes
    idem = f"{mid}:mode"
    if modes is None:
        key = "presence.runtime_unavailable" if event.error else "command.mode_unsupported"
        ctx.emit(PostText(key, {}, mid, idem))
        return
    names = {m.mode_id: m.name for m in modes.available}
    # The agent's own ids and names, one a line (data, not words of ours).
    listed = "\n".join(f"{m.mode_id} — {m.name}" for m in modes.available)
    current = modes.current or ""
    if not event.choice:
        params: Params = {"current": current, "modes": listed}
        ctx.emit(PostText("command.mode_list", params, mid, idem))
    elif event.choice not in names:
        params = {"mode": event.choice, "modes": listed}
        ctx.emit(PostText("command.mode_unknown", params, mid, idem))
    elif event.error is not None:
        params = {"mode": event.choice, "reason": event.error}
        ctx.emit(PostText("command.mode_failed", params, mid, idem))
    else:
        ctx.emit(PostText("command.mode_set", {"mode": event.choice}, mid, idem))
