"""A long answer in lines style: each message's worth goes out as soon as the agent has
written past it, so the chat advances while a long answer streams and the end carries only
what is left, never the whole answer again (card style pages its cards: `status_card`).

A message closes only after a paragraph outside a code block (`pages.paragraph_end`), so
each one renders on its own as it would have in the whole answer. What has no such place
in a message's worth (one long code block, a table, a paragraph without end) waits for the
end, where the executor splits it with its code blocks and tables whole (feishu/text.py).
One message's worth is at most what the executor posts as one message (7,000 characters of
card Markdown, 8,000 of text), so each part is one send. After `MAX_RELEASED` parts the
rest waits for the end, where a reply is capped.
"""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.effects import RelayAgentText
from bridge.core.files import note_marked
from bridge.core.pages import paragraph_end
from bridge.core.text import NOTHING_WRITTEN

MESSAGE_CHARS = 7_000
# Bytes as `pages.weight` counts them (over-counted): inside a card's 30 KB, the tighter of
# the two forms a part may take.
MESSAGE_WEIGHT = 24_000
MAX_RELEASED = 9  # a reply is capped at 10 messages (feishu/text.py DEFAULT_MAX_PARTS)
# Held text past a message's worth is looked at again each time it grows by this much:
# the place a message may close does not move as the text grows, so looking at every
# chunk would weigh the same 7,000 characters a thousand times a turn.
STEP = 1_000


def release_filled(ctx: StepContext, added: int) -> None:
    """Post the message's worth of the held answer the agent has written past, if it may
    close after a paragraph; `added` is what the last chunk added to it."""
    turn = ctx.turn
    size = turn.text.size
    if size <= MESSAGE_CHARS or turn.released >= MAX_RELEASED:
        return
    if (
        size - added > MESSAGE_CHARS
        and (size - MESSAGE_CHARS) // STEP == (size - added - MESSAGE_CHARS) // STEP
    ):
        return
    held = str(turn.text)
    released = turn.released
    while len(held) > MESSAGE_CHARS and released < MAX_RELEASED:
        end = paragraph_end(held, MESSAGE_CHARS, MESSAGE_WEIGHT)
        if end is None:
            break
        part, held = held[:end].strip("\n").rstrip(), held[end:]
        released += 1
        note_marked(ctx, part)
        idem = ctx.post_key("reply")
        ctx.emit(RelayAgentText(part, turn.message_id, idem, turn_id=turn.turn_id))
    if released > turn.released:
        ctx.update_turn(
            text=NOTHING_WRITTEN.add(held),
            released=released,
            announced=True,
            last_posted_at=ctx.now,
        )
