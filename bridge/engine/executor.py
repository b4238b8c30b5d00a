"""Carries out the core's effects, one conversation's in order: Feishu calls, store writes,
answers to the agent. It decides nothing a user sees; texts are rendered from the keys the
core chose.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

from bridge.core.effects import (
    AbandonTurn,
    AnnounceSchedule,
    AnswerPermission,
    AnswerQuestion,
    AskConfig,
    AskModes,
    AskStatus,
    AskSwitch,
    CancelTurn,
    EditText,
    ManageSchedules,
    MarkMessageDone,
    NewSession,
    PostApprovalCard,
    PostQuestion,
    PostText,
    React,
    RecordTerminal,
    RelayAgentText,
    ScheduleSkipped,
    SendFile,
    ShowDiffs,
    ShowStatusCard,
    StartTurn,
    UpdateApprovalCard,
    UpdateQuestionCard,
)
from bridge.core.inputs import (
    AgentCommands,
    CardNotShown,
    StartFailed,
)
from bridge.core.text import Text
from bridge.engine.actor import ConversationActor, Owe, Owed, Trace, Work, shown, terms_of
from bridge.engine.answers import Answers, Mark
from bridge.engine.asks import Asks
from bridge.engine.card_views import CardViews, PostedCards, approval_status
from bridge.engine.files_out import FilesOut
from bridge.engine.outbox import Outbox, owed_terms
from bridge.engine.schedules.scheduler import Scheduler
from bridge.engine.status_cards import StatusCards
from bridge.engine.switches import Switches
from bridge.engine.turn_runner import TurnRunner
from bridge.feishu.api import FeishuApi
from bridge.feishu.budget import CallBudget, scope
from bridge.feishu.delivery import FeishuGate
from bridge.feishu.errors import BusinessError, FeishuError
from bridge.i18n import Translator, render, render_text
from bridge.ops.metrics import Metrics
from bridge.runtime.port import (
    AgentRuntime,
)
from bridge.runtime.router import Routes
from bridge.store.port import MessageState, Store, StoreUnavailable, TurnOutcome
from bridge.store.steady import StoreRetry
from bridge.store.trace_buffer import TraceBuffer

log = logging.getLogger(__name__)


class EffectExecutor:
    def __init__(
        self,
        *,
        feishu: FeishuApi,
        runtime: AgentRuntime,
        store: Store,
        translator: Translator,
        cards: CardViews,
        runner: TurnRunner,
        switches: Switches,
        routes: Routes,
        status_cards: StatusCards,
        schedules: Scheduler,
        clock: Callable[[], float],
        ack_emoji: str,
        gate: FeishuGate,
        retry: StoreRetry,
        metrics: Metrics | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        self._schedules = schedules
        self._feishu = feishu
        self._runtime = runtime
        self._store = store
        self._t = translator
        self._cards = cards
        self._posted = PostedCards()
        self._runner = runner
        self._switches = switches
        self._status_cards = status_cards
        self.traces = TraceBuffer(store, clock)
        self._answers = Answers(feishu=feishu, store=store, clock=clock, gate=gate)
        self.outbox = Outbox(
            answers=self._answers,
            store=store,
            clock=clock,
            ack_emoji=ack_emoji,
            metrics=metrics,
            budget=budget,
        )
        self._files = FilesOut(
            feishu=feishu, store=store, routes=routes, answers=self._answers, clock=clock
        )
        # Turns this process started, and when: nothing of theirs went out before a restart.
        self._started: dict[str, float] = {}
        # A conversation's end signal just posted, its outbox mark not yet written: the
        # effect after it is its turn's RecordTerminal (core/lifecycle.py `finish`), which
        # writes it with the turn's end in one transaction. Written on its own first if
        # anything else comes.
        self._held: dict[str, tuple[str, Mark]] = {}
        self._clock = clock
        self._metrics = metrics
        # Several instances: whether this one holds the conversation's lease (a turn starts
        # only then; an unconfirmed one is waited on). One instance alone holds every one.
        self.confirm: Callable[[str], Awaitable[bool]] = _always
        self._retry = retry
        self._asks = Asks(runtime=runtime, store=store, runner=runner, clock=clock)

    @property
    def cards_held(self) -> int:
        """Posted cards whose turn has not ended (pruned at each turn's end)."""
        return len(self._posted)

    async def perform(self, actor: ConversationActor, work: Work) -> None:
        # Its Feishu calls take from the app's budget as its chat's, in the lane the core set.
        terms = owed_terms(actor, work) if isinstance(work, Owed) else terms_of(actor, work)
        with scope(terms.chat, terms.lane):
            await self._perform(actor, work)

    async def _perform(self, actor: ConversationActor, work: Work) -> None:
        held = self._held.get(actor.key)
        # Only what follows the end signal on its own lane comes between it and its turn's
        # end record; the work lane runs beside it (the next turn's start, an Owe).
        its_end = isinstance(work, RecordTerminal) and held is not None and work.turn_id == held[0]
        if held is not None and shown(work) and not its_end:
            await self._write_held(actor.key)
        match work:
            case React(message_id):
                await self.outbox.ack(message_id)
            case MarkMessageDone(message_id):
                done = partial(
                    self._store.set_message_state, message_id, MessageState.DONE, self._clock()
                )
                await self._retry.call("message_done", done)
            case PostText() | RelayAgentText():
                fresh = work.turn_id in self._started
                mark = await self.outbox.post(actor, work, self._text_of(work), fresh=fresh)
                self._hold(actor, work.turn_id, mark)
                if self._metrics and isinstance(work, PostText):
                    self._metrics.lines.labels(work.key).inc()
            case Owe(post):
                owe = partial(self.outbox.record, actor, post, self._text_of(post))
                await self._retry.call("owe", owe)
            case EditText(posted_key, key, params):
                await self._edit_text(posted_key, render(self._t, key, params))
            case Owed():
                await self.outbox.deliver(actor, work)
            case StartTurn():
                await self._start_turn(actor, work)
            case CancelTurn(_, session_id):
                # No session yet: the core holds the cancel and never lets the prompt go out.
                if session_id is not None:
                    await self._runtime.cancel(session_id)
            case AbandonTurn(_, session_id):
                await self._runtime.abandon(session_id)
            case AnswerPermission(request_id, option_id):
                await self._runtime.answer_permission(request_id, option_id)
            case AnswerQuestion(request_id, answers):
                await self._runtime.answer_question(request_id, answers)
            case ShowStatusCard():
                await self._status_cards.show(actor, work)
            case PostApprovalCard() | PostQuestion():
                await self._post_card(actor, work)
            case UpdateApprovalCard() | UpdateQuestionCard():
                await self._update_card(work)
            case NewSession(reason):
                await self._runner.leave(actor.key, reason)
            case AskModes():
                await self._asks.modes(actor, work)
            case AskConfig():
                await self._asks.config(actor, work)
            case AskSwitch():
                await self._switches.switch(actor, work)
            case AskStatus():
                await self._switches.status(actor, work)
            case SendFile():
                await self._files.send(actor, work)
            case ShowDiffs():
                await self._files.diffs(actor, work)
            case ManageSchedules():
                await self._schedules.manage(actor, work)
            case AnnounceSchedule():
                await self._schedules.announce(actor, work)
            case ScheduleSkipped():
                await self._schedules.skipped(work)
            case RecordTerminal(turn_id, outcome, ending, detail):
                self._posted.forget_turn(turn_id)
                held = self._held.pop(actor.key, None)
                sent = held[1] if held is not None else None
                await self._record_terminal(turn_id, outcome.value, ending.value, detail, sent)
                await self._after_round(actor)
            case Trace(turn_id, kind, detail):
                await self._trace(turn_id, kind, detail)
            case _:
                log.warning("no executor for %s", type(work).__name__)
        traced = _trace_of(work)
        if traced is not None:
            await self._trace(*traced)

    def _hold(self, actor: ConversationActor, turn_id: str | None, mark: Mark | None) -> None:
        if mark is not None and turn_id is not None:
            self._held[actor.key] = (turn_id, mark)

    async def _write_held(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            idem, ids = held[1]
            mark = partial(self._store.mark_sent, idem, ids, self._clock())
            await self._retry.call("mark_sent", mark)

    def _text_of(self, work: PostText | RelayAgentText) -> str:
        text = render(self._t, work.key, work.params) if isinstance(work, PostText) else work.text
        return self._footed(text, work.footer)

    def _footed(self, text: str, footer: Text | None) -> str:
        return text if footer is None else f"{text}\n\n{render_text(self._t, footer)}"

    async def _after_round(self, actor: ConversationActor) -> None:
        """After each round: the session's activity and title recorded (for /sessions), and
        the slash commands the agent announced (for /help and for passing a typed one
        through), told to the core when they changed."""
        session_id = actor.conv.session_id
        if session_id is None:
            return
        facts = await self._runner.remember(actor.key, session_id)
        names = await self._runtime.commands(session_id)
        agent = facts.agent if facts else ""
        if names != actor.conv.agent_commands or agent != actor.conv.agent_name:
            actor.feed(AgentCommands(names, agent))

    async def _trace(self, turn_id: str, kind: str, detail: str) -> None:
        # Written behind, in one statement at the turn's end (see trace_buffer.py).
        await self.traces.add(turn_id, kind, detail)

    async def _edit_text(self, posted_key: str, text: str) -> None:
        ids = await self._store.sent(posted_key)
        if not ids:
            return  # never posted (e.g. the bridge restarted before it went out)
        try:
            await self._feishu.edit_text(ids[0], text)
        except FeishuError as exc:
            log.warning("could not edit a posted line (%s)", exc)

    async def _post_card(
        self, actor: ConversationActor, work: PostApprovalCard | PostQuestion
    ) -> None:
        message_id = await self._show_card(actor, work)
        if message_id is None:
            actor.feed(CardNotShown(work.turn_id, work.request_id))
            return
        self._posted.remember(work.turn_id, work.card_key, message_id)
        await self._store.mark_sent(work.idempotency_key, [message_id], self._clock())
        if isinstance(work, PostApprovalCard):
            await self._store.save_approval(
                work.request_id,
                work.turn_id,
                actor.key,
                message_id,
                work.requester,
                self._clock(),
                title=work.title,
            )

    async def _show_card(
        self, actor: ConversationActor, work: PostApprovalCard | PostQuestion
    ) -> str | None:
        """The card, or the plain fallback when Feishu refuses it; None when both fail."""
        reply_to, uuid = work.reply_to, work.idempotency_key
        in_thread = terms_of(actor, work).in_thread
        since = self._clock()  # an outage is waited out (delivery.py), a refusal is not
        try:
            card = self._cards.open_card(work)
            post = partial(self._feishu.reply_card, reply_to, card, uuid=uuid, in_thread=in_thread)
            return await self._answers.gate.attempt(post, owed_since=since)
        except BusinessError as exc:
            log.warning("Feishu refused a card (%s); sending the plain fallback", exc.code)
            self._count("fallback")
        try:
            card = self._cards.fallback_card(work)
            fallback = f"{uuid}:plain"
            post = partial(
                self._feishu.reply_card, reply_to, card, uuid=fallback, in_thread=in_thread
            )
            return await self._answers.gate.attempt(post, owed_since=since)
        except FeishuError as exc:
            log.error("Feishu refused the plain card too (%s); the request is cancelled", exc)
            self._count("not_shown")
            return None

    def _count(self, fate: str) -> None:
        if self._metrics:
            self._metrics.cards_refused.labels(fate).inc()

    async def _update_card(self, work: UpdateApprovalCard | UpdateQuestionCard) -> None:
        if isinstance(work, UpdateApprovalCard):
            await self._store.resolve_approval(
                work.request_id, approval_status(work), work.by, self._clock()
            )
        if not work.patch:
            return  # the click's callback answer already replaced the card
        message_id = self._posted.message_id(work.turn_id, work.card_key)
        if message_id is not None:
            patch = partial(self._feishu.update_card, message_id, self._cards.closed_card(work))
            await self._answers.gate.attempt(patch, owed_since=self._clock())

    async def _record_terminal(
        self, turn_id: str, outcome: str, ending: str, detail: str, sent: Mark | None
    ) -> None:
        now = self._clock()
        started = self._started.pop(turn_id, None)
        # The turn's message is the one it answers (a turn's id is its message's id); `sent`,
        # its end signal's outbox mark, is written in the same transaction.
        end = partial(self._store.end_turn, turn_id, turn_id, TurnOutcome(outcome), now, sent=sent)
        if await self._retry.call("end_turn", end):
            # "<outcome> <ending>: <detail>": /turns/{id} reads the typed ending back from it.
            await self.traces.add(turn_id, "terminal", f"{outcome} {ending}: {detail}", now)
            if self._metrics:
                self._metrics.turns.labels(outcome, ending).inc()
                if started is None:  # a turn of an earlier process
                    turn = await self._store.turn(turn_id)
                    started = turn.started_at if turn is not None else None
                if started is not None:
                    self._metrics.turn_seconds.observe(max(0.0, now - started))

    async def _start_turn(self, actor: ConversationActor, work: StartTurn) -> None:
        if self._runner.shutting_down:
            # Left queued in the journal: the next start runs it, as if it had just come.
            log.info("turn %s not started: the bridge is shutting down", work.turn_id)
            return
        if not await self.confirm(actor.key):
            # Several instances: the lease went to another one, which runs it from the journal.
            log.warning("turn %s not started: %s is not this instance's", work.turn_id, actor.key)
            return
        now = self._clock()
        begin = partial(self._store.begin_turn, work.turn_id, actor.key, work.turn_id, now)
        try:
            begun = await self._retry.call("begin_turn", begin)
        except StoreUnavailable:  # past the retries: the bridge's part failed, not the agent
            log.error("turn %s not started: the store stayed unavailable", work.turn_id)
            actor.feed(StartFailed(work.turn_id, "StoreUnavailable"))
            return
        if begun:
            self._started[work.turn_id] = now
            await self.traces.add(work.turn_id, "start", "", now)
        if self._runner.stopping():  # began meanwhile: the next start tells its user
            log.info("turn %s not started: the bridge is shutting down", work.turn_id)
            return
        self._runner.start(actor, work)


async def _always(key: str) -> bool:
    return True


def _trace_of(work: Work) -> tuple[str, str, str] | None:
    """The timeline entry for an effect just performed: what was shown, never its text."""
    match work:
        case PostText(key=key, final=final, turn_id=str(turn_id)):
            return turn_id, "end" if final else "line", key
        case RelayAgentText(text=text, final=final, turn_id=str(turn_id)):
            return turn_id, "end" if final else "reply", f"{len(text)} chars"
        case ShowStatusCard(turn_id=turn_id, view=view, final=True):
            return turn_id, "end" if view.end_key is None else "status_card", view.phase.value
        case PostApprovalCard(turn_id=turn_id, request_id=request_id):
            return turn_id, "approval_card", request_id
        case PostQuestion(turn_id=turn_id, request_id=request_id):
            return turn_id, "question_card", request_id
        case CancelTurn(turn_id):
            return turn_id, "cancel", ""
    return None
