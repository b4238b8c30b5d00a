"""A long answer in lines style: each message's worth goes out as soon as the agent has
written past it, so the chat advances while a long answer streams and the end carries only
what is left, never the whole answer again (card style pages its cards: `status_card`).

A message closes only after a paragraph outside a code block (`pages.paragraph_end`), so
each one renders on its own as it would have in the whole answer. What has no such place
in a message's worth (one long code block, a table, a paragraph without end) waits for the
end, where the executor splits it with its code blocks and tables whole (feishu/text.py).
One message's worth is a weight (`pages.weight`, bytes over-counted) within what the
executor posts as one message (feishu/text.py `MESSAGE_BYTES`, as Feishu counts a card's
bytes), so each part is one send. After `MAX_RELEASED` parts the rest waits for the end,
where a reply is capped.
"""

from __future__ import annotations

from bridge.core.context import StepContext
from bridge.core.effects import RelayAgentText
from bridge.core.files import note_marked
from bridge.core.pages import paragraph_end, weight
from bridge.core.text import NOTHING_WRITTEN

# Room under the executor's 28,000 bytes for what rendering adds (a link's address shown,
# a quote's fourth byte): about 22,000 characters of English prose, 8,000 of Chinese.
MESSAGE_WEIGHT = 24_000
# No character weighs more than 4: held text shorter than this has not filled a message.
_FEWEST_CHARS = MESSAGE_WEIGHT // 4
MAX_RELEASED = 9  # a reply is capped at 10 messages (feishu/text.py DEFAULT_MAX_PARTS)
# Held text that may have filled a message is weighed again each time it grows by this
# much: weighing every chunk would weigh the same 20,000 characters a thousand times a turn.
STEP = 1_000


def release_filled(ctx: StepContext, added: int) -> None:
    """Post the message's worth of the held answer the agent has written past, if it may
    close after a paragraph; `added` is what the last chunk added to it."""
    turn = ctx.turn
    size = turn.text.size
    if size <= _FEWEST_CHARS or turn.released >= MAX_RELEASED:
        return
    fewest = _FEWEST_CHARS
    if size - added > fewest and (size - fewest) // STEP == (size - added - fewest) // STEP:
        return
    held = str(turn.text)
    released = turn.released
    while released < MAX_RELEASED and weight(held) > MESSAGE_WEIGHT:
        end = paragraph_end(held, len(held), MESSAGE_WEIGHT)
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
