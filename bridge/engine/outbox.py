"""The outbox: every line and answer of the agent's posted once. An effect whose terms say
durable is owed in the store under its idempotency key from the moment the core decides it
until Feishu takes it, through an outage (`feishu/delivery.py`) or a restart: the record
holds the effect itself (its type and fields, terms included), and the next process
performs it again through its own handler.

`Answers` posts: mentions neutralized, an answer with Markdown as rich cards, and a reply
whose message was recalled sent to the chat (as is what answers a bot-menu click, which has
no message: its terms say `reply=False`). `Outbox` is the executor's part: lines their
terms let go are dropped once something newer made them moot, and a post given up is told.

A `正在处理` or a heartbeat is true only while it is new: after an outage the conversation's
owed posts go out in the order they were made, but a presence line whose turn has ended
since, or with a newer one fed behind it, is dropped wherever it waited (the lane, the call
budget, the outage, a restart). What must be delivered (the core's terms say which) never is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, TypeVar, get_args

from pydantic import TypeAdapter

from bridge.core.delivery import Lane, Terms, where
from bridge.core.effects import Effect, PostText, RelayAgentText
from bridge.core.inputs import PostGivenUp
from bridge.core.state import Outcome
from bridge.engine.actor import ConversationActor, Owed, terms_of
from bridge.feishu.api import FeishuApi
from bridge.feishu.budget import SEND, CallBudget
from bridge.feishu.delivery import FeishuGate, Moot, Superseded, Undeliverable
from bridge.feishu.errors import MESSAGE_RECALLED, BusinessError
from bridge.feishu.json_codec import dumps
from bridge.feishu.requests import CallTerms, Paid
from bridge.feishu.text import answer_card, answer_parts, mention_tags, neutralize_mentions
from bridge.ops.metrics import Metrics
from bridge.store.port import Store, TurnRecord
from bridge.store.port_owed import OwedPost
from bridge.store.steady import StoreRetry

log = logging.getLogger(__name__)
_T = TypeVar("_T")

MAX_CARDS = 10  # as many as a text reply's parts; a longer answer goes as text (and is cut)

# A post's outbox mark: its idempotency key and the Feishu message ids it produced.
Mark = tuple[str, list[str]]


@dataclass(frozen=True)
class Owing:
    """A post and what the store keeps of it until Feishu takes it: the effect that makes it
    (with the terms the core gave it), and when it was first owed if it is recorded already
    (by the work lane, or before a restart)."""

    terms: Terms
    effect: Effect
    since: float | None = None
    paid: Paid | None = None  # the send's token, taken ahead (`Outbox.post`)


# Each process's own: a replay comes from another process, so it is never fresh.
_NOT_KEPT = {"fresh"}


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(kind: type) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    return adapter


@cache
def _effect_types() -> dict[str, type]:
    return {kind.__name__: kind for kind in get_args(Effect)}


def idempotency_key(effect: Effect) -> str:
    """A durable effect's key: its outbox record's, and Feishu's for each of its tries."""
    key = getattr(effect, "idempotency_key", None)
    if not isinstance(key, str):
        raise TypeError(f"{type(effect).__name__} has no idempotency key to be owed under")
    return key


def owed_payload(effect: Effect) -> str:
    """The outbox record of an effect: its type and its fields, terms included."""
    fields = _adapter(type(effect)).dump_python(effect, mode="json", exclude=_NOT_KEPT)
    return dumps({"effect": type(effect).__name__, "fields": fields})  # compact, UTF-8


def owed_of(post: OwedPost) -> Owed:
    """The effect an outbox record holds, to be performed again."""
    payload = json.loads(post.payload)
    if "op" in payload:
        return Owed(_legacy(payload, post), post.owed_at)
    kind = _effect_types()[payload["effect"]]
    return Owed(_adapter(kind).validate_python(payload["fields"]), post.owed_at)


def _legacy(payload: dict[str, Any], post: OwedPost) -> RelayAgentText:
    """A record of the text-only outbox: the post as rendered then, with its terms (or,
    older still, none: it goes where its conversation's posts go, and must be delivered).
    It is said as it was written; an "answer" and a line alike go as the agent's words."""
    chat, in_thread = where(post.conversation_key)
    final = bool(payload.get("final")) and post.turn_id is not None
    ends = Outcome(payload.get("outcome") or Outcome.COMPLETED.value) if final else None
    # Without a lane of its own, an end signal is still the turn's ending.
    default_lane = Lane.ENDING if payload.get("final") else Lane.ANSWER
    terms = Terms(
        Lane(int(payload.get("lane", default_lane))),
        str(payload.get("chat", chat)),
        bool(payload.get("in_thread", in_thread)),
        presence=bool(payload.get("presence", False)),
        ends=ends,
        durable=True,
    )
    reply_to, text = str(payload["reply_to"]), str(payload["text"])
    return RelayAgentText(text, reply_to, post.idempotency_key, final, post.turn_id, terms=terms)


def ends_its_turn(owed: Owed) -> bool:
    """Whether the owed effect is its turn's end signal."""
    terms: Terms | None = getattr(owed.effect, "terms", None)
    return terms is not None and terms.ends is not None and turn_of(owed.effect) is not None


def turn_of(effect: Effect) -> str | None:
    turn_id = getattr(effect, "turn_id", None)
    return turn_id if isinstance(turn_id, str) else None


class Answers:
    def __init__(
        self,
        *,
        feishu: FeishuApi,
        store: Store,
        clock: Callable[[], float],
        gate: FeishuGate,
        retry: StoreRetry,
    ) -> None:
        self.feishu = feishu
        self._store = store
        # A post's records wait out a database restart, as a turn's do: a post skipped for
        # its record would be an answer lost (every call here is safe to make twice).
        self._retry = retry
        self._clock = clock
        self.gate = gate

    async def post_text(
        self,
        actor: ConversationActor,
        reply_to: str,
        text: str,
        idem: str,
        *,
        owing: Owing,
        fresh: bool = False,
        hold: bool = False,
        moot: Moot | None = None,
        mentions: tuple[str, ...] = (),
    ) -> Mark | None:
        """A line (or a plain answer) as text messages. `fresh`: its turn began in this
        process, so nothing of it went out before a restart and the outbox need not be read
        (each post of a turn has its own key). `hold`: the outbox mark is returned, not
        written; the caller writes it (with the turn's end, in one transaction). `moot`:
        asked before each try; a post it finds moot raises `Superseded`. `mentions`: open
        ids the core chose to @-mention ahead of the text."""
        if fresh or not await self._already_sent(idem):
            since = await self.owe(actor, idem, owing)
            terms = CallTerms.of(owing.terms, paid=owing.paid, moot=moot)

            def send() -> Awaitable[list[str]]:
                return self._send_text(owing.terms, terms, reply_to, text, idem, mentions)

            return await self._marked(idem, await self._delivered(send, since, moot), hold)
        return None

    async def owe(self, actor: ConversationActor, idem: str, owing: Owing) -> float:
        """Record the post before its first try, unless it is recorded already; when it was
        first owed."""
        since = owing.since if owing.since is not None else actor.owed_at.pop(idem, None)
        if since is not None:
            return since
        now = self._clock()
        effect = owing.effect
        owe = partial(self._store.owe, idem, actor.key, turn_of(effect), owed_payload(effect), now)
        await self._retry.call("owe", owe)
        return now

    async def _delivered(
        self, send: Callable[[], Awaitable[_T]], since: float, moot: Moot | None
    ) -> _T:
        return await self.gate.attempt(send, owed_since=since, moot=moot)

    async def _marked(self, idem: str, ids: list[str], hold: bool) -> Mark | None:
        if hold:
            return idem, ids
        await self._retry.call(
            "mark_sent", partial(self._store.mark_sent, idem, ids, self._clock())
        )
        return None

    async def _send_text(
        self,
        terms: Terms,
        call: CallTerms,
        reply_to: str,
        text: str,
        idem: str,
        mentions: tuple[str, ...] = (),
    ) -> list[str]:
        # Agent words and tool titles are data: they never mention anyone. Only the bridge's
        # own mentions, made here from open ids, go ahead of them.
        safe = mention_tags(mentions) + neutralize_mentions(text)
        feishu = self.feishu
        if not terms.reply:  # answers a bot-menu click: no message to reply to
            return await feishu.send_text(terms.chat, safe, uuid=idem, terms=call)
        try:
            in_thread = terms.in_thread
            ids = await feishu.reply_text(
                reply_to, safe, uuid=idem, in_thread=in_thread, terms=call
            )
        except BusinessError as exc:
            if exc.code != MESSAGE_RECALLED:
                raise
            # The user took that message back: the line goes to the chat itself instead.
            ids = await feishu.send_text(terms.chat, safe, uuid=f"{idem}:chat", terms=call)
        return ids

    async def post_answer(
        self,
        actor: ConversationActor,
        reply_to: str,
        text: str,
        idem: str,
        *,
        owing: Owing,
        fresh: bool = False,
        hold: bool = False,
        moot: Moot | None = None,
    ) -> Mark | None:
        """The agent's answer: rich cards when it has Markdown, else text (`fresh`, `hold`,
        `owing`, `moot`: as in `post_text`)."""
        if not fresh and await self._already_sent(idem):
            return None
        since = await self.owe(actor, idem, owing)
        terms, call = owing.terms, CallTerms.of(owing.terms, paid=owing.paid, moot=moot)

        def as_text() -> Awaitable[list[str]]:
            send = partial(self._send_text, terms, call, reply_to, text, idem)
            return self._delivered(send, since, moot)

        parts = answer_parts(text)
        if parts is None or len(parts) > MAX_CARDS:
            return await self._marked(idem, await as_text(), hold)
        ids: list[str] = []
        try:
            for number, part in enumerate(parts):
                # Each part its own idempotency key: a retry after a crash sends only the rest.
                card, uuid = answer_card(part), f"{idem}:md{number}"
                send = partial(self._card, terms, call, reply_to, card, uuid)
                ids.append(await self._delivered(send, since, moot))
        except BusinessError as exc:
            if ids:
                raise  # some parts are out: a text copy would say them twice
            log.warning("Feishu refused the answer as a card (%s); sending it as text", exc.code)
            return await self._marked(idem, await as_text(), hold)
        return await self._marked(idem, ids, hold)

    async def _card(
        self, terms: Terms, call: CallTerms, reply_to: str, card: dict[str, object], uuid: str
    ) -> str:
        if not terms.reply:
            return await self.feishu.send_card(terms.chat, card, uuid=uuid, terms=call)
        try:
            return await self.feishu.reply_card(
                reply_to, card, uuid=uuid, in_thread=terms.in_thread, terms=call
            )
        except BusinessError as exc:
            if exc.code != MESSAGE_RECALLED:
                raise
            return await self.feishu.send_card(terms.chat, card, uuid=f"{uuid}:chat", terms=call)

    async def _already_sent(self, idem: str) -> bool:
        if await self._retry.call("sent", partial(self._store.sent, idem)) is not None:
            log.info("skipped a post already sent before a restart (%s)", idem)
            return True
        return False


def replay_order(
    owed: list[OwedPost], cut: list[TurnRecord], starts: Mapping[str, float]
) -> list[OwedPost | TurnRecord]:
    """What a restart replays, in the order it happened: a round's owed posts, then (if it
    was cut) its interruption, before anything of a later round. `starts`: when each round
    began."""

    def when(item: OwedPost | TurnRecord) -> tuple[float, int, int]:
        if isinstance(item, OwedPost):
            anchor = starts.get(item.turn_id, item.owed_at) if item.turn_id else item.owed_at
            return anchor, 0, item.seq
        return item.started_at, 1, 0

    return sorted([*owed, *cut], key=when)


class Outbox:
    def __init__(
        self,
        *,
        answers: Answers,
        store: Store,
        clock: Callable[[], float],
        retry: StoreRetry,
        metrics: Metrics | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        self._retry = retry
        self._answers = answers
        self._budget = budget
        self._store = store
        self._clock = clock
        self._metrics = metrics

    async def record(self, actor: ConversationActor, effect: Effect) -> None:
        """The effect is owed from now on (the work lane, as the core decides it)."""
        idem, now = idempotency_key(effect), self._clock()
        await self._store.owe(idem, actor.key, turn_of(effect), owed_payload(effect), now)
        actor.recorded(idem, now)

    async def post(
        self, actor: ConversationActor, work: PostText | RelayAgentText, text: str, *, fresh: bool
    ) -> Mark | None:
        """Post it (the shown lane), through an outage; its outbox mark when `hold`ing it
        for the turn's end record. A presence line gone stale meanwhile is dropped."""
        idem = work.idempotency_key
        since = actor.owed_at.pop(idem, None)  # recorded already (else the post records it)
        if actor.superseded(work, short=False):
            await self._settle(idem)  # "still working", for a turn that is not
            return None
        budget, terms = self._budget, work.terms
        if budget is not None and terms is not None and terms.droppable:
            # When the app's budget is short, the line waits for its turn before anything
            # else, and gives way if something newer of its turn is fed meanwhile: a chat
            # sees fewer progress lines, each the newest, and its answer never waits
            # behind one.
            moot = partial(actor.superseded, work, short=True)
            lane = terms.lane
            taken = await budget.take_unless(
                lane, moot, actor.next_shown, api=SEND, chat=terms.chat
            )
            if not taken:
                await self._settle(idem)
                if self._metrics:
                    self._metrics.lines_superseded.inc()
                return None
            return await self._post(actor, work, text, idem, fresh=fresh, since=since, paid=True)
        return await self._post(actor, work, text, idem, fresh=fresh, since=since)

    async def _post(
        self,
        actor: ConversationActor,
        work: PostText | RelayAgentText,
        text: str,
        idem: str,
        *,
        fresh: bool,
        since: float | None,
        paid: bool = False,
    ) -> Mark | None:
        hold = work.final and work.turn_id is not None
        owing = Owing(terms_of(actor, work), work, since, Paid(SEND) if paid else None)
        moot = partial(actor.superseded, work, short=False)
        if isinstance(work, PostText):  # a line may @-mention whom the core chose
            send = partial(self._answers.post_text, mentions=work.mentions)
        else:
            send = partial(self._answers.post_answer)
        try:
            return await send(
                actor, work.reply_to, text, idem, fresh=fresh, hold=hold, owing=owing, moot=moot
            )
        except Superseded:
            await self._settle(idem)  # its turn ended while Feishu was away
            return None
        except Undeliverable:
            await self.given_up(actor, idem, work.reply_to)
            return None

    async def _settle(self, idem: str) -> None:
        await self._retry.call("settle", partial(self._store.settle, idem))

    async def given_up(self, actor: ConversationActor, idem: str, reply_to: str) -> None:
        """Feishu never took the post within its window: drop it, count it, tell the chat."""
        log.error("a post to %s was given up after the idempotency window (%s)", actor.key, idem)
        await self._settle(idem)
        if self._metrics:
            self._metrics.posts_given_up.inc()
        actor.feed(PostGivenUp(reply_to, idem))
