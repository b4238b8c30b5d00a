"""The pure conversation core: execution state, turn lifecycle, presence policy.

No I/O and no clock: `step(conv, event, now, timings)` returns the new state and the
effects; a thin executor performs them.
"""

from bridge.core.machine import step
from bridge.core.presence import Timings
from bridge.core.snapshot import snapshot, status_line
from bridge.core.state import Conversation, ExecState, Options, Outcome, PresenceStyle
from bridge.core.text import Text, format_elapsed

__all__ = [
    "Conversation",
    "ExecState",
    "Options",
    "Outcome",
    "PresenceStyle",
    "Text",
    "Timings",
    "format_elapsed",
    "snapshot",
    "status_line",
    "step",
]
