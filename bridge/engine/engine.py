"""The engine: conversation actors, the effect executor, turns, card clicks, restart recovery.

It implements the receiver's `MessageSink`. All decisions are the core's; this module only
translates inputs (Feishu events, runtime events, timers) into core inputs and effects into
calls on the Feishu client, the agent runtime and the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from bridge.core import Conversation, Options, Timings
from bridge.core.effects import (
    AnswerPermission,
    AnswerQuestion,
    CancelTurn,
    Effect,
    NewSession,
    PostApprovalCard,
    PostQuestion,
    PostText,
    RecordTerminal,
    RefuseClick,
    RelayReply,
    StartTurn,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.core.inputs import (
    ApprovalClicked,
    QuestionAnswered,
    RuntimeRestarted,
    RuntimeRestartFailed,
    RuntimeUnavailableAtStart,
    TurnInterruptedByRestart,
    UserMessage,
)
from bridge.core.state import WAITING_USER_STATES
from bridge.engine.actor import ConversationActor, MarkDone, React, Reply, Trace, Work
from bridge.engine.cards_view import CardBook
from bridge.engine.commands import parse_command
from bridge.engine.render import render
from bridge.engine.tasks import TaskTracker
from bridge.feishu.api import FeishuApi
from bridge.feishu.cards import APPROVAL, decode_action
from bridge.feishu.models import CardAction, CardActionReply, InboundMessage
from bridge.i18n import Translator
from bridge.ops.metrics import Metrics
from bridge.runtime.events import (
    PermissionRequested,
    PromptSent,
    QuestionAsked,
    RuntimeExited,
    RuntimeFailed,
    ToolCallStarted,
    TurnEnded,
    TurnEvent,
)
from bridge.runtime.port import AgentRuntime, RuntimeUnavailable
from bridge.store.port import ApprovalStatus, MessageState, Store, TurnOutcome, UnknownTurn

log = logging.getLogger(__name__)

TEXT_TYPES = frozenset({"text", "post"})


@dataclass(frozen=True)
class EngineConfig:
    timings: Timings
    options: Options
    ack_emoji: str
    max_running_turns: int


class Engine:
    def __init__(
        self,
        *,
        feishu: FeishuApi,
        runtime: AgentRuntime,
        store: Store,
        translator: Translator,
        config: EngineConfig,
        clock: Callable[[], float],
        publish: Callable[[str, dict[str, object]], object],
        metrics: Metrics | None = None,
    ) -> None:
        self._metrics = metrics
        self._feishu = feishu
        self._runtime = runtime
        self._store = store
        self._t = translator
        self._config = config
        self._clock = clock
        self._publish = publish
        self._actors: dict[str, ConversationActor] = {}
        self._tasks = TaskTracker("engine")
        self._turn_slots = asyncio.Semaphore(config.max_running_turns)
        self._cards = CardBook(translator)
        # request id → conversation, for routing card clicks.
        self._requests: dict[str, str] = {}
        # Turns cancelled before their prompt reached the runtime.
        self._cancel_early: set[str] = set()

    # -- actors ------------------------------------------------------------------------------

    def actor(self, key: str) -> ConversationActor:
        found = self._actors.get(key)
        if found is None:
            found = ConversationActor(
                key,
                conv=Conversation(options=self._config.options),
                timings=self._config.timings,
                clock=self._clock,
                perform=self._perform,
                publish=self._publish,
                tasks=self._tasks,
            )
            self._actors[key] = found
        return found

    @property
    def conversations(self) -> dict[str, ConversationActor]:
        return dict(self._actors)

    # -- MessageSink -------------------------------------------------------------------------

    def accept(self, message: InboundMessage) -> None:
        actor = self.actor(message.conversation_key)
        if message.thread_id:
            actor.in_thread = True  # answer inside the topic thread, not in the main chat
        actor.enqueue(React(message.message_id))
        text = message.text if message.message_type in TEXT_TYPES else ""
        self._feed_text(actor, message.message_id, message.sender_open_id, text)

    def _feed_text(self, actor: ConversationActor, message_id: str, sender: str, text: str) -> None:
        if not text.strip():  # image, file, sticker… (or a text that was only an @-mention)
            unsupported = Reply("message.unsupported", message_id, f"{message_id}:unsupported")
            actor.enqueue(unsupported)
            actor.enqueue(MarkDone(message_id))
            return
        command = parse_command(text, message_id=message_id, sender=sender)
        if command is not None:
            actor.feed(command)
            actor.enqueue(MarkDone(message_id))
            return
        effects = actor.feed(UserMessage(message_id=message_id, sender=sender, text=text))
        started = any(isinstance(e, StartTurn) and e.turn_id == message_id for e in effects)
        queued = any(q.message_id == message_id for q in actor.conv.queue)
        if not started and not queued:
            actor.enqueue(MarkDone(message_id))  # consumed as an answer, or dropped

    def refuse(self, message: InboundMessage) -> None:
        self.actor(message.conversation_key).enqueue(
            Reply("access.refused", message.message_id, f"{message.message_id}:refused")
        )

    async def card_action(self, action: CardAction) -> CardActionReply:
        decoded = decode_action(action.value)
        if decoded is None:
            return CardActionReply(toast_type="info", toast_text=self._t("card.click.unknown"))
        kind, request_id, choice = decoded
        key = self._requests.get(request_id)
        if key is None:
            # Not a live request of this process: answered before, or cut by a restart.
            return CardActionReply(toast_type="info", toast_text=self._t("card.already_handled"))
        actor = self.actor(key)
        event: ApprovalClicked | QuestionAnswered
        if kind == APPROVAL:
            event = ApprovalClicked(request_id, choice, action.operator_open_id)
        else:
            question = actor.conv.question
            answer_key = question.answer_key if question else "answer"
            event = QuestionAnswered(request_id, {answer_key: choice}, action.operator_open_id)
        return self._click_reply(actor.feed(event))

    def _click_reply(self, effects: list[Effect]) -> CardActionReply:
        """The callback's answer: a refusal toast, or the closed card with a success toast."""
        for effect in effects:
            if isinstance(effect, RefuseClick):
                return CardActionReply(toast_type="warning", toast_text=self._t(effect.key))
        for effect in effects:
            if isinstance(effect, UpdateApprovalCard | UpdateQuestionCard):
                self._cards.mark_closed_by_callback(effect.card_key)
                card = self._cards.closed_card(effect)
                toast = "card.click.recorded"
                return CardActionReply(toast_type="success", toast_text=self._t(toast), card=card)
        return CardActionReply(toast_type="info", toast_text=self._t("card.already_handled"))

    # -- restart recovery --------------------------------------------------------------------

    async def recover(self, before: float) -> None:
        """After a restart: tell interrupted turns' users, expire open approval cards, and run
        what was queued behind them (with a notice). Only what predates `before` (this
        process's start): a message the new process already took is not recovered twice."""
        now = self._clock()
        for approval in await self._store.open_approvals():
            if approval.created_at >= before:
                continue
            await self._store.resolve_approval(
                approval.request_id, ApprovalStatus.EXPIRED, None, now
            )
            try:
                await self._feishu.update_card(
                    approval.card_message_id, self._cards.expired_after_restart(approval.title)
                )
            except Exception:
                log.warning("could not expire approval card %s", approval.card_message_id)
        interrupted = [t for t in await self._store.running_turns() if t.started_at < before]
        await self._store.interrupt_running_messages(now)
        for turn in interrupted:
            message = await self._store.message(turn.message_id)
            requester = message.sender_open_id if message else ""
            self.actor(turn.conversation_key).feed(
                TurnInterruptedByRestart(turn.turn_id, turn.message_id, requester)
            )
        for message in await self._store.unfinished_messages():
            if message.received_at >= before:
                continue
            if message.state is MessageState.INTERRUPTED and any(
                t.message_id == message.message_id for t in interrupted
            ):
                await self._store.set_message_state(message.message_id, MessageState.DONE, now)
                continue
            actor = self.actor(message.conversation_key)
            # Only the first one starts now; the others wait behind it, and are told so.
            starts_now = actor.conv.turn is None
            key = "recovery.resumed" if starts_now else "recovery.resumed_queued"
            actor.enqueue(Reply(key, message.message_id, f"{message.message_id}:resumed"))
            self._feed_text(actor, message.message_id, message.sender_open_id, message.text)

    # -- effects -----------------------------------------------------------------------------

    async def _perform(self, actor: ConversationActor, work: Work) -> None:
        now = self._clock()
        match work:
            case React(message_id):
                await self._feishu.add_reaction(message_id, self._config.ack_emoji)
            case Reply(key, reply_to, idem):
                await self._post_text(actor, reply_to, self._t(key), idem)
            case MarkDone(message_id):
                await self._store.set_message_state(message_id, MessageState.DONE, now)
            case PostText(key, params, reply_to, idem, _):
                await self._post_text(actor, reply_to, render(self._t, key, params), idem)
                if self._metrics:
                    self._metrics.lines.labels(key).inc()
            case RelayReply(text, reply_to, idem, _):
                await self._post_text(actor, reply_to, text, idem)
            case StartTurn():
                await self._start_turn(actor, work)
            case CancelTurn(turn_id, session_id):
                if session_id is None:
                    self._cancel_early.add(turn_id)  # the turn task sees it before prompting
                else:
                    await self._runtime.cancel(session_id)
            case AnswerPermission(request_id, option_id):
                self._requests.pop(request_id, None)
                await self._runtime.answer_permission(request_id, option_id)
            case AnswerQuestion(request_id, answers):
                self._requests.pop(request_id, None)
                await self._runtime.answer_question(request_id, answers)
            case PostApprovalCard() | PostQuestion():
                await self._post_card(actor, work)
            case UpdateApprovalCard() | UpdateQuestionCard():
                await self._update_card(work)
            case NewSession():
                await self._store.unbind(actor.key)
            case RecordTerminal(turn_id, outcome, detail):
                await self._record_terminal(turn_id, outcome.value, detail)
            case Trace(turn_id, kind, detail):
                await self._trace(turn_id, kind, detail)
            case _:
                log.warning("no executor for %s", type(work).__name__)
        traced = _trace_of(work)
        if traced is not None:
            await self._trace(*traced)

    async def _trace(self, turn_id: str, kind: str, detail: str) -> None:
        # A line outside any turn (refusal, unsupported type, command) has no timeline.
        with contextlib.suppress(UnknownTurn):
            await self._store.trace(turn_id, kind, detail, self._clock())

    async def _post_text(
        self, actor: ConversationActor, reply_to: str, text: str, idem: str
    ) -> None:
        if await self._store.sent(idem) is not None:
            log.info("skipped a post already sent before a restart (%s)", idem)
            return
        ids = await self._feishu.reply_text(reply_to, text, uuid=idem, in_thread=actor.in_thread)
        await self._store.mark_sent(idem, ids, self._clock())

    async def _post_card(
        self, actor: ConversationActor, work: PostApprovalCard | PostQuestion
    ) -> None:
        self._requests[work.request_id] = actor.key
        card = self._cards.open_card(work)
        message_id = await self._feishu.reply_card(
            work.reply_to, card, uuid=work.idempotency_key, in_thread=actor.in_thread
        )
        self._cards.remember(work, message_id)
        await self._store.mark_sent(work.idempotency_key, [message_id], self._clock())
        if isinstance(work, PostApprovalCard):
            # The turn that asked, from the card's own key: by the time this is performed
            # the conversation may already be on another turn.
            await self._store.save_approval(
                work.request_id,
                _turn_of(work.idempotency_key),
                actor.key,
                message_id,
                work.requester,
                self._clock(),
                title=work.title,
            )

    async def _update_card(self, work: UpdateApprovalCard | UpdateQuestionCard) -> None:
        self._requests.pop(work.request_id, None)
        if isinstance(work, UpdateApprovalCard):
            await self._store.resolve_approval(
                work.request_id, self._cards.approval_status(work), work.by, self._clock()
            )
        message_id = self._cards.message_id(work.card_key)
        if message_id is None:
            return
        if self._cards.shown_by_callback(work):
            return  # the click's callback answer already replaced the card
        await self._feishu.update_card(message_id, self._cards.closed_card(work))

    async def _record_terminal(self, turn_id: str, outcome: str, detail: str) -> None:
        now = self._clock()
        if await self._store.finish_turn(turn_id, TurnOutcome(outcome), now):
            await self._store.trace(turn_id, "terminal", f"{outcome} {detail}".strip(), now)
            if self._metrics:
                self._metrics.turns.labels(outcome).inc()
                turn = await self._store.turn(turn_id)
                if turn is not None:
                    self._metrics.turn_seconds.observe(max(0.0, now - turn.started_at))
        await self._store.set_message_state(turn_id, MessageState.DONE, now)

    # -- turns -------------------------------------------------------------------------------

    async def _start_turn(self, actor: ConversationActor, work: StartTurn) -> None:
        now = self._clock()
        if await self._store.start_turn(work.turn_id, actor.key, work.turn_id, now):
            await self._store.trace(work.turn_id, "start", "", now)
        await self._store.set_message_state(work.turn_id, MessageState.RUNNING, now)
        self._tasks.spawn(self._run_turn(actor, work), name=f"turn:{work.turn_id}")

    async def _open_session(self, key: str) -> str:
        resume = await self._store.session_for(key)
        handle = await self._runtime.open_session(key, resume_session_id=resume)
        if handle.session_id != resume:
            await self._store.bind_session(key, handle.session_id, self._clock())
        return handle.session_id

    async def _run_turn(self, actor: ConversationActor, work: StartTurn) -> None:
        if self._turn_slots.locked():
            # Every slot is busy: say so now rather than wait in silence behind other rounds.
            busy = "too many rounds running at once"
            actor.feed(RuntimeUnavailableAtStart(work.turn_id, busy, limit_reached=True))
            return
        async with self._turn_slots:
            try:
                session_id = work.session_id or await self._open_session(actor.key)
            except RuntimeUnavailable as exc:
                self._cancel_early.discard(work.turn_id)
                actor.feed(RuntimeUnavailableAtStart(work.turn_id, exc.reason, exc.limit_reached))
                return
            except Exception as exc:  # a bug or a malformed answer must not strand the turn
                log.exception("opening a session for turn %s failed", work.turn_id)
                self._cancel_early.discard(work.turn_id)
                actor.feed(RuntimeUnavailableAtStart(work.turn_id, type(exc).__name__))
                return
            if work.turn_id in self._cancel_early:
                # /stop (or /new) came while the agent was still starting: never prompt.
                self._cancel_early.discard(work.turn_id)
                actor.feed(RuntimeUnavailableAtStart(work.turn_id, "cancelled before the prompt"))
                return
            terminal: list[TurnEvent] = []

            def sink(event: TurnEvent) -> None:
                if isinstance(event, TurnEnded | RuntimeFailed | RuntimeExited):
                    terminal.append(event)
                traced = _trace_of_event(event)
                if traced is not None:
                    actor.enqueue(Trace(work.turn_id, *traced))
                actor.feed(event)
                if isinstance(event, PromptSent) and work.turn_id in self._cancel_early:
                    # The cancel raced the prompt onto the wire: cancel it now.
                    self._cancel_early.discard(work.turn_id)
                    self._tasks.spawn(self._runtime.cancel(session_id), name="cancel")

            try:
                await self._runtime.prompt(session_id, work.text, sink)
            except Exception as exc:
                log.exception("prompt of turn %s raised", work.turn_id)
                if not terminal:
                    sink(RuntimeFailed(session_id, reason=type(exc).__name__))
            if not terminal:
                sink(RuntimeFailed(session_id, reason="prompt returned without an ending"))
            ended = terminal[0]
            if isinstance(ended, RuntimeFailed):
                # The JSON-RPC code and short message only (never the agent's details).
                log.warning("turn %s failed in the agent: %s", work.turn_id, ended.reason)
            if isinstance(ended, RuntimeExited) and self._metrics:
                self._metrics.runtime_exits.inc()
            if isinstance(ended, RuntimeExited) and ended.restarting:
                await self._reopen(actor, session_id)

    async def _reopen(self, actor: ConversationActor, session_id: str) -> None:
        try:
            handle = await self._runtime.open_session(actor.key, resume_session_id=session_id)
        except RuntimeUnavailable as exc:
            actor.feed(RuntimeRestartFailed(exc.reason))
            return
        await self._store.bind_session(actor.key, handle.session_id, self._clock())
        actor.feed(RuntimeRestarted(handle.session_id, reloaded=handle.loaded))

    # -- lifecycle ---------------------------------------------------------------------------

    async def drain(self, grace: float) -> None:
        """Let running turns finish within `grace`; a turn waiting for a person cannot, so it
        is cut at once (its card is expired and its user told at the next start)."""
        waiting = {
            f"turn:{actor.conv.turn.turn_id}"
            for actor in self._actors.values()
            if actor.conv.turn is not None and actor.conv.state in WAITING_USER_STATES
        }
        self._tasks.cancel(waiting)
        for actor in self._actors.values():
            actor.close()
        await self._tasks.drain(grace)

    async def turn_view(self, turn_id: str) -> dict[str, object] | None:
        """A turn and its timeline, for operators (`GET /turns/{id}`)."""
        turn = await self._store.turn(turn_id)
        if turn is None:
            return None
        return {
            "turn_id": turn.turn_id,
            "conversation": turn.conversation_key,
            "started_at": turn.started_at,
            "outcome": turn.outcome.value if turn.outcome else None,
            "finished_at": turn.finished_at,
            "trace": [
                {"at": e.at, "kind": e.kind, "detail": e.detail}
                for e in await self._store.trace_for(turn_id)
            ],
        }

    async def wait_idle(self) -> None:
        """Until every actor has performed what it was given (tests and shutdown)."""
        await asyncio.gather(*(actor.wait_idle() for actor in self._actors.values()))


__all__ = ["Engine", "EngineConfig"]


def _turn_of(idempotency_key: str) -> str:
    return idempotency_key.split(":", 1)[0]  # keys are "<turn id>:<kind>:<seq>"


def _trace_of(work: Work) -> tuple[str, str, str] | None:
    """The timeline entry for an effect just performed: what was shown, never its text."""
    match work:
        case PostText(key, _, _, idem, final):
            return _turn_of(idem), "end" if final else "line", key
        case RelayReply(text, _, idem, final):
            return _turn_of(idem), "end" if final else "reply", f"{len(text)} chars"
        case PostApprovalCard(idempotency_key=idem, request_id=request_id):
            return _turn_of(idem), "approval_card", request_id
        case PostQuestion(idempotency_key=idem, request_id=request_id):
            return _turn_of(idem), "question_card", request_id
        case CancelTurn(turn_id):
            return turn_id, "cancel", ""
    return None


def _trace_of_event(event: TurnEvent) -> tuple[str, str] | None:
    """Runtime events worth a timeline entry (titles and reasons, never message text)."""
    match event:
        case PromptSent():
            return "prompt_sent", ""
        case ToolCallStarted(title=title):
            return "tool", title[:120]
        case PermissionRequested(title=title):
            return "permission", title[:120]
        case QuestionAsked(kind=kind):
            return "question", kind.value
        case TurnEnded(stop_reason=reason):
            return "turn_ended", reason.value
        case RuntimeFailed(reason=reason):
            return "runtime_failed", reason
        case RuntimeExited(returncode=code, signal=sig):
            return "runtime_exited", f"code={code} signal={sig}"
    return None
