"""The executor's part of the outbox: presence lines gone stale while Feishu was away are
dropped, posts owed before a restart are delivered, and a post given up is told.

A `正在处理` or a heartbeat is true only while it is new: after an outage the conversation's
owed posts go out in the order they were made, but a hint for a turn that has ended since,
or a heartbeat with a newer one queued behind it, is dropped rather than posted late. The
answer and the ending line are never dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial

from bridge.core.effects import PostText, RecordTerminal, RelayAgentText
from bridge.core.inputs import PostGivenUp
from bridge.engine.actor import ConversationActor, Owed, Work
from bridge.engine.answers import Answers, Mark, Owing
from bridge.engine.call_lanes import lane_of
from bridge.engine.delivery import Undeliverable
from bridge.feishu.pacer import SEND, CallBudget, paid
from bridge.ops.metrics import Metrics
from bridge.store.port import Store, Turn, TurnOutcome
from bridge.store.port_owed import OwedPost

log = logging.getLogger(__name__)

PROGRESS = "progress."  # the keys of progress lines (a tool's title, the plan's step)
ACK_WAIT = 2.0  # seconds a chat's next post waits for its ack reaction, at most

# Lines that only say "still working" or "your turn": untrue once their turn has ended.
PRESENCE_ONLY = frozenset(
    {
        "presence.running_hint",
        "presence.waiting_approval",
        "presence.waiting_reply",
        "presence.heartbeat",
        "presence.stale",
        "presence.stale_no_activity",
        "presence.stopping",
        "presence.approval_reminder",
        "presence.reply_reminder",
    }
)


def stale(actor: ConversationActor, work: PostText) -> bool:
    """A presence line whose turn has ended, or with a newer one of its turn queued."""
    if work.key not in PRESENCE_ONLY or work.turn_id is None:
        return False
    turn = actor.conv.turn
    if turn is None or turn.turn_id != work.turn_id:
        return True

    def newer(queued: Work) -> bool:
        return (
            isinstance(queued, PostText)
            and queued.key in PRESENCE_ONLY
            and queued.turn_id == work.turn_id
        )

    return actor.queued(newer)


def droppable(work: PostText) -> bool:
    """A presence or progress line: worth its place in a short budget only as the newest."""
    return work.key in PRESENCE_ONLY or work.key.startswith(PROGRESS)


def superseded(actor: ConversationActor, work: PostText) -> bool:
    """A presence or progress line still waiting for its turn in the call budget, with
    something newer of its turn queued behind it (another such line, the agent's words, the
    turn's end), or its turn over. (Wider than `stale`, which it includes.)"""
    if not droppable(work) or work.turn_id is None:
        return False
    turn = actor.conv.turn
    if turn is None or turn.turn_id != work.turn_id:
        return True

    def newer(queued: Work) -> bool:
        if isinstance(queued, PostText):
            news = droppable(queued) or queued.final
        else:
            news = isinstance(queued, RelayAgentText)
        return news and getattr(queued, "turn_id", None) == work.turn_id

    return actor.queued(newer)


def owing_of(actor: ConversationActor, work: PostText | RelayAgentText) -> Owing:
    """What to keep of a post: its turn, its text key, and for an end signal the outcome
    the turn's `RecordTerminal` (queued behind it) will write."""
    turn_id, key = work.turn_id, work.key if isinstance(work, PostText) else ""
    if not work.final or turn_id is None:
        return Owing(turn_id=turn_id, key=key)
    outcome = TurnOutcome.COMPLETED.value

    def ending(queued: Work) -> bool:
        nonlocal outcome
        if isinstance(queued, RecordTerminal) and queued.turn_id == turn_id:
            outcome = queued.outcome.value
            return True
        return False

    actor.queued(ending)
    return Owing(turn_id=turn_id, final=True, outcome=outcome, key=key)


def replay_order(
    owed: list[OwedPost], cut: list[Turn], starts: Mapping[str, float]
) -> list[OwedPost | Turn]:
    """What a restart replays, in the order it happened: a round's owed posts, then (if it
    was cut) its interruption, before anything of a later round. `starts`: when each round
    began."""

    def when(item: OwedPost | Turn) -> tuple[float, int, int]:
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
        ack_emoji: str,
        metrics: Metrics | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        self._answers = answers
        self._budget = budget
        self._store = store
        self._clock = clock
        self._ack_emoji = ack_emoji
        self._metrics = metrics
        self._acks: set[asyncio.Future[str | None]] = set()  # acks still under way

    async def ack(self, message_id: str) -> None:
        """The ack reaction: best-effort, and never what holds a chat's posts. While Feishu
        is down it goes only as the gate's probe (else it would only fail); the chat's next
        post waits for it at most `ACK_WAIT` (a hanging call goes on alone, tracked)."""
        gate = self._answers.gate
        if not gate.probe_due():
            return
        react = self._answers.feishu.add_reaction(message_id, self._ack_emoji)
        ack = asyncio.ensure_future(react)
        self._acks.add(ack)
        ack.add_done_callback(self._acks.discard)
        done, _ = await asyncio.wait({ack}, timeout=ACK_WAIT)
        if ack in done and not ack.cancelled():
            gate.heard_back(ack.result() is not None)

    async def record(
        self, actor: ConversationActor, work: PostText | RelayAgentText, text: str
    ) -> None:
        """The post is owed from now on (the work lane, as the core decides it)."""
        op = "text" if isinstance(work, PostText) else "answer"
        owing = owing_of(actor, work)
        since = await self._answers.owe(actor, work.idempotency_key, owing, op, work.reply_to, text)
        actor.owed_at[work.idempotency_key] = since

    async def post(
        self, actor: ConversationActor, work: PostText | RelayAgentText, text: str, *, fresh: bool
    ) -> Mark | None:
        """Post it (the shown lane), through an outage; its outbox mark when `hold`ing it
        for the turn's end record. A presence line gone stale meanwhile is dropped."""
        idem = work.idempotency_key
        since = actor.owed_at.pop(idem, None)  # recorded already (else the post records it)
        if isinstance(work, PostText) and stale(actor, work):
            await self._store.settle(idem)  # "still working", for a turn that is not
            return None
        budget = self._budget
        if budget is not None and isinstance(work, PostText) and droppable(work):
            # When the app's budget is short, the line waits for its turn before anything
            # else, and gives way if something newer of its turn is queued meanwhile: a
            # chat sees fewer progress lines, each the newest, and its answer never waits
            # behind one.
            moot = partial(superseded, actor, work)
            lane = lane_of(work)
            if not await budget.take_unless(lane, moot, actor.next_shown, api=SEND):
                await self._store.settle(idem)
                if self._metrics:
                    self._metrics.lines_superseded.inc()
                return None
            with paid(lane, SEND):
                return await self._post(actor, work, text, idem, fresh=fresh, since=since)
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
    ) -> Mark | None:
        hold = work.final and work.turn_id is not None
        owing = replace(owing_of(actor, work), since=since)
        send = self._answers.post_text if isinstance(work, PostText) else self._answers.post_answer
        try:
            return await send(actor, work.reply_to, text, idem, fresh=fresh, hold=hold, owing=owing)
        except Undeliverable:
            await self.given_up(actor, idem, work.reply_to)
            return None

    async def given_up(self, actor: ConversationActor, idem: str, reply_to: str) -> None:
        """Feishu never took the post within its window: drop it, count it, tell the chat."""
        log.error("a post to %s was given up after the idempotency window (%s)", actor.key, idem)
        await self._store.settle(idem)
        if self._metrics:
            self._metrics.posts_given_up.inc()
        actor.feed(PostGivenUp(reply_to, idem))

    async def deliver(self, actor: ConversationActor, work: Owed) -> None:
        """A post owed before a restart. An end signal ends its turn with it (the process
        that owed it died before it could), so the turn is not reported as cut."""
        post = work.post
        payload = json.loads(post.payload)
        if payload.get("key") in PRESENCE_ONLY:
            await self._store.settle(post.idempotency_key)  # not worth saying late
            return
        actor.in_thread = ":" in actor.key
        owing = Owing(
            turn_id=post.turn_id,
            final=bool(payload.get("final")),
            outcome=str(payload.get("outcome") or ""),
            key=str(payload.get("key") or ""),
            since=post.owed_at,
        )
        post_it = (
            self._answers.post_answer if payload["op"] == "answer" else self._answers.post_text
        )
        reply_to, idem = str(payload["reply_to"]), post.idempotency_key
        try:
            mark = await post_it(
                actor, reply_to, str(payload["text"]), idem, hold=True, owing=owing
            )
        except Undeliverable:
            await self.given_up(actor, idem, reply_to)
            return
        now = self._clock()
        if owing.final and post.turn_id is not None:
            outcome = TurnOutcome(owing.outcome or TurnOutcome.COMPLETED.value)
            await self._store.end_turn(post.turn_id, post.turn_id, outcome, now, sent=mark)
        elif mark is not None:
            await self._store.mark_sent(mark[0], mark[1], now)
        if mark is None:
            await self._store.settle(idem)  # sent before the restart after all
