"""Posting lines and the agent's answers: each once (the outbox), owed in the store before
it is tried and through an outage until Feishu takes it (`delivery.py`), mentions
neutralized, an answer with Markdown as rich cards, and a reply whose message was recalled
sent to the chat.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from bridge.core.delivery import Lane, Terms, where
from bridge.engine.actor import ConversationActor
from bridge.feishu.api import FeishuApi
from bridge.feishu.delivery import FeishuGate, Moot
from bridge.feishu.errors import MESSAGE_RECALLED, BusinessError
from bridge.feishu.text import answer_card, answer_parts, neutralize_mentions
from bridge.store.port import Store

log = logging.getLogger(__name__)
_T = TypeVar("_T")

MAX_CARDS = 10  # as many as a text reply's parts; a longer answer goes as text (and is cut)

# A post's outbox mark: its idempotency key and the Feishu message ids it produced.
Mark = tuple[str, list[str]]


@dataclass(frozen=True)
class Owing:
    """What the store keeps of a post until Feishu takes it: enough to make it again, with
    the terms the core gave it (where it goes, its lane, whether it is worth saying late)."""

    terms: Terms
    turn_id: str | None = None
    final: bool = False  # the turn's end signal
    outcome: str = ""  # the turn's outcome, when final (a restart ends the turn with it)
    since: float | None = None  # first owed at, when recorded already (work lane, or restart)

    def payload(self, op: str, reply_to: str, text: str) -> str:
        terms = self.terms
        return json.dumps(
            {
                "op": op,
                "reply_to": reply_to,
                "text": text,
                "final": self.final,
                "outcome": self.outcome,
                "lane": int(terms.lane),
                "chat": terms.chat,
                "in_thread": terms.in_thread,
                "presence": terms.presence,
            },
            ensure_ascii=False,
        )

    @classmethod
    def of_payload(
        cls, payload: dict[str, Any], turn_id: str | None, since: float, key: str
    ) -> Owing:
        """A post owed before a restart. A record written before the terms were kept with
        it goes where its conversation's posts go, and must be delivered."""
        chat, in_thread = where(key)
        terms = Terms(
            Lane(int(payload.get("lane", Lane.ANSWER))),
            str(payload.get("chat", chat)),
            bool(payload.get("in_thread", in_thread)),
            presence=bool(payload.get("presence", False)),
        )
        final = bool(payload.get("final"))
        outcome = str(payload.get("outcome") or "")
        return cls(terms, turn_id, final, outcome, since)


class Answers:
    def __init__(
        self, *, feishu: FeishuApi, store: Store, clock: Callable[[], float], gate: FeishuGate
    ) -> None:
        self.feishu = feishu
        self._store = store
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
    ) -> Mark | None:
        """A line (or a plain answer) as text messages. `fresh`: its turn began in this
        process, so nothing of it went out before a restart and the outbox need not be read
        (each post of a turn has its own key). `hold`: the outbox mark is returned, not
        written; the caller writes it (with the turn's end, in one transaction). `moot`:
        asked before each try; a post it finds moot raises `Superseded`."""
        if fresh or not await self._already_sent(idem):
            since = await self.owe(actor, idem, owing, "text", reply_to, text)
            terms = owing.terms

            def send() -> Awaitable[list[str]]:
                return self._send_text(terms, reply_to, text, idem)

            ids = await self.gate.attempt(send, owed_since=since, moot=moot)
            return await self._marked(idem, ids, hold)
        return None

    async def owe(
        self,
        actor: ConversationActor,
        idem: str,
        owing: Owing,
        op: str,
        reply_to: str,
        text: str,
    ) -> float:
        """Record the post before its first try; when it was first owed."""
        if owing.since is not None:
            return owing.since  # owed before a restart: the record is there
        now = self._clock()
        payload = owing.payload(op, reply_to, text)
        await self._store.owe(idem, actor.key, owing.turn_id, payload, now)
        return now

    async def _delivered(self, send: Callable[[], Awaitable[_T]], since: float) -> _T:
        return await self.gate.attempt(send, owed_since=since)

    async def _marked(self, idem: str, ids: list[str], hold: bool) -> Mark | None:
        if hold:
            return idem, ids
        await self._store.mark_sent(idem, ids, self._clock())
        return None

    async def _send_text(self, terms: Terms, reply_to: str, text: str, idem: str) -> list[str]:
        # Agent words and tool titles are data: they never mention anyone.
        safe = neutralize_mentions(text)
        try:
            ids = await self.feishu.reply_text(reply_to, safe, uuid=idem, in_thread=terms.in_thread)
        except BusinessError as exc:
            if exc.code != MESSAGE_RECALLED:
                raise
            # The user took that message back: the line goes to the chat itself instead.
            ids = await self.feishu.send_text(terms.chat, safe, uuid=f"{idem}:chat")
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
        since = await self.owe(actor, idem, owing, "answer", reply_to, text)
        terms = owing.terms

        def as_text() -> Awaitable[list[str]]:
            return self._delivered(lambda: self._send_text(terms, reply_to, text, idem), since)

        parts = answer_parts(text)
        if parts is None or len(parts) > MAX_CARDS:
            return await self._marked(idem, await as_text(), hold)
        ids: list[str] = []
        try:
            for number, part in enumerate(parts):
                # Each part its own idempotency key: a retry after a crash sends only the rest.
                send = partial(self._card, terms, reply_to, answer_card(part), f"{idem}:md{number}")
                ids.append(await self._delivered(send, since))
        except BusinessError as exc:
            if ids:
                raise  # some parts are out: a text copy would say them twice
            log.warning("Feishu refused the answer as a card (%s); sending it as text", exc.code)
            return await self._marked(idem, await as_text(), hold)
        return await self._marked(idem, ids, hold)

    async def _card(self, terms: Terms, reply_to: str, card: dict[str, object], uuid: str) -> str:
        try:
            return await self.feishu.reply_card(
                reply_to, card, uuid=uuid, in_thread=terms.in_thread
            )
        except BusinessError as exc:
            if exc.code != MESSAGE_RECALLED:
                raise
            return await self.feishu.send_card(terms.chat, card, uuid=f"{uuid}:chat")

    async def _already_sent(self, idem: str) -> bool:
        if await self._store.sent(idem) is not None:
            log.info("skipped a post already sent before a restart (%s)", idem)
            return True
        return False
