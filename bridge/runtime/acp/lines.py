"""Agent stdout split into lines, read in bulk, with a ceiling on one line.

A streaming agent writes tens of short lines a second per turn; reading them one
`readuntil` at a time costs a coroutine resumption, a buffer search and a copy per line.
`CappedLines.batch` takes everything the pipe holds (up to `READ_BYTES`) and splits it in
one pass: the reader is resumed once per batch.

A line has no size bound on the wire, so one hostile or broken agent line of a gigabyte
would be held in the bridge's memory. A line over the cap is skipped as it streams by
(never held whole), counted and logged by size only; the next lines still come. One lost
update is the cost; the turn goes on, and the stall rules speak if what was lost was the
end.

Every line passes here, so this is also where agent text is made encodable: a line that
would decode to a lone surrogate (`"\\ud800"`) is re-encoded with U+FFFD (`bridge.utf8`),
before any of it reaches the journal, a trace or a Feishu call. The search for one runs
over a whole read at once (nearly always finding nothing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from bridge.utf8 import may_hold_surrogate, repaired_json_line

log = logging.getLogger(__name__)

# Far above a real agent's largest frame (a big diff or file read is a few MB) and far
# below what would hurt the bridge; a line being read is held up to this, no more.
MAX_LINE_BYTES: Final = 8 * 1024 * 1024
# The most taken off the pipe at once (a few thousand streaming updates).
READ_BYTES: Final = 256 * 1024


class CappedLines:
    """The lines of an agent's stdout (a StreamReader), in batches."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        *,
        label: str,
        cap: int = MAX_LINE_BYTES,
        on_oversize: Callable[[int], None] = lambda size: None,
    ) -> None:
        self._reader = reader
        self._label = label
        self._cap = cap
        self._on_oversize = on_oversize
        self._head: list[bytes] = []  # the start of a line not ended yet, in pieces
        self._head_size = 0
        self._skipping: int | None = None  # bytes of an oversize line dropped so far
        self._ended = False

    async def batch(self) -> list[bytes]:
        """The lines read since the last batch (without their newlines), at least one:
        waits for it. At the end of the stream, the last line if it had no newline, then
        `[]` for good. A read error is raised as it comes."""
        while not self._ended:
            data = await self._reader.read(READ_BYTES)
            if not data:
                self._ended = True
                return self._last()
            lines = self._split(data)
            if lines:
                return lines
        return []

    def _split(self, data: bytes) -> list[bytes]:
        if self._skipping is not None:
            end = data.find(b"\n")
            if end < 0:
                self._skipping += len(data)
                return []
            self._dropped(self._skipping + end + 1)
            self._skipping = None
            data = data[end + 1 :]
        lines = data.split(b"\n")
        tail = lines.pop()  # a line's start, or b"" when the data ends with a newline
        out: list[bytes] = []
        if lines and self._head:  # the line begun in earlier reads ends here
            pieces, size = self._take_head()
            out.extend(self._whole(size + len(lines[0]), [*pieces, lines[0]]))
            del lines[0]
        self._keep_head(tail)
        repair = may_hold_surrogate(data)  # every line left lies within this read
        for line in lines:
            if len(line) > self._cap:
                self._dropped(len(line) + 1)
            else:
                out.append(repaired_json_line(line) if repair else line)
        return out

    def _whole(self, size: int, pieces: list[bytes]) -> list[bytes]:
        """A line read in pieces, joined (and repaired), or nothing when over the cap."""
        if size > self._cap:
            self._dropped(size + 1)
            return []
        return [repaired_json_line(b"".join(pieces))]

    def _keep_head(self, tail: bytes) -> None:
        if not tail:
            return
        if self._head_size + len(tail) > self._cap:
            self._skipping = self._take_head()[1] + len(tail)
            return
        self._head.append(tail)
        self._head_size += len(tail)

    def _last(self) -> list[bytes]:
        if self._skipping is not None:
            self._dropped(self._skipping)
            self._skipping = None
            return []
        pieces, size = self._take_head()
        return self._whole(size, pieces) if pieces else []

    def _take_head(self) -> tuple[list[bytes], int]:
        """The pieces of the line begun and their size; none held after."""
        pieces, size = self._head, self._head_size
        self._head, self._head_size = [], 0
        return pieces, size

    def _dropped(self, size: int) -> None:
        log.warning("%s: dropped a stdout line of %d bytes (over the cap)", self._label, size)
        self._on_oversize(size)
