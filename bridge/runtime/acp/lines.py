"""Agent stdout with a ceiling on one line.

The ACP SDK's transport reads a frame with `readuntil(b"\\n")` and, when the line is longer
than the reader's limit, keeps reading and joins the pieces: a line has no size bound at all,
so one hostile or broken agent line of a gigabyte is held in the bridge's memory. Through
`CappedLines` a line over the cap is skipped as it streams by (never held whole), counted and
logged by size only; the transport then sees the next line. One lost update is the cost; the
turn goes on, and the stall rules speak if what was lost was the end.

Every line the SDK reads passes here, so this is also where agent text is made encodable:
a line that would decode to a lone surrogate (`"\\ud800"`) is re-encoded with U+FFFD
(`bridge.utf8`), before any of it reaches the journal, a trace or a Feishu call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from bridge.utf8 import repaired_json_line

log = logging.getLogger(__name__)

# Far above a real agent's largest frame (a big diff or file read is a few MB) and far
# below what would hurt the bridge; the reader buffers at most about twice this.
MAX_LINE_BYTES: Final = 8 * 1024 * 1024


class CappedLines:
    """The two reader calls the SDK's NDJSON transport makes, over a StreamReader whose
    `limit` is the cap."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        *,
        label: str,
        on_oversize: Callable[[int], None] = lambda size: None,
    ) -> None:
        self._reader = reader
        self._label = label
        self._on_oversize = on_oversize

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        while True:
            try:
                return repaired_json_line(await self._reader.readuntil(separator))
            except asyncio.IncompleteReadError as exc:  # the last line, without its newline
                partial = repaired_json_line(exc.partial)
                raise asyncio.IncompleteReadError(partial, exc.expected) from None
            except asyncio.LimitOverrunError as exc:
                size = await self._skip_line(separator, exc.consumed)
                log.warning(
                    "%s: dropped a stdout line of %d bytes (over the cap)", self._label, size
                )
                self._on_oversize(size)

    async def readexactly(self, n: int) -> bytes:
        return await self._reader.readexactly(n)

    async def _skip_line(self, separator: bytes, consumed: int) -> int:
        """Discard up to and including the next separator; the bytes dropped."""
        skipped = 0
        while True:
            await self._reader.readexactly(consumed)
            skipped += consumed
            try:
                tail = await self._reader.readuntil(separator)
            except asyncio.LimitOverrunError as exc:
                consumed = exc.consumed
                continue
            return skipped + len(tail)
