"""Where inputs from Feishu enter the engine: accepted messages, refusals, card clicks,
bot-menu clicks, and the messages a restart finds unfinished. Each becomes one core input for
its conversation (a text that starts with `/` a command, a menu click a command too).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import replace

from bridge.cluster.forward import PeersUnreachable
from bridge.core.clicks import Unheard, unheard_click
from bridge.core.effects import AnswerCallback
from bridge.core.inputs import (
    AccessRefused,
    ApprovalClicked,
    Command,
    CommandName,
    MessageRecalled,
    MessageRecovered,
    QuestionAnswered,
    TurnInterruptedByRestart,
    UnsupportedMessage,
    UserMessage,
)
from bridge.core.menu import first_contact_key, menu_command
from bridge.core.state import Attachment
from bridge.engine.actor import Conversations, Owed
from bridge.engine.card_views import CardViews
from bridge.engine.outbox import ends_its_turn, owed_of, replay_order
from bridge.feishu.api import FeishuApi
from bridge.feishu.cards.requests import APPROVAL, decode_action
from bridge.feishu.errors import FeishuError
from bridge.feishu.events import (
    AttachmentRef,
    CardAction,
    CardActionReply,
    InboundMessage,
    MenuClick,
    refs_from_journal,
)
from bridge.i18n import Translator, render
from bridge.store.port import (
    Approval,
    ApprovalStatus,
    JournaledMessage,
    MessageState,
    Store,
    TurnRecord,
)
from bridge.store.port_owed import OwedPost
from bridge.tasks import TaskTracker

log = logging.getLogger(__name__)

TEXT_TYPES = frozenset({"text", "post"})
_COMMANDS = {name.value: name for name in CommandName if name is not CommandName.UNKNOWN}


def classify(
    message_id: str,
    sender: str,
    text: str,
    attachments: tuple[Attachment, ...] = (),
    *,
    in_group: bool = False,
) -> UserMessage | Command | UnsupportedMessage:
    """What a message is to the core: a text for the agent (with any images and files it
    carries), a command, or neither. `in_group`: it came from a group chat."""
    if attachments and not text.strip().startswith("/"):
        return UserMessage(message_id, sender, text, attachments, in_group=in_group)
    if not text.strip():  # sticker, card… (or a text that was only an @-mention)
        return UnsupportedMessage(message_id, sender, in_group=in_group)
    command = parse_command(text, message_id=message_id, sender=sender)
    if command is not None:
        return replace(command, in_group=in_group) if in_group else command
    return UserMessage(message_id=message_id, sender=sender, text=text, in_group=in_group)


def parse_command(text: str, *, message_id: str, sender: str) -> Command | None:
    """A Command when the text starts with `/`, else None. `/x` unknown → UNKNOWN (help)."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    word, _, arg = stripped.partition(" ")
    name = _COMMANDS.get(word[1:].lower(), CommandName.UNKNOWN)
    return Command(name=name, message_id=message_id, sender=sender, raw=word, arg=arg.strip())


def menu_input(click: MenuClick) -> Command:
    """What a bot-menu click is to the core: the command its event_key names (UNKNOWN: none),
    marked as a click (no message to react to or reply to)."""
    found = menu_command(click.event_key)
    name, arg = found if found is not None else (CommandName.UNKNOWN, "")
    sender, raw = click.operator_open_id, click.event_key
    return Command(name, click.event_id, sender, raw=raw, arg=arg, menu=True)


def attachments_of(message_id: str, refs: tuple[AttachmentRef, ...]) -> tuple[Attachment, ...]:
    return tuple(
        Attachment(r.from_message or message_id, r.kind, r.key, r.resource_type, r.name)
        for r in refs
    )


def journaled_attachments(message_id: str, raw: str) -> tuple[Attachment, ...]:
    try:
        refs = refs_from_journal(raw)
    except ValueError:
        log.warning("message %s: unreadable attachments in the journal", message_id)
        return ()
    return attachments_of(message_id, refs)


def journaled_input(message: JournaledMessage) -> UserMessage | Command | UnsupportedMessage:
    """What a message read back from the journal is to the core (as `classify`)."""
    attachments = journaled_attachments(message.message_id, message.attachments)
    return classify(message.message_id, message.sender_open_id, message.text, attachments)


class Intake:
    """Implements the receiver's `MessageSink`."""

    def __init__(
        self,
        *,
        conversations: Conversations,
        store: Store,
        feishu: FeishuApi,
        translator: Translator,
        cards: CardViews,
        clock: Callable[[], float],
        tasks: TaskTracker | None = None,
    ) -> None:
        self._tasks = tasks if tasks is not None else TaskTracker("intake")
        self._conversations = conversations
        self._store = store
        self._feishu = feishu
        self._t = translator
        self._cards = cards
        self._clock = clock
        # Several instances: asks the others for a click on a card none of ours carries.
        self.forward: Callable[[CardAction], Awaitable[CardActionReply | None]] | None = None
        # While a restart's recovery feeds what came before, newer messages wait here.
        self._held: list[InboundMessage] | None = None

    def accept(self, message: InboundMessage) -> None:
        if self._held is not None:
            self._held.append(message)
            return
        actor = self._conversations.get(message.conversation_key)
        text = message.text if message.message_type in TEXT_TYPES else ""
        attachments = attachments_of(message.message_id, message.attachments)
        group = message.chat_type != "p2p"
        mid, sender = message.message_id, message.sender_open_id
        actor.feed(classify(mid, sender, text, attachments, in_group=group))

    def recall(self, conversation_key: str, message_id: str) -> None:
        self._conversations.get(conversation_key).feed(MessageRecalled(message_id))

    def refuse(self, message: InboundMessage) -> None:
        self._conversations.get(message.conversation_key).feed(AccessRefused(message.message_id))

    def menu(self, click: MenuClick, chat_id: str | None, admitted: bool) -> None:
        """A bot-menu click, for the clicker's private chat: the command, or the refusal. A
        chat never seen is found first, by posting its opening line to the user."""
        if chat_id is None:
            opening = self._first_contact(click, admitted)
            self._tasks.spawn(opening, name=f"menu:{click.event_id}")
            return
        self._feed_click(click, chat_id, admitted)

    def _feed_click(self, click: MenuClick, chat_id: str, admitted: bool) -> None:
        actor = self._conversations.get(chat_id)  # a private chat is one conversation
        if not admitted:
            actor.feed(AccessRefused(click.event_id, menu=True))
            return
        command = menu_input(click)
        if command.name is CommandName.UNKNOWN:
            log.info("bot-menu click %s: its event_key names no command", click.event_id)
        actor.feed(command)

    async def _first_contact(self, click: MenuClick, admitted: bool) -> None:
        open_id = click.operator_open_id
        text = self._t(first_contact_key(admitted))
        try:
            _, chat_id = await self._feishu.send_text_to_user(
                open_id, text, uuid=f"{click.event_id}:opening"
            )
        except FeishuError as exc:
            # The click is lost (Feishu is away); the user clicks again or writes.
            log.warning(
                "bot-menu click %s: chat not opened (%s)", click.event_id, type(exc).__name__
            )
            return
        await self._store.remember_p2p_chat(open_id, chat_id, self._clock())
        if admitted:
            self._feed_click(click, chat_id, admitted)

    async def card_action(self, action: CardAction) -> CardActionReply:
        reply = await self.local_card_action(action)
        if reply is None and self.forward is not None:
            # Several instances: the card may be another instance's (it asks them).
            try:
                reply = await self.forward(action)
            except PeersUnreachable:
                return self._unheard(Unheard.UNREACHABLE)
        return reply if reply is not None else self._unheard(Unheard.GONE)

    def _unheard(self, why: Unheard) -> CardActionReply:
        toast, key = unheard_click(why)
        return CardActionReply(toast_type=toast.value, toast_text=self._t(key))

    async def local_card_action(self, action: CardAction) -> CardActionReply | None:
        """The click's answer when the card is one of this instance's live requests, else
        None."""
        decoded = decode_action(action.value)
        if decoded is None:
            return self._unheard(Unheard.NOT_OURS)
        kind, request_id, choice = decoded
        actor = self._conversations.asking(request_id)
        if actor is None:
            return None
        operator = action.operator_open_id
        event: ApprovalClicked | QuestionAnswered
        if kind == APPROVAL:
            event = ApprovalClicked(request_id, choice, operator)
        else:
            event = QuestionAnswered(request_id, choice, operator)
        answer = next((e for e in actor.feed(event) if isinstance(e, AnswerCallback)), None)
        if answer is None:
            return self._unheard(Unheard.GONE)
        card = self._cards.closed_card(answer.card) if answer.card is not None else None
        return CardActionReply(
            toast_type=answer.toast.value,
            toast_text=render(self._t, answer.key, answer.params),
            card=card,
        )

    async def recover(self, before: float) -> None:
        """After a restart: expire open approval cards, tell interrupted turns' users, and run
        what was queued behind them. Only what predates `before` (this process's start): a
        message the new process already took is not recovered twice."""
        now = self._clock()
        self._held = []  # until what came before them is fed (a later answer never first)
        try:
            approvals = [a for a in await self._store.open_approvals() if a.created_at < before]
            done = await self._replay(before, now)
            messages = await self._store.unfinished_messages()
            await self._requeue([m for m in messages if m.received_at < before], done, now)
        finally:
            held, self._held = self._held, None
            for message in held:
                self.accept(message)
        await self._expire(approvals, now)

    async def _replay(self, before: float, now: float, key: str | None = None) -> set[str]:
        """What the process before left: its owed posts go out and its cut turns' users are
        told, in the order it happened. `key`: one conversation's only (a takeover). Returns
        what needs no requeue: the cut turns' messages and the turns whose end was owed."""
        # Posts owed when the last process stopped go out; a turn whose end signal is among
        # them ended (its answer is on its way), it was not cut.
        all_owed = [p for p in await self._store.owed() if key in (None, p.conversation_key)]
        effects = _decoded(all_owed)
        owed = [p for p in all_owed if p.idempotency_key in effects]
        ended = {
            p.turn_id
            for p in owed
            if p.turn_id is not None and ends_its_turn(effects[p.idempotency_key])
        }
        running = [
            t
            for t in await self._store.running_turns()
            if t.started_at < before and key in (None, t.conversation_key)
        ]
        # Cut: prompted, and its end signal not owed (an unprompted turn's message runs again).
        cut = [t for t in running if t.turn_id not in ended and t.prompted_at is not None]
        if key is None:
            await self._store.interrupt_running_messages(now)
        else:
            await self._store.interrupt_running_of(key, now)
        starts = {t.turn_id: t.started_at for t in running}
        for turn_id in sorted({p.turn_id for p in owed if p.turn_id} - starts.keys()):
            turn = await self._store.turn(turn_id)
            if turn is not None:
                starts[turn_id] = turn.started_at
        # In the order it happened, per chat: a later round's answer never comes before an
        # earlier round's "cannot recover".
        for item in replay_order(owed, cut, starts):
            if isinstance(item, OwedPost):
                actor = self._conversations.get(item.conversation_key)
                actor.enqueue(effects[item.idempotency_key])
            else:
                await self._interrupt([item])
        return {t.message_id for t in cut} | ended

    async def take_over(
        self, key: str, fresh: Mapping[str, InboundMessage], leftovers: Collection[str]
    ) -> list[str]:
        """Several instances: this one just claimed a conversation whose owner died (or
        shut down). Its `leftovers` (what that owner took) are recovered as after a
        restart; every other message arrives as new, from `fresh` (this instance's own
        copies, which know their topic thread) or from the journal. Returns the ids fed."""
        now = self._clock()
        approvals = [a for a in await self._store.open_approvals() if a.conversation_key == key]
        await self._expire(approvals, now)
        # Its owed posts go out too (an answer, a command's reply recorded but not yet sent
        # when its owner died), as after a restart: before, they were lost with it (seed
        # 44126: an /every's confirmation, so its user never learned the schedule's number).
        done = await self._replay(float("inf"), now, key)
        messages = await self._store.pending_messages(key)
        await self._requeue([m for m in messages if m.message_id in leftovers], done, now)
        for message in messages:
            if message.message_id in fresh:
                self.accept(fresh[message.message_id])
            elif message.message_id not in leftovers:
                self.accept_journaled(message)
        return [m.message_id for m in messages]

    def accept_journaled(self, message: JournaledMessage) -> None:
        """A message another instance journaled for a conversation this one owns: it
        arrives here as a new one would (ack, then a turn or the queue)."""
        actor = self._conversations.get(message.conversation_key)
        actor.feed(journaled_input(message))

    async def _expire(self, approvals: list[Approval], now: float) -> None:
        for approval in approvals:
            await self._store.resolve_approval(
                approval.request_id, ApprovalStatus.EXPIRED, None, now
            )
            try:
                await self._feishu.update_card(
                    approval.card_message_id, self._cards.expired_after_restart(approval.title)
                )
            except Exception:
                log.warning("could not expire approval card %s", approval.card_message_id)

    async def _interrupt(self, running: list[TurnRecord]) -> set[str]:
        """Tell each cut turn's user; returns the cut turns' message ids. A turn whose prompt
        never went out (no `prompted_at`: cut while it waited for its session, its slot or
        the store) lost nothing: its message is not among them, so it runs again."""
        interrupted = [t for t in running if t.prompted_at is not None]
        for turn in interrupted:
            message = await self._store.message(turn.message_id)
            requester = message.sender_open_id if message else ""
            self._conversations.get(turn.conversation_key).feed(
                TurnInterruptedByRestart(turn.turn_id, turn.message_id, requester)
            )
        return {t.message_id for t in interrupted}

    async def _requeue(
        self, messages: list[JournaledMessage], interrupted_ids: set[str], now: float
    ) -> None:
        for message in messages:
            if message.state is MessageState.INTERRUPTED and message.message_id in interrupted_ids:
                await self._store.set_message_state(message.message_id, MessageState.DONE, now)
                continue
            recovered = MessageRecovered(journaled_input(message))
            self._conversations.get(message.conversation_key).feed(recovered)


def _decoded(owed: list[OwedPost]) -> dict[str, Owed]:
    """Each owed post's effect, by its key; one this version cannot read stays owed."""
    effects: dict[str, Owed] = {}
    for post in owed:
        try:
            effects[post.idempotency_key] = owed_of(post)
        except (KeyError, TypeError, ValueError):
            log.exception("an owed post cannot be read; left owed (%s)", post.idempotency_key)
    return effects
