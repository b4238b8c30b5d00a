"""Inbound pipeline: event → filters → dedup/journal → the conversation's actor.

Cross-cutting steps are a small middleware chain (each may stop the event or pass it on),
not branches in one handler. Everything here is fast and local: the ack reaction and every
other Feishu call happen in the conversation's actor, after the webhook has answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bridge.feishu.errors import FeishuError
from bridge.feishu.events import (
    AttachmentRef,
    BotIdentity,
    CardAction,
    CardActionReply,
    InboundMessage,
    MenuClick,
    MessageRecall,
    message_attachments,
    refs_for_journal,
    refs_from_journal,
)
from bridge.feishu.inbound import RetryLater
from bridge.store.port import Store

log = logging.getLogger(__name__)

# A quoted message's content, asked of Feishu inside the intake's 3-second budget.
QUOTE_LOOKUP_SECONDS = 1.0
QuotedContent = Callable[[str], Awaitable[tuple[str, str] | None]]

Next = Callable[[InboundMessage], Awaitable[None]]
Middleware = Callable[[InboundMessage, Next], Awaitable[None]]


class Tally(Protocol):
    def inc(self) -> None: ...


class Fates(Protocol):
    """Counts of what became of each inbound event, by fate (`accepted`, `duplicate`, …): the
    metrics' labelled counter."""

    def labels(self, fate: str) -> Tally: ...


class MessageSink(Protocol):
    """What the receiver hands accepted events to (the engine)."""

    def accept(self, message: InboundMessage) -> None:
        """A journaled message for its conversation's actor (returns at once)."""

    def refuse(self, message: InboundMessage) -> None:
        """Post the one polite refusal for a sender or chat outside the allow-lists."""

    async def card_action(self, action: CardAction) -> CardActionReply: ...

    def recall(self, conversation_key: str, message_id: str) -> None:
        """A journaled message was recalled (returns at once)."""

    def menu(self, click: MenuClick, chat_id: str | None, admitted: bool) -> None:
        """A bot-menu click for the clicker's private chat (`chat_id` None: never seen yet),
        from someone the allow-lists admit or not (then refused as a message would be);
        returns at once."""


@dataclass(frozen=True)
class AccessPolicy:
    """Who may reach the agent. Both lists empty admits nobody unless `allow_all` says
    everyone on purpose (BRIDGE_ALLOW_ALL): an unset list is never a silent "anyone"."""

    allowed_users: frozenset[str] = frozenset()
    allowed_chats: frozenset[str] = frozenset()
    allow_all: bool = False

    def admits(self, message: InboundMessage) -> bool:
        return self.admits_sender(message.sender_open_id, message.chat_id)

    def admits_sender(self, open_id: str, chat_id: str | None) -> bool:
        """`chat_id` None: the chat is not known (a bot-menu click before any message), so
        a chat allow-list cannot admit it."""
        if not self.allowed_users and not self.allowed_chats:
            return self.allow_all
        if self.allowed_users and open_id not in self.allowed_users:
            return False
        return not (self.allowed_chats and chat_id not in self.allowed_chats)


def chain(middlewares: Sequence[Middleware], endpoint: Next) -> Next:
    handler = endpoint
    for middleware in reversed(middlewares):
        handler = _bind(middleware, handler)
    return handler


def _bind(middleware: Middleware, nxt: Next) -> Next:
    async def run(message: InboundMessage) -> None:
        await middleware(message, nxt)

    return run


class Receiver:
    """Implements `InboundHandler` for both intake modes."""

    def __init__(
        self,
        *,
        store: Store,
        sink: MessageSink,
        policy: AccessPolicy,
        bot: BotIdentity,
        clock: Callable[[], float],
        fates: Fates | None = None,
        app_id: str | None = None,
        max_event_age: float = 0.0,
        quoted_content: QuotedContent | None = None,
        voice_kind: Callable[[], str] = lambda: "audio",
        bot_menu: bool = True,
    ) -> None:
        self._bot_menu = bot_menu
        # Users' private chats with the bot, as remembered in the store (a click names none).
        self._p2p: dict[str, str] = {}
        self._voice_kind = voice_kind
        self._quoted_content = quoted_content
        self._fates = fates
        self._app_id = app_id
        self._max_event_age = max_event_age
        self._store = store
        self._sink = sink
        self._policy = policy
        self._bot = bot
        self._clock = clock
        self._handle = chain(
            [
                self.ours_and_recent,
                self.ignore_own,
                self.remember_p2p,
                self.require_mention_in_groups,
                self.allow_lists,
                self.voice,
                self.dedup,
            ],
            self.dispatch,
        )

    def _count(self, fate: str) -> None:
        if self._fates is not None:
            self._fates.labels(fate).inc()

    async def on_message(self, message: InboundMessage) -> None:
        await self._handle(message)

    async def on_card_action(self, action: CardAction) -> CardActionReply:
        self._count("card_action")
        return await self._sink.card_action(action)

    async def on_recall(self, recall: MessageRecall) -> None:
        if not await self._store.claim_event(recall.event_id, None, self._clock()):
            log.info("duplicate recall event %s ignored", recall.event_id)
            self._count("duplicate")
            return
        journaled = await self._store.message(recall.message_id)
        if journaled is None:
            # Never taken (filtered, another app's, or already pruned): nothing to undo.
            log.info("recall of message %s, which the bridge never took", recall.message_id)
            self._count("recall_unknown")
            return
        self._count("recalled")
        self._sink.recall(journaled.conversation_key, recall.message_id)

    async def on_menu(self, click: MenuClick) -> None:
        """A bot-menu click: the same checks as a message (app, age, allow-lists, one per
        event id), for the clicker's private chat with the bot."""
        if not self._ours_and_recent(click.app_id, click.create_time_ms, f"click {click.event_id}"):
            return
        if not self._bot_menu:
            log.info("ignored bot-menu click %s: BRIDGE_BOT_MENU is off", click.event_id)
            self._count("ignored")
            return
        if not await self._store.claim_event(click.event_id, None, self._clock()):
            log.info("duplicate bot-menu click %s ignored", click.event_id)
            self._count("duplicate")
            return
        open_id = click.operator_open_id
        chat_id = self._p2p.get(open_id) or await self._store.p2p_chat(open_id)
        if chat_id is not None:
            self._p2p[open_id] = chat_id
        admitted = self._policy.admits_sender(open_id, chat_id)
        if not admitted:
            log.info("refused bot-menu click %s from outside the allow-lists", click.event_id)
        self._count("menu" if admitted else "refused")
        self._sink.menu(click, chat_id, admitted)

    def _ours_and_recent(self, app_id: str | None, create_time_ms: int, what: str) -> bool:
        # A captured event replayed after the dedup journal forgot it, or one for another app,
        # is dropped (answered 200: it would fail the same on every delivery).
        if self._app_id and app_id and app_id != self._app_id:
            log.warning("dropped %s: for another app", what)
            self._count("foreign")
            return False
        age = self._clock() - create_time_ms / 1000
        if self._max_event_age > 0 and create_time_ms > 0 and age > self._max_event_age:
            log.warning("dropped %s: %.0f s old (a replay?)", what, age)
            self._count("too_old")
            return False
        return True

    # -- middlewares -------------------------------------------------------------------------

    async def ours_and_recent(self, message: InboundMessage, nxt: Next) -> None:
        what = f"message {message.message_id}"
        if self._ours_and_recent(message.app_id, message.create_time_ms, what):
            await nxt(message)

    async def ignore_own(self, message: InboundMessage, nxt: Next) -> None:
        bot = self._bot.open_id
        if message.sender_type == "app" or (bot is not None and message.sender_open_id == bot):
            log.debug("ignored own/app message %s", message.message_id)
            self._count("ignored")
            return
        await nxt(message)

    async def remember_p2p(self, message: InboundMessage, nxt: Next) -> None:
        # Which private chat each user writes from: a bot-menu click names no chat.
        sender, chat = message.sender_open_id, message.chat_id
        if message.chat_type == "p2p" and self._p2p.get(sender) != chat:
            await self._store.remember_p2p_chat(sender, chat, self._clock())
            self._p2p[sender] = chat
        await nxt(message)

    async def require_mention_in_groups(self, message: InboundMessage, nxt: Next) -> None:
        if message.chat_type != "p2p" and message.mentions and self._bot.open_id is None:
            # Any of these mentions may be the bot; answering 200 would drop it for good.
            self._count("retry_later")
            raise RetryLater("the bot's identity is not known yet")
        if message.chat_type != "p2p" and not message.mentions_bot:
            log.debug("ignored group message %s without @bot", message.message_id)
            self._count("ignored")
            return
        await nxt(message)

    async def allow_lists(self, message: InboundMessage, nxt: Next) -> None:
        if self._policy.admits(message):
            await nxt(message)
            return
        # One refusal per message, even when Feishu redelivers it.
        if await self._store.claim_event(message.event_id, message.message_id, self._clock()):
            log.info("refused message %s from outside the allow-lists", message.message_id)
            self._count("refused")
            self._sink.refuse(message)

    async def voice(self, message: InboundMessage, nxt: Next) -> None:
        # What a voice message is, by BRIDGE_VOICE (media/voice.py), before the journal, so
        # a restart recovers it the same way: words to hear, a file, or refused.
        if message.message_type == "audio" and (kind := self._voice_kind()) != "audio":
            refs = tuple(
                r.model_copy(update={"kind": kind}) if r.kind == "audio" else r
                for r in message.attachments
            )
            message = message.model_copy(update={"attachments": refs})
        await nxt(message)

    async def dedup(self, message: InboundMessage, nxt: Next) -> None:
        # Journaling is the dedup: first-wins on the message id, and the journal is what a
        # restart recovers from, so nothing accepted can be lost between two writes.
        message = await self._with_quoted(message)
        journaled = await self._store.journal_message(
            message.conversation_key,
            message.message_id,
            message.sender_open_id,
            message.chat_id,
            message.text,
            self._clock(),
            refs_for_journal(message.attachments),
        )
        if not journaled:
            log.info("duplicate delivery of message %s ignored", message.message_id)
            self._count("duplicate")
            return
        await nxt(message)

    async def _with_quoted(self, message: InboundMessage) -> InboundMessage:
        """A quote-reply to an image or file the bridge took in this conversation carries
        that image or file too (fetched from the quoted message)."""
        if not message.parent_id or message.attachments:
            return message
        quoted = await self._store.message(message.parent_id)
        if quoted is not None and quoted.conversation_key != message.conversation_key:
            return message
        try:
            if quoted is not None:
                refs = refs_from_journal(quoted.attachments)
            else:  # not one the bridge took (a group image without @bot): ask Feishu
                refs = await self._quoted_refs(message.parent_id)
        except ValueError:
            return message
        carried = tuple(r.model_copy(update={"from_message": message.parent_id}) for r in refs)
        return message.model_copy(update={"attachments": carried}) if carried else message

    async def _quoted_refs(self, message_id: str) -> tuple[AttachmentRef, ...]:
        if self._quoted_content is None:
            return ()
        try:
            async with asyncio.timeout(QUOTE_LOOKUP_SECONDS):
                found = await self._quoted_content(message_id)
        except (TimeoutError, FeishuError) as exc:
            log.info("quoted message %s not looked up (%s)", message_id, type(exc).__name__)
            return ()
        return message_attachments(*found) if found is not None else ()

    async def dispatch(self, message: InboundMessage) -> None:
        self._count("accepted")
        self._sink.accept(message)
