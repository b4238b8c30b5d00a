"""Files back to the chat, and the agent's file changes on request.

`/send <path>` posts a file of the conversation's workspace; a file the agent's answer links
(an ACP resource link) is posted with the answer, before it. Anything that cannot go (outside
the workspace, missing, too large, refused) is told in one line. `/diff` shows the file
changes the agent's tools reported in the last round, never pushed unasked.
"""

from __future__ import annotations

import re

from bridge.core.context import StepContext
from bridge.core.effects import PostText, SendFile, ShowDiffs
from bridge.core.inputs import Command, FileSent
from bridge.core.text import Params
from bridge.runtime.events import DiffReported, FileOffered

MAX_FILES = 5  # files one answer may send; more are named, not sent
MAX_DIFFS = 20


def on_send_command(ctx: StepContext, cmd: Command) -> None:
    mid = cmd.message_id
    if not cmd.arg:
        ctx.emit(PostText("command.send_usage", {}, mid, f"{mid}:send"))
        return
    ctx.emit(SendFile(mid, cmd.arg, f"{mid}:send"))


def on_diff_command(ctx: StepContext, cmd: Command) -> None:
    mid = cmd.message_id
    if not ctx.conv.diffs:
        ctx.emit(PostText("command.diff_none", {}, mid, f"{mid}:diff"))
        return
    ctx.emit(ShowDiffs(mid, ctx.conv.diffs))


def on_file_sent(ctx: StepContext, event: FileSent) -> None:
    if event.result == "sent":
        return  # the file message is the answer
    params: Params = {"name": event.name, "limit": event.limit_mb}
    idem = f"{event.reply_to}:send:{event.name}"
    ctx.emit(PostText(f"send.{event.result}", params, event.reply_to, idem))


def note_offered(ctx: StepContext, event: FileOffered) -> None:
    if event.uri not in ctx.turn.files:
        ctx.update_turn(files=(*ctx.turn.files, event.uri))


def note_diff(ctx: StepContext, event: DiffReported) -> None:
    kept = tuple(d for d in ctx.conv.diffs if d[0] != event.path)
    ctx.update(diffs=(*kept, (event.path, event.diff))[-MAX_DIFFS:])


# A file the agent marks in its answer: a Markdown link to a file:// address.
_MARKED = re.compile(r"\]\((file://[^)\s]+)\)")


def note_marked(ctx: StepContext, text: str) -> None:
    """The files linked in a part of the answer posted before its end (they go at the end)."""
    for uri in _MARKED.findall(text):
        if uri not in ctx.turn.files:
            ctx.update_turn(files=(*ctx.turn.files, uri))


def send_offered(ctx: StepContext) -> None:
    """At a turn's end: the files its answer linked (resource links, and file:// links in
    its text), posted before the answer."""
    turn = ctx.turn
    marked = _MARKED.findall(str(turn.text))
    files = tuple(dict.fromkeys((*turn.files, *marked)))
    for number, uri in enumerate(files[:MAX_FILES]):
        ctx.emit(SendFile(turn.message_id, uri, f"{turn.turn_id}:file{number}"))
