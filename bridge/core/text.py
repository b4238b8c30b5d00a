"""Texts as values: a translation key plus parameters, never a sentence.

A parameter may itself be a `Text` (an elapsed time, an activity name); the executor renders
nested texts first, in the conversation's locale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class Text:
    key: str
    params: Mapping[str, str | int | Text] = field(default_factory=dict)


Params = Mapping[str, str | int | Text]


def format_elapsed(seconds: float, prefix: str = "time", *, round_up: bool = False) -> Text:
    """A duration as the coarse unit a person says: "45秒", "2分钟", "1小时5分钟".

    Keys are `{prefix}.seconds|minutes|hours|hours_minutes`. Elapsed time floors, so a line
    never claims more time than has passed; time *left* (`round_up`) rounds up to the unit
    shown, so "14:59 left" reads 15 minutes, not 14.
    """
    total = max(0, math.ceil(seconds) if round_up else int(seconds))
    if round_up and total >= 60:
        total = math.ceil(total / 60) * 60
    if total < 60:
        return Text(f"{prefix}.seconds", {"n": total})
    if total < 3600:
        return Text(f"{prefix}.minutes", {"n": total // 60})
    hours, minutes = divmod(total // 60, 60)
    if minutes == 0:
        return Text(f"{prefix}.hours", {"n": hours})
    return Text(f"{prefix}.hours_minutes", {"h": hours, "m": minutes})


@dataclass(frozen=True)
class Written:
    """Agent text held for a turn, as an immutable chain of chunks: appending is O(1), so a
    long answer streamed in tiny chunks costs linear time, not a copy per chunk. Every
    `CHECKPOINT` chunks a link also keeps the whole text so far, so reading it (a live card
    reads it at every chunk) walks a few links, never the whole chain."""

    prev: Written | None = None
    chunk: str = ""
    size: int = 0  # characters held, this chunk included
    depth: int = 0  # links since the last checkpoint
    whole: str | None = None  # the whole text so far, on a checkpoint

    CHECKPOINT: ClassVar[int] = 64

    def add(self, chunk: str) -> Written:
        if not chunk:
            return self
        if self.depth + 1 >= self.CHECKPOINT:
            return Written(None, chunk, self.size + len(chunk), 0, str(self) + chunk)
        return Written(self, chunk, self.size + len(chunk), self.depth + 1)

    def __str__(self) -> str:
        if self.whole is not None:
            return self.whole
        parts: list[str] = []
        node: Written | None = self
        while node is not None:
            if node.whole is not None:
                parts.append(node.whole)
                break
            parts.append(node.chunk)
            node = node.prev
        return "".join(reversed(parts))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str(self) == other  # a chain compares equal to the text it holds
        if isinstance(other, Written):
            return self.size == other.size and str(self) == str(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))


NOTHING_WRITTEN = Written()
