"""`GET /turns/{id}`: one turn's outcome and timeline, read from the store (never any text a
user wrote: the store keeps prompts out of traces)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from bridge.store.port import Store, TraceEntry

TurnView = Callable[[str], Awaitable[dict[str, object] | None]]


def _none_pending(turn_id: str) -> list[TraceEntry]:
    return []


async def turn_view(
    store: Store,
    turn_id: str,
    *,
    pending: Callable[[str], list[TraceEntry]] = _none_pending,
) -> dict[str, object] | None:
    """`pending`: timeline entries not written yet (the engine writes them behind)."""
    turn = await store.turn(turn_id)
    if turn is None:
        return None
    trace = [*await store.trace_for(turn_id), *pending(turn_id)]
    return {
        "turn_id": turn.turn_id,
        "conversation": turn.conversation_key,
        "started_at": turn.started_at,
        "outcome": turn.outcome.value if turn.outcome else None,
        "ending": _ending(trace),
        "finished_at": turn.finished_at,
        "trace": [{"at": e.at, "kind": e.kind, "detail": e.detail} for e in trace],
    }


async def app_turn_view(
    apps: Sequence[tuple[str, str, TurnView]], turn_id: str, app: str | None = None
) -> dict[str, object] | None:
    """A turn of the app named `app` (the console names it: in a group with two bots one
    message is a turn of each), else of the first app that has it. `apps`: (name, the prefix
    of its conversation keys in the projection, its turn view), the first app first. The
    view names its `app`, and its conversation as the projection does."""
    for name, prefix, view in apps:
        if app is not None and name != app:
            continue
        found = await view(turn_id)
        if found is not None:
            return {**found, "app": name, "conversation": f"{prefix}{found['conversation']}"}
    return None


def _ending(trace: list[TraceEntry]) -> str | None:
    """The typed ending from the terminal entry (`<outcome> <ending>: <detail>`)."""
    for entry in trace:
        if entry.kind == "terminal":
            words = entry.detail.split(":", 1)[0].split()
            return words[1] if len(words) > 1 else None
    return None
