"""Which lane of the app's call budget (`feishu/budget.py`) an effect's Feishu calls take,
and whose chat they count against. Refreshes and progress lines yield first when the
budget is short; the ending and the answer never wait behind them."""

from __future__ import annotations

from bridge.core.effects import (
    PostApprovalCard,
    PostQuestion,
    PostText,
    React,
    RelayAgentText,
    SendFile,
    ShowDiffs,
    ShowStatusCard,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.engine.actor import Owed, Work
from bridge.feishu.budget import Lane

# "Still working" and its kin: each has a deadline the user expects it by.
_HINTS = frozenset(
    {
        "presence.running_hint",
        "presence.heartbeat",
        "presence.stale",
        "presence.stale_no_activity",
        "presence.stopping",
        "presence.received",
    }
)


def chat_of(key: str) -> str:
    return key.split(":", 1)[0]  # a topic thread's key is "<chat>:<thread>"


def lane_of(work: Work) -> Lane:
    match work:
        case PostText(key=key, final=final):
            if final:
                return Lane.ENDING
            if key.startswith("progress."):
                return Lane.REFRESH
            if key in _HINTS:
                return Lane.HINT
            if key.startswith("presence.waiting") or key.endswith("_reminder"):
                return Lane.CARD  # the pause line that goes with an approval or a question
            return Lane.ANSWER
        case RelayAgentText(final=final) | ShowStatusCard(final=final):
            if final:
                return Lane.ENDING
            # A status card's first post is the turn's hint; its refreshes take their own
            # lane (status_cards.py).
            return Lane.HINT if isinstance(work, ShowStatusCard) else Lane.ANSWER
        case React():
            return Lane.HINT
        case PostApprovalCard() | PostQuestion() | UpdateApprovalCard() | UpdateQuestionCard():
            return Lane.CARD
        case SendFile() | ShowDiffs():
            return Lane.ANSWER
        case Owed(post):
            return Lane.ENDING if '"final": true' in post.payload else Lane.ANSWER
    return Lane.ANSWER
