"""What the scripted model does in a turn: decided by the user's last words. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LONG_LINE = "line {n:04d}: the quick brown fox jumps over the lazy dog"
_WRITE = re.compile(r"\bWRITE (\S+) (.+)", re.DOTALL)
_LONG = re.compile(r"\bLONG (\d{1,5})\b")
_DRIP = re.compile(r"\bDRIP (\d{1,5})\b")
_HANG = re.compile(r"\bHANG\b")
_ECHO = re.compile(r"\bECHO (\S+)")
HELLO = "hello from the scripted model"
DRIP_SECONDS = 0.05  # between the pieces of a DRIP answer: 600 lines take about a minute


@dataclass(frozen=True)
class Say:
    """A plain answer; `pace`: seconds between its streamed pieces."""

    text: str
    pace: float = 0.0


@dataclass(frozen=True)
class Write:
    """Call the agent's file-write tool with this path and content."""

    path: str
    content: str


@dataclass(frozen=True)
class Hang:
    """Begin an answer and never finish it (the client must cancel or die)."""

    text: str = "working on it"


Turn = Say | Write | Hang


def plan(user_text: str, *, tools: bool) -> Turn:
    """The model's turn for the user's latest words: of several commands, the last one said.
    (An agent may send two user messages as one: a round cut off before its answer, then
    the next, after a restart reloaded the first; the next one decides.) Without tools on
    offer (an agent's side request: a title, a summary) every turn is a plain answer."""
    patterns = ((_WRITE, tools), (_LONG, True), (_DRIP, True), (_HANG, True), (_ECHO, True))
    said = [m for pattern, offered in patterns if offered for m in pattern.finditer(user_text)]
    if not said:
        return Say(HELLO)
    last = max(said, key=lambda m: m.start())
    if last.re is _WRITE:
        return Write(last.group(1), last.group(2).strip().split("\n", 1)[0])
    if last.re is _LONG:
        return Say(long_text(int(last.group(1))))
    if last.re is _DRIP:
        return Say(long_text(int(last.group(1))), pace=DRIP_SECONDS)
    if last.re is _HANG:
        return Hang()
    return Say(f"echo: {last.group(1)}")


def write_tool(tools: dict[str, set[str]]) -> tuple[str, str] | None:
    """Which offered tool writes a file, and its path argument: the first whose parameters
    hold `content` and a path (Claude Code's `Write`, Qwen Code's `write_file`,
    OpenCode's `write`)."""
    for name, params in tools.items():
        if "content" in params:
            for key in ("file_path", "absolute_path", "filePath", "path"):
                if key in params:
                    return name, key
    return None


def after_tool(result: str) -> Say:
    """The answer once the tool's result is back: it says what the tool reported."""
    first = " ".join(result.split())[:160]
    return Say(f"the tool said: {first}")


def pace(turn: Turn) -> float:
    """Seconds between the streamed pieces of this turn's answer."""
    return turn.pace if isinstance(turn, Say) else 0.0


def long_text(lines: int) -> str:
    return "\n".join(LONG_LINE.format(n=n) for n in range(1, lines + 1))


def text_of(content: Any, kinds: tuple[str, ...] = ("text",)) -> str:
    """The words in a message's content: a string, or the parts of the given types."""
    if isinstance(content, str):
        return content
    return "\n".join(
        str(part.get("text", ""))
        for part in content or []
        if isinstance(part, dict) and part.get("type") in kinds
    )


def pieces(text: str, size: int = 24) -> list[str]:
    """The text as the stream's deltas (a long answer arrives in many small pieces)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
