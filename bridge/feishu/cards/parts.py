"""Which call brings a live status card from what it shows to its newest view, and under
which Feishu API that call is metered (Feishu limits each API on its own).

A whole update (`PUT /cardkit/v1/cards/:id`) redraws everything. Streaming one element's
content (`PUT …/elements/:id/content`) changes one markdown element and is another API:
when only the answer grew, it is the cheaper call and Feishu types the added text out.
Replacing one element (`PUT …/elements/:id`), patching its content (`PATCH
…/elements/:id`) and a batch of element patches (`POST …/batch_update`) are three more.
Feishu meters each API on its own (1,000 a minute), so with many cards streaming at once
a change takes whichever of them has room: the answer's growth streams if it can, else
goes whole or through the others; any other change goes whole if it can, else as a batch
of every changed element, else as its most telling changed element (the answer, else the
tools, the plan, the elapsed time), the rest following in the next refresh. A card under
load so changes every few seconds instead of queueing on one API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final

from bridge.core.effects import CardView
from bridge.core.text import format_elapsed
from bridge.feishu.budget import api_of
from bridge.feishu.cards.status import ANSWER, element_content, element_ids
from bridge.i18n import Translator

STREAM_API: Final = api_of("PUT", "/open-apis/cardkit/v1/cards/c/elements/e/content")
UPDATE_API: Final = api_of("PUT", "/open-apis/cardkit/v1/cards/c")
ELEMENT_API: Final = api_of("PUT", "/open-apis/cardkit/v1/cards/c/elements/e")
PATCH_ELEMENT_API: Final = api_of("PATCH", "/open-apis/cardkit/v1/cards/c/elements/e")
BATCH_API: Final = api_of("POST", "/open-apis/cardkit/v1/cards/c/batch_update")
# The APIs a live card's change may take, each metered on its own.
CARD_APIS: Final = (STREAM_API, UPDATE_API, ELEMENT_API, PATCH_ELEMENT_API, BATCH_API)
# Those that change elements, not the card whole (the card's shape stays).
BY_ELEMENT: Final = frozenset({STREAM_API, ELEMENT_API, PATCH_ELEMENT_API, BATCH_API})
PATCH_API: Final = api_of("PATCH", "/open-apis/im/v1/messages/m")

# A view's fields each element shows, most telling first.
_PARTS: Final = (("text", "answer"), ("tools", "tools"), ("plan", "plan"), ("elapsed", "status"))


def only_text_grew(shown: CardView, view: CardView) -> bool:
    """Nothing but the answer changed, by growing (the elapsed time as the card words it)."""
    # A continuation card shows no time; the status card shows it in whole units.
    same_time = view.page > 0 or format_elapsed(shown.elapsed) == format_elapsed(view.elapsed)
    rest_same = replace(shown, text=view.text, elapsed=view.elapsed, closed=view.closed) == view
    return same_time and rest_same and view.text != shown.text and view.text.startswith(shown.text)


def one_part(t: Translator, shown: CardView, view: CardView) -> tuple[str, str, CardView] | None:
    """The most telling element of `view` that differs from `shown`, when the card's shape
    is the same (phase, elements present, cut, ending, footer): its id, its content, and
    what the card shows once only it has changed. None when the shape changed (a whole
    update is needed) or nothing the card words has changed."""
    found = _changed_part(shown, view)
    if found is None:
        return None
    name, element = found
    after = replace(shown, **{name: getattr(view, name)}, closed=view.closed)  # (not drawn)
    return element, element_content(t, after, element), after


def all_parts(t: Translator, shown: CardView, view: CardView) -> list[tuple[str, str]] | None:
    """Every element of `view` that differs from `shown` (ids and contents), when the card's
    shape is the same; None when it is not, or nothing the card words has changed. The
    answer is told apart by its text (drawing a long answer twice, to compare, would cost
    more than the rest of the change)."""
    if _changed_part(shown, view) is None:
        return None
    changed = []
    for element in element_ids(view):
        if element == ANSWER:
            if (shown.text, shown.code) != (view.text, view.code):
                changed.append((element, element_content(t, view, element)))
            continue
        content = element_content(t, view, element)
        if element_content(t, shown, element) != content:
            changed.append((element, content))
    return changed


def _changed_part(shown: CardView, view: CardView) -> tuple[str, str] | None:
    """`one_part`'s choice, without drawing it: the view's field and its element."""
    shape = (shown.phase, shown.cut, shown.end_key, shown.end_params, shown.footer)
    if shape != (view.phase, view.cut, view.end_key, view.end_params, view.footer):
        return None
    if bool(shown.tools) != bool(view.tools) or bool(shown.plan) != bool(view.plan):
        return None
    for name, element in _PARTS:
        old, new = getattr(shown, name), getattr(view, name)
        differs = format_elapsed(old) != format_elapsed(new) if name == "elapsed" else old != new
        if differs:
            return name, element
    return None


def api_of_change(
    card_id: str | None,
    shown: CardView | None,
    view: CardView | None,
    *,
    room: Callable[[str], bool],
) -> str:
    """The API the card's next change takes; `room(api)`: that API may take a call now.
    Asked at each view the agent's stream brings, so it draws nothing."""
    if card_id is None:
        return PATCH_API  # the fallback: an interactive card patched whole
    if shown is None or view is None:
        return UPDATE_API
    # The whole update last: it is the one way to end a card (its final view, streaming
    # off), and 200 turns ending together need its minute's burst.
    if only_text_grew(shown, view):
        ways = (STREAM_API, ELEMENT_API, PATCH_ELEMENT_API, BATCH_API, UPDATE_API)
    elif _changed_part(shown, view) is not None:
        ways = (BATCH_API, STREAM_API, ELEMENT_API, PATCH_ELEMENT_API, UPDATE_API)
    else:
        return UPDATE_API
    return next((api for api in ways if room(api)), ways[0])
