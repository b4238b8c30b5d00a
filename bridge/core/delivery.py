"""How each effect that reaches Feishu is delivered: its terms, set by the core with the
effect, so the engine reads them and never guesses them from a text key or a payload.

- The lane of the app's call budget it takes: the ending and the answer never wait behind a
  refresh or a progress line.
- Its chat, and whether it goes inside a topic thread.
- What supersedes it. A line that only says "still working" or "your turn" (a presence
  line) is true only while its turn runs and only as the newest of its kind: a newer one of
  its turn, or the turn's end, makes it moot wherever it waits (the lane, the call budget,
  an outage, a restart). A progress line (a tool's title, the plan's step) is worth a short
  budget only as the newest: anything newer of its turn makes it moot then.
- Everything else must be delivered.
- Whether it must survive a crash: recorded as owed before it is tried, and performed again
  by the next process if Feishu never took it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum

from bridge.core.state import Outcome


class Lane(IntEnum):
    """What a call is for, most urgent first."""

    ENDING = 0  # a turn's end signal: the final answer, the ended line, the final card
    ANSWER = 1  # the agent's words, files, diffs, a command's answer
    CARD = 2  # approval and question cards, and the pause line beside them
    HINT = 3  # the ack reaction, the first hint, the status card's first post
    REFRESH = 4  # a status card's refresh, a progress line


class Line(StrEnum):
    """What a status line is for, which decides how it is delivered."""

    SYSTEM = "system"  # a command's answer, a refusal, a fault: always delivered
    RECEIVED = "received"  # the optional "received" text: early, always delivered
    HINT = "hint"  # "still working" and its kin: a presence line, in the hint lane
    PAUSE = "pause"  # "your turn" beside a card, and its reminder: a presence line
    PROGRESS = "progress"  # a tool's title, the plan's step


@dataclass(frozen=True, slots=True)
class Terms:
    lane: Lane
    chat: str
    in_thread: bool  # a reply inside its topic thread, not in the main chat
    # False: a new message in `chat`, not a reply (what answers a bot-menu click, which has
    # no message to reply to).
    reply: bool = True
    # The supersession group it belongs to (None: it must be delivered).
    group: str | None = None
    # True only while its turn runs: moot as soon as a newer one of its group is fed or the
    # group is superseded, and never delivered after a restart.
    presence: bool = False
    # Groups it makes moot while the budget is short (it is newer news of the same turn).
    news_for: tuple[str, ...] = ()
    # The end signal of its turn, which ends with this outcome (a restart that finds it owed
    # ends the turn with it when it is delivered).
    ends: Outcome | None = None
    # Recorded as owed the moment the core decides it, so a crash before Feishu takes it
    # cannot lose it: the next process performs it again (under its idempotency key).
    durable: bool = False

    @property
    def droppable(self) -> bool:
        return self.group is not None


@dataclass(frozen=True)
class Supersede:
    """What is still waiting of these groups is moot (its turn ended): dropped wherever it
    waits. Performed the moment it is fed, ahead of every queue."""

    groups: tuple[str, ...]


def presence_group(turn_id: str) -> str:
    return f"{turn_id}:presence"


def progress_group(turn_id: str) -> str:
    return f"{turn_id}:progress"


def turn_news(turn_id: str | None) -> tuple[str, ...]:
    """The groups that anything newer of the turn makes moot while the budget is short."""
    if turn_id is None:
        return ()
    return presence_group(turn_id), progress_group(turn_id)


def chat_of(conversation_key: str) -> str:
    """A topic thread's conversation key is `<chat>:<thread>`."""
    return conversation_key.split(":", 1)[0]


def where(conversation_key: str) -> tuple[str, bool]:
    """The chat a conversation's posts go to, and whether they go inside its thread."""
    return chat_of(conversation_key), ":" in conversation_key


_LINE_LANES = {
    Line.SYSTEM: Lane.ANSWER,
    Line.RECEIVED: Lane.HINT,
    Line.HINT: Lane.HINT,
    Line.PAUSE: Lane.CARD,
    Line.PROGRESS: Lane.REFRESH,
}


def line_terms(
    line: Line, conversation_key: str, turn_id: str | None, *, ends: Outcome | None
) -> Terms:
    """A status line's terms (every line is durable). `ends`: the line is its turn's end
    signal, and the turn ends with that outcome."""
    chat, in_thread = where(conversation_key)
    if ends is not None:
        news = turn_news(turn_id)
        return Terms(Lane.ENDING, chat, in_thread, news_for=news, ends=ends, durable=True)
    lane = _LINE_LANES[line]
    if turn_id is not None and line in (Line.HINT, Line.PAUSE):
        group, news = presence_group(turn_id), (progress_group(turn_id),)
        presence = True  # "still working" or "your turn": untrue once the turn has ended
        return Terms(
            lane, chat, in_thread, group=group, presence=presence, news_for=news, durable=True
        )
    if turn_id is not None and line is Line.PROGRESS:
        group, news = progress_group(turn_id), turn_news(turn_id)
        return Terms(lane, chat, in_thread, group=group, news_for=news, durable=True)
    return Terms(lane, chat, in_thread, durable=True)


def plain_terms(
    lane: Lane,
    conversation_key: str,
    turn_id: str | None = None,
    ends: Outcome | None = None,
    *,
    durable: bool = False,
) -> Terms:
    """Terms of an effect that must be delivered; the agent's words are news of their turn."""
    chat, in_thread = where(conversation_key)
    return Terms(lane, chat, in_thread, news_for=turn_news(turn_id), ends=ends, durable=durable)
