"""`/status` in full, and the usage footer: what the session runs on and how full its
context is, in words the user reads at a glance."""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.effects import PostText
from bridge.core.inputs import StatusAnswered
from bridge.core.snapshot import status_line
from bridge.core.text import Text
from bridge.runtime.events import Usage

UNKNOWN = Text("status.unknown")
NO_SESSION = Text("status.no_session")  # the next message opens one


def status_lines(ctx: StepContext, event: StatusAnswered) -> None:
    mid, facts = event.message_id, event.facts
    key, params = status_line(ctx.conv, ctx.now)
    full = {
        "state": Text(key, params),
        "agent": facts.agent or UNKNOWN,
        "folder": facts.folder or UNKNOWN,
        "mode": facts.mode or UNKNOWN,
        "model": facts.model or UNKNOWN,
        "title": facts.title or (UNKNOWN if ctx.conv.session_id else NO_SESSION),
        "usage": usage_text(facts.usage) if facts.usage else UNKNOWN,
    }
    ctx.emit(PostText("command.status", full, mid, f"{mid}:status"))


def usage_text(usage: Usage, prefix: str = "usage.context") -> Text:
    """ "12.3k / 200k (6%)", with the session's cost when the agent reports one."""
    percent = round(100 * usage.used / usage.size) if usage.size else 0
    params: dict[str, str | int | Text] = {
        "used": tokens(usage.used),
        "size": tokens(usage.size),
        "percent": percent,
    }
    if usage.cost is None:
        return Text(prefix, params)
    params["cost"] = f"{usage.cost:.2f} {usage.currency or ''}".strip()
    return Text(f"{prefix}_cost", params)


def footer(ctx: StepContext) -> Text | None:
    """The usage footer under a turn's last message (BRIDGE_USAGE_FOOTER), when the agent
    reported its context use in this conversation."""
    usage = ctx.conv.usage
    if not ctx.conv.options.usage_footer or usage is None:
        return None
    return usage_text(usage, "usage.footer")


def tokens(count: int) -> str:
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k".replace(".0k", "k")
    return f"{count / 1_000_000:.1f}M".replace(".0M", "M")
