"""Carries out `ShowStatusCard`: posts each turn's live status card and keeps it current.

What the card shows was decided by the core; here it is drawn (`live_card`) and sent, with
three concerns the core does not see:

- Throttling. Views come as fast as the agent writes; the newest view wins, and one card is
  changed at most once per `interval` (Feishu allows 10 changes a second per card). A final
  view goes out at once, after any change in flight.
- The call with room. When only the answer grew, its element is streamed (Feishu types
  out the added text); anything else is a full update; under load a change takes whichever
  of CardKit's APIs has room (feishu/cards/parts.py). Every CardKit change of a card carries a
  strictly larger `sequence`; its floor comes from the wall clock, so a card finalized after
  a restart still goes up.
- Fallbacks, each logged and counted: CardKit refused → a patched interactive card → lines
  (`StatusCardFailed` back to the core, which posts what the card would have shown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from bridge.core.delivery import Lane
from bridge.core.effects import CardView, ShowStatusCard
from bridge.core.inputs import StatusCardFailed
from bridge.core.status_card import card_key
from bridge.engine.actor import ConversationActor, terms_of
from bridge.feishu.api import FeishuApi
from bridge.feishu.budget import CallBudget
from bridge.feishu.cards.parts import (
    BATCH_API,
    BY_ELEMENT,
    CARD_APIS,
    ELEMENT_API,
    PATCH_ELEMENT_API,
    STREAM_API,
    UPDATE_API,
    all_parts,
    api_of_change,
    one_part,
    only_text_grew,
)
from bridge.feishu.cards.status import ANSWER, answer_markdown, live_card, markdown_element
from bridge.feishu.delivery import FeishuGate
from bridge.feishu.errors import FeishuError
from bridge.feishu.requests import CallTerms, Paid
from bridge.i18n import Translator
from bridge.ops.metrics import Metrics
from bridge.store.port import Store
from bridge.store.steady import StoreRetry
from bridge.tasks import TaskTracker

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_CARDKIT = "cardkit:"  # marks the card id among the ids the store keeps for a card key
_SEQUENCE_EPOCH = 1_767_225_600  # 2026-01-01; tenths of a second since then fit an int32
# A card a predecessor process changed: its last change may have gone out unrecorded (a
# kill just after Feishu took it), its sequence a burst of calls past the floor (a card
# changes at most 10 times a second). This process starts a second's worth above the floor.
_INHERITED_ROOM = 10
# All live cards' changes together ask for at most this share of one API's budget: a card
# change takes whichever of the card APIs has room, and some of their pace goes to finals
# (whole updates), settings calls and continuation cards.
REFRESH_SHARE = 0.8 * len(CARD_APIS)
_REFUSED_KEPT = 256  # cards handed back to lines, remembered
_CALL_NAMES = {  # the metric's label of each element API's change
    STREAM_API: "stream",
    ELEMENT_API: "element",
    PATCH_ELEMENT_API: "patch_element",
    BATCH_API: "batch",
}


@dataclass
class _Card:
    key: str  # the card's key: the status card's, or a continuation's
    turn_id: str
    reply_to: str
    chat: str  # its Feishu calls are metered as this chat's
    message_id: str
    card_id: str | None  # None: a patched interactive card (the first fallback)
    sequence: int = 0
    shown: CardView | None = None
    pending: CardView | None = None
    pushed_at: float = float("-inf")  # clock time (Clock.now) of the last change
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    flusher: asyncio.Task[None] | None = None


class StatusCards:
    def __init__(
        self,
        *,
        feishu: FeishuApi,
        store: Store,
        translator: Translator,
        clock: Callable[[], float],
        tasks: TaskTracker,
        interval: float,
        gate: FeishuGate,
        retry: StoreRetry,
        metrics: Metrics | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        self._feishu = feishu
        self._budget = budget
        self._store = store
        self._retry = retry  # a card's records wait out a database restart, as a turn's do
        self._t = translator
        self._clock = clock
        self._tasks = tasks
        self._interval = interval
        self._gate = gate
        self._metrics = metrics
        self._cards: dict[str, _Card] = {}
        # Live status cards that show their page of the answer closed (`_spacing`).
        self._quiet: set[str] = set()
        # CardKit APIs that answered a change as unknown (a Feishu without them): not asked
        # again by this process, the others carry the changes.
        self._unknown: set[str] = set()
        # Cards handed back to lines: a view the core made before it heard so (still queued)
        # must not post the card after all. The last few are enough: the core sends none
        # after it heard.
        self._refused: dict[str, None] = {}

    async def show(self, actor: ConversationActor, work: ShowStatusCard) -> None:
        card = self._cards.get(work.card_key)
        if card is None:
            if work.card_key in self._refused:
                return
            card = (
                await self._find(actor, work)
                if work.existing_only
                else await self._post(actor, work)
            )
            if card is None:
                return
            self._cards[work.card_key] = card
            if card.shown == work.view and not work.final:
                return  # just posted with this very view
        if work.final:
            await self._finish(actor, card, work.view, CallTerms.of(terms_of(actor, work)))
            return
        card.pending = work.view
        wait = card.pushed_at + self._spacing(card) - self._clock()
        if wait <= 0 and not card.lock.locked():
            api = self._api_for(card)
            if self._may_now(card, api):
                await self._paid_flush(actor, card, api)
                wait = self._spacing(card)
        if card.pending is not None and (card.flusher is None or card.flusher.done()):
            name = f"status-card:{work.card_key}"
            card.flusher = self._tasks.spawn(self._flush_later(actor, card, wait), name=name)

    # -- posting ---------------------------------------------------------------------------

    async def _post(self, actor: ConversationActor, work: ShowStatusCard) -> _Card | None:
        found = await self._find(actor, work)
        if found is not None:  # posted before a restart: carry on with it
            return found
        body = live_card(self._t, work.view, streaming=not work.final)
        terms = terms_of(actor, work)
        uuid, in_thread, chat, call = (
            work.card_key,
            terms.in_thread,
            terms.chat,
            CallTerms.of(terms),
        )
        try:
            card_id = await self._through(partial(self._feishu.create_card, body, terms=call))
            message_id = await self._through(
                partial(
                    self._feishu.reply_card_entity,
                    work.reply_to,
                    card_id,
                    uuid=uuid,
                    in_thread=in_thread,
                    terms=call,
                )
            )
            self._count("create")
            card = _Card(work.card_key, work.turn_id, work.reply_to, chat, message_id, card_id)
        except FeishuError as exc:
            log.warning("status card via CardKit refused (%s); trying a patched card", exc)
            self._count("fallback_patch")
            try:
                message_id = await self._through(
                    partial(
                        self._feishu.reply_card,
                        work.reply_to,
                        body,
                        uuid=uuid,
                        in_thread=in_thread,
                        terms=call,
                    )
                )
            except FeishuError as again:
                self._give_up(actor, work.turn_id, work.reply_to, work.view, work.final, again)
                return None
            card = _Card(work.card_key, work.turn_id, work.reply_to, chat, message_id, None)
        # Its spacing runs from when Feishu took it, not from when the store did (seed 8433:
        # the database away for 15 s held the card's first change that long past its due).
        card.shown, card.pushed_at = work.view, self._clock()
        ids = [card.message_id] + ([_CARDKIT + card.card_id] if card.card_id else [])
        mark = partial(self._store.mark_sent, work.card_key, ids, card.pushed_at)
        await self._retry.call("mark_sent", mark)
        return card

    async def _find(self, actor: ConversationActor, work: ShowStatusCard) -> _Card | None:
        ids = await self._retry.call("sent", partial(self._store.sent, work.card_key))
        if not ids:
            return None
        card_id = next((i[len(_CARDKIT) :] for i in ids if i.startswith(_CARDKIT)), None)
        chat = terms_of(actor, work).chat
        sequence = self._floor() + _INHERITED_ROOM  # seed 111011
        return _Card(work.card_key, work.turn_id, work.reply_to, chat, ids[0], card_id, sequence)

    # -- changing --------------------------------------------------------------------------

    async def _flush_later(self, actor: ConversationActor, card: _Card, wait: float) -> None:
        # A view that arrives while this flush is in flight is this task's to carry too: no
        # second flusher is started meanwhile, so leaving it would strand it until the next
        # change (a heartbeat lost behind a slow call).
        due = self._clock() + wait
        while True:
            await asyncio.sleep(max(0.0, wait))
            if self._budget is not None and (wait := due - self._clock()) > 0:
                # The loop's timer fired before the clock reached `due` (uvloop counts from
                # a time cached at the start of its iteration): a token now buys no change.
                continue
            api = self._api_for(card)
            if self._budget is None:
                await self._flush(actor, card, api, CallTerms(card.chat, Lane.REFRESH))
            else:
                # The token first, then the view: however long the refresh waited for its
                # turn in the app's budget, it shows the newest view.
                await self._budget.acquire(Lane.REFRESH, card.chat, api=api)
                # A view that came meanwhile may have changed the card inline (show) while
                # this waited for its token: the spacing runs from that change (the token
                # goes back then).
                await self._paid_flush(actor, card, api)
            if card.pending is None or self._cards.get(card.key) is not card:
                return
            due = card.pushed_at + self._spacing(card)
            wait = due - self._clock()

    async def _paid_flush(self, actor: ConversationActor, card: _Card, api: str) -> None:
        """A refresh with the token of `api` taken: the token goes back to the budget when
        no call used it (a change made inline while the flusher waited for its token, the
        view already shown, the card gone), or the other cards' changes would wait for it
        past the budget's bound (seed 5277)."""
        terms = self._refresh(card, api)
        try:
            if self._clock() >= card.pushed_at + self._spacing(card):
                await self._flush(actor, card, api, terms)
        finally:
            paid = terms.paid
            unused = paid.spend() if paid is not None else None
            if unused is not None and self._budget is not None:
                self._budget.refund(unused)

    def _spacing(self, card: _Card) -> float:
        """Least seconds between two changes of `card`: the setting, or longer when so
        many cards are live that together they would ask more than REFRESH_SHARE times one
        API's steady pace (the lower of its second's and its minute's), the card APIs
        together. Each change costs about half a millisecond of CPU, and beyond that share
        more calls only queue. A status card whose page of the answer is closed (the answer
        goes on below it) changes half as often: only its status moves, and the page being
        written shows the turn alive."""
        quiet = card.key in self._quiet
        if self._budget is None:
            return self._interval * (2 if quiet else 1)
        # An API's steady pace is its minute's (Feishu meters each at 1,000 a minute too).
        scheduler = self._budget.scheduler
        pace = min(scheduler.policy.app_per_second, scheduler.minute_rate())
        asked = len(self._cards) - len(self._quiet) / 2  # changes a spacing, all cards
        return max(self._interval, asked / (pace * REFRESH_SHARE)) * (2 if quiet else 1)

    def _may_now(self, card: _Card, api: str) -> bool:
        """A refresh may go inline (its effect lane waits for it) only when the budget has
        room now; otherwise the card's flusher waits for it, and the lane moves on."""
        return self._budget is None or self._budget.try_take(Lane.REFRESH, api, card.chat)

    def _refresh(self, card: _Card, api: str) -> CallTerms:
        """A refresh's calls: the card's chat's, in the refresh lane, the first one with the
        token taken for `api` (`_may_now`, or the flusher's wait)."""
        return CallTerms(card.chat, Lane.REFRESH, paid=Paid(api) if self._budget else None)

    def _api_for(self, card: _Card) -> str:
        return api_of_change(card.card_id, card.shown, card.pending, room=self._room)

    def _room(self, api: str) -> bool:
        """Room for a refresh: a token beyond what the budget keeps for the lanes above
        (an API whose minute has only those is passed over for one with room)."""
        if api in self._unknown:
            return False
        return self._budget is None or self._budget.may_go(api, Lane.REFRESH)

    async def _flush(
        self, actor: ConversationActor, card: _Card, api: str, terms: CallTerms
    ) -> None:
        async with card.lock:
            if self._clock() < card.pushed_at + self._spacing(card):
                # A change went out while this waited for the card (the flusher passed its
                # check while an inline change was in flight): the view stays pending for
                # the flusher, at the spacing, instead of following a few ms behind.
                return
            view, card.pending = card.pending, None
            if view is None or self._cards.get(card.key) is not card:
                return
            by_element = api in BY_ELEMENT
            if card.card_id is not None and by_element and await self._part(card, view, api, terms):
                return
            if not await self._change(card, view, terms, final=False):
                self._forget(card)
                self._give_up(actor, card.turn_id, card.reply_to, view, False, None)

    async def _finish(
        self, actor: ConversationActor, card: _Card, view: CardView, terms: CallTerms
    ) -> None:
        if card.flusher is not None:
            card.flusher.cancel()
        async with card.lock:
            card.pending = None
            # A final change is a whole update with streaming off (Feishu's full update
            # replaces the card's config too): the settings call is needed only when the
            # card already showed its last view and so was not changed again.
            unchanged = card.shown == view
            api = None if unchanged else self._end_by_element(card, view)
            if api is not None:
                # Turns ending together queue on the whole update's minute: a card whose
                # last view only grew its text (a continuation page, say) ends through an
                # element API with room, and the settings call turns streaming off.
                unchanged = await self._part(card, view, api, terms) and card.shown == view
            changed = unchanged or await self._change(card, view, terms, final=True)
            if unchanged and card.card_id is not None:
                settings = {"config": {"streaming_mode": False}}
                with contextlib.suppress(FeishuError):  # the card already says it ended
                    await self._feishu.card_settings(
                        card.card_id, settings, sequence=self._next(card), terms=terms
                    )
                    self._count("settings")
        self._forget(card)
        if not changed:
            self._give_up(actor, card.turn_id, card.reply_to, view, True, None)

    def _end_by_element(self, card: _Card, view: CardView) -> str | None:
        """The element API a card's final view goes through when the whole update has no
        room for an ending and only the card's text grew; None: the whole update."""
        budget, shown = self._budget, card.shown
        if budget is None or card.card_id is None or shown is None:
            return None
        if not only_text_grew(shown, view) or budget.may_go(UPDATE_API, Lane.ENDING):
            return None
        ways = (STREAM_API, ELEMENT_API, PATCH_ELEMENT_API, BATCH_API)
        return next(
            (api for api in ways if api not in self._unknown and budget.may_go(api, Lane.ENDING)),
            None,
        )

    async def _change(self, card: _Card, view: CardView, terms: CallTerms, *, final: bool) -> bool:
        """Bring the card to `view`; False when Feishu refused every way of doing it."""
        if card.card_id is not None:
            try:
                await self._cardkit_change(card, card.card_id, view, terms, final=final)
                return self._shown(card, view)
            except FeishuError as exc:
                log.warning("status card update via CardKit refused (%s); patching", exc)
                self._count("fallback_patch")
                card.card_id = None
        try:
            body = live_card(self._t, view, streaming=False)
            patch = partial(self._feishu.update_card, card.message_id, body, terms=terms)
            await self._through(patch)
            self._count("patch")
            return self._shown(card, view)
        except FeishuError as exc:
            log.warning("status card patch refused (%s)", exc)
            return False

    async def _part(self, card: _Card, view: CardView, api: str, terms: CallTerms) -> bool:
        """Elements changed through `api` (feishu/cards/parts.py): the answer that grew, or
        else every changed element (a batch) or the most telling one, the rest of `view`
        staying pending for the next refresh. False when a whole update is needed after
        all (the card's shape changed, or Feishu refused the change)."""
        shown = card.shown
        if shown is None or card.card_id is None:
            return False
        parts: list[tuple[str, str]] | None
        if only_text_grew(shown, view):
            parts, after = [(ANSWER, answer_markdown(view.text, view.code))], view
        elif api == BATCH_API:
            parts, after = all_parts(self._t, shown, view), view
        else:
            part = one_part(self._t, shown, view)
            parts, after = (None, view) if part is None else ([part[:2]], part[2])
        if not parts or not await self._elements(card, card.card_id, api, parts, terms):
            return False
        self._shown(card, after)
        if card.pending is None and after != view:
            card.pending = view  # the rest follows in the next refresh
        return True

    async def _cardkit_change(
        self, card: _Card, card_id: str, view: CardView, terms: CallTerms, *, final: bool
    ) -> None:
        body = live_card(self._t, view, streaming=not final)
        sequence = self._next(card)
        await self._through(
            partial(self._feishu.update_card_entity, card_id, body, sequence=sequence, terms=terms)
        )
        self._count("update")

    async def _elements(
        self, card: _Card, card_id: str, api: str, parts: list[tuple[str, str]], terms: CallTerms
    ) -> bool:
        """Elements' new contents through `api`; False when Feishu refused it (streaming
        closes itself after 10 minutes, say): the caller updates the card whole. An API
        Feishu does not know (404) is not asked again by this process."""
        sequence = self._next(card)
        feishu = self._feishu
        element, content = parts[0]
        call: Callable[[], Awaitable[None]]
        if api == BATCH_API:
            actions = [
                {
                    "action": "partial_update_element",
                    "params": {"element_id": element, "partial_element": {"content": content}},
                }
                for element, content in parts
            ]
            call = partial(
                feishu.batch_update_card, card_id, actions, sequence=sequence, terms=terms
            )
        elif api == ELEMENT_API:
            new = markdown_element(element, content)
            call = partial(feishu.update_card_element, card_id, new, sequence=sequence, terms=terms)
        elif api == PATCH_ELEMENT_API:
            patch = {"content": content}
            call = partial(
                feishu.patch_card_element, card_id, element, patch, sequence=sequence, terms=terms
            )
        else:
            call = partial(
                feishu.stream_card_text, card_id, element, content, sequence=sequence, terms=terms
            )
        try:
            await self._through(call)
        except FeishuError as exc:
            if exc.http_status == 404:
                self._unknown.add(api)
            log.info("status card change through %s refused (%s); updating it whole", api, exc)
            return False
        self._count(_CALL_NAMES[api])
        return True

    async def _through(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """A card call that waits out an outage (the gate, delivery.py) rather than taking a
        passing 5xx or 429 for a refusal: the card then shows its newest view, never one per
        change it missed, and does not fall back to lines for a blip."""
        return await self._gate.attempt(call, owed_since=self._clock())

    def _shown(self, card: _Card, view: CardView) -> bool:
        card.shown = view
        card.pushed_at = self._clock()
        if view.closed:  # its page shown whole: from now on only its status moves
            self._quiet.add(card.key)
        return True

    def _next(self, card: _Card) -> int:
        card.sequence = max(card.sequence + 1, self._floor())
        return card.sequence

    def _floor(self) -> int:
        return int((self._clock() - _SEQUENCE_EPOCH) * 10)

    def _forget(self, card: _Card) -> None:
        if self._cards.get(card.key) is card:
            del self._cards[card.key]
            self._quiet.discard(card.key)

    def _give_up(
        self,
        actor: ConversationActor,
        turn_id: str,
        reply_to: str,
        view: CardView,
        final: bool,
        exc: FeishuError | None,
    ) -> None:
        log.warning("status card of turn %s not shown (%s); back to lines", turn_id, exc)
        self._count("fallback_messages")
        self._refused[card_key(turn_id, view.page)] = None
        if len(self._refused) > _REFUSED_KEPT:
            del self._refused[next(iter(self._refused))]
        actor.feed(StatusCardFailed(turn_id, reply_to, view, final))

    def _count(self, call: str) -> None:
        if self._metrics is not None:
            self._metrics.status_cards.labels(call).inc()
