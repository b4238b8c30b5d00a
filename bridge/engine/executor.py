"""Carries out the core's effects, one conversation's in order: Feishu calls, store writes,
answers to the agent. It decides nothing a user sees; texts are rendered from the keys the
core chose.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from bridge.core.effects import (
    AbandonTurn,
    AnnounceSchedule,
    AnswerCallback,
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
    OpenSession,
    PostApprovalCard,
    PostQuestion,
    PostText,
    React,
    RecordTerminal,
    RelayAgentText,
    ScheduleSkipped,
    SendFile,
    SendPrompt,
    SetReaction,
    ShowDiffs,
    ShowStatusCard,
    StartTurn,
    UpdateApprovalCard,
    UpdateQuestionCard,
    Urge,
)
from bridge.core.inputs import (
    AgentCommands,
    CardNotShown,
    NotStartedReason,
    Posted,
    StartFailed,
    TurnBegun,
    TurnNotStarted,
    UrgeRefused,
)
from bridge.core.text import Text
from bridge.engine.actor import ConversationActor, Owe, Owed, Route, Trace, Work, terms_of
from bridge.engine.asks import Asks
from bridge.engine.card_views import CardViews, approval_status
from bridge.engine.files_out import FilesOut
from bridge.engine.outbox import Answers, Mark, Outbox, idempotency_key, turn_of
from bridge.engine.reactions import Reactions
from bridge.engine.status_cards import StatusCards
from bridge.engine.switches import Switches
from bridge.engine.turn_runner import TurnRunner
from bridge.engine.urgency import UrgentMode
from bridge.feishu.api import FeishuApi
from bridge.feishu.budget import CallBudget
from bridge.feishu.delivery import FeishuGate, Superseded, Undeliverable
from bridge.feishu.errors import BusinessError, FeishuError
from bridge.feishu.requests import CallTerms
from bridge.feishu.urgent import scope_missing
from bridge.i18n import Translator, render, render_text
from bridge.ops.metrics import Metrics
from bridge.runtime.port import (
    AgentRuntime,
)
from bridge.runtime.router import Projects
from bridge.schedules.scheduler import Scheduler
from bridge.store.port import MessageState, Store, StoreUnavailable, TurnOutcome
from bridge.store.steady import StoreRetry
from bridge.store.trace_buffer import TraceBuffer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Handler:
    """How one effect type is carried out: which lane it waits in, what performs it, and the
    timeline entry it leaves (never its text)."""

    route: Route
    run: Callable[[ConversationActor, Any], Awaitable[None]]
    trace: Callable[[Any], tuple[str, str, str] | None] | None = None


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
        routes: Projects,
        status_cards: StatusCards,
        schedules: Scheduler,
        clock: Callable[[], float],
        reactions: Reactions,
        gate: FeishuGate,
        retry: StoreRetry,
        urgent: UrgentMode | None = None,
        metrics: Metrics | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        self._urgent = urgent or UrgentMode(enabled=True)
        self._schedules = schedules
        self._feishu = feishu
        self._runtime = runtime
        self._store = store
        self._t = translator
        self._cards = cards
        self._runner = runner
        self._switches = switches
        self._status_cards = status_cards
        self.traces = TraceBuffer(store, clock)
        self._answers = Answers(feishu=feishu, store=store, clock=clock, gate=gate, retry=retry)
        self.outbox = Outbox(
            answers=self._answers,
            store=store,
            clock=clock,
            retry=retry,
            metrics=metrics,
            budget=budget,
        )
        self._files = FilesOut(
            feishu=feishu, store=store, routes=routes, answers=self._answers, clock=clock
        )
        self._clock = clock
        self._metrics = metrics
        self.reactions = reactions
        # Several instances: whether this one holds the conversation's lease (a turn starts
        # only then; an unconfirmed one is waited on). One instance alone holds every one.
        self.confirm: Callable[[str], Awaitable[bool]] = _always
        self._retry = retry
        self._asks = Asks(runtime=runtime, store=store, runner=runner, clock=clock)
        self._handlers = self._table()

    async def perform(self, actor: ConversationActor, work: Work) -> None:
        held = actor.end_mark
        # Only what follows the end signal on its own lane comes between it and its turn's
        # end record; the work lane runs beside it (the next turn's start, an Owe).
        its_end = isinstance(work, RecordTerminal) and held is not None and work.turn_id == held[0]
        if held is not None and self.route(work) is Route.SHOWN and not its_end:
            await self._write_held(actor)
        handler = self._handlers.get(type(work))
        if handler is None:
            log.warning("no handler for %s", type(work).__name__)
            return
        await handler.run(actor, work)
        traced = handler.trace(work) if handler.trace is not None else None
        if traced is not None:
            await self._trace(*traced)

    @property
    def handled(self) -> frozenset[type]:
        return frozenset(self._handlers)

    def route(self, work: Work) -> Route:
        """Where `work` goes: back to whoever fed the input, or the shown or work lane."""
        handler = self._handlers.get(type(work))
        return Route.WORK if handler is None else handler.route

    def _table(self) -> dict[type, Handler]:
        """One handler per effect type: adding an effect touches the core and one line here."""
        shown, work, caller = Route.SHOWN, Route.WORK, Route.CALLER
        runtime = self._runtime
        return {
            # What a user sees, through Feishu, and the turn's record, in order.
            React: Handler(shown, self._ack),
            SetReaction: Handler(shown, self._set_reaction),
            PostText: Handler(shown, self._post, _trace_line),
            RelayAgentText: Handler(shown, self._post, _trace_reply),
            EditText: Handler(shown, self._edit_text),
            Owed: Handler(shown, self._replay),
            ShowStatusCard: Handler(shown, self._status_cards.show, _trace_status_card),
            PostApprovalCard: Handler(shown, self._post_card, _trace_card("approval_card")),
            PostQuestion: Handler(shown, self._post_card, _trace_card("question_card")),
            UpdateApprovalCard: Handler(shown, self._update_card),
            UpdateQuestionCard: Handler(shown, self._update_card),
            Urge: Handler(shown, self._urge, _trace_urge),
            SendFile: Handler(shown, self._files.send),
            ShowDiffs: Handler(shown, self._files.diffs),
            RecordTerminal: Handler(shown, self._end_round),
            Trace: Handler(shown, lambda a, w: self._trace(w.turn_id, w.kind, w.detail)),
            # The agent's work and the store's records, never behind an outage.
            MarkMessageDone: Handler(work, self._message_done),
            Owe: Handler(work, self._owe),
            StartTurn: Handler(work, self._start_turn),
            CancelTurn: Handler(work, self._cancel, _trace_cancel),
            AbandonTurn: Handler(work, lambda a, w: runtime.abandon(w.session_id)),
            AnswerPermission: Handler(
                work, lambda a, w: runtime.answer_permission(w.request_id, w.option_id)
            ),
            AnswerQuestion: Handler(
                work, lambda a, w: runtime.answer_question(w.request_id, w.answers)
            ),
            NewSession: Handler(work, lambda a, w: self._runner.leave(a.key, w.reason)),
            AskModes: Handler(work, self._asks.modes),
            AskConfig: Handler(work, self._asks.config),
            AskSwitch: Handler(work, self._switches.switch),
            AskStatus: Handler(work, self._switches.status),
            ManageSchedules: Handler(work, self._schedules.manage),
            AnnounceSchedule: Handler(work, self._schedules.announce),
            ScheduleSkipped: Handler(work, lambda a, w: self._schedules.skipped(w)),
            # Answered by whoever fed the input (the card callback, the turn runner).
            AnswerCallback: Handler(caller, _not_queued),
            SendPrompt: Handler(caller, _not_queued),
            OpenSession: Handler(caller, _not_queued),
        }

    async def _post(self, actor: ConversationActor, work: PostText | RelayAgentText) -> None:
        mark = await self.outbox.post(actor, work, self._text_of(work), fresh=work.fresh)
        self._hold(actor, work.turn_id, mark)
        if self._metrics and isinstance(work, PostText):
            self._metrics.lines.labels(work.key).inc()

    async def _ack(self, actor: ConversationActor, work: React) -> None:
        await self.reactions.ack(work.message_id, terms_of(actor, work).chat)

    async def _set_reaction(self, actor: ConversationActor, work: SetReaction) -> None:
        # Handed over in its place among what the chat is shown (a round's end reaction
        # after its end signal), made on its own: nothing shown waits for it.
        self.reactions.show(work.message_id, terms_of(actor, work).chat, work.state)

    async def _owe(self, actor: ConversationActor, work: Owe) -> None:
        await self._retry.call("owe", partial(self.outbox.record, actor, work.effect))

    async def _replay(self, actor: ConversationActor, work: Owed) -> None:
        """An effect owed before a restart, performed by its own handler. A presence line is
        not worth saying late. An end signal ends its turn with the outcome its terms carry
        (the process that owed it died before it could), so the turn is not reported as
        cut; one given up leaves its turn as it was."""
        effect, idem = work.effect, idempotency_key(work.effect)
        terms = terms_of(actor, effect)
        if terms.presence:
            await self._store.settle(idem)
            return
        handler = self._handlers.get(type(effect))
        if handler is None or handler.route is Route.CALLER:
            log.error("an owed %s cannot be performed again; dropped", type(effect).__name__)
            await self._store.settle(idem)
            return
        actor.owed_at[idem] = work.since  # recorded: its handler must not record it anew
        try:
            await handler.run(actor, effect)
        finally:
            actor.owed_at.pop(idem, None)
        turn_id = turn_of(effect)
        if terms.ends is not None and turn_id is not None:
            held, sent = actor.end_mark, None
            if held is not None and held[0] == turn_id:
                actor.end_mark, sent = None, held[1]
            # Its mark not held: it went out before the restart, or it was given up.
            if sent is not None or await self._store.sent(idem) is not None:
                outcome, now = TurnOutcome(terms.ends.value), self._clock()
                await self._store.end_turn(turn_id, turn_id, outcome, now, sent=sent)
        await self._store.settle(idem)  # sent before the restart after all

    async def _message_done(self, actor: ConversationActor, work: MarkMessageDone) -> None:
        done = partial(
            self._store.set_message_state, work.message_id, MessageState.DONE, self._clock()
        )
        await self._retry.call("message_done", done)

    async def _cancel(self, actor: ConversationActor, work: CancelTurn) -> None:
        # No session yet: the core holds the cancel and never lets the prompt go out.
        if work.session_id is not None:
            await self._runtime.cancel(work.session_id)

    async def _end_round(self, actor: ConversationActor, work: RecordTerminal) -> None:
        held, actor.end_mark = actor.end_mark, None
        sent = held[1] if held is not None else None
        await self._record_terminal(work, sent)
        await self._after_round(actor)

    def _hold(self, actor: ConversationActor, turn_id: str | None, mark: Mark | None) -> None:
        if mark is not None and turn_id is not None:
            actor.end_mark = (turn_id, mark)

    async def _write_held(self, actor: ConversationActor) -> None:
        held, actor.end_mark = actor.end_mark, None
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

    async def _edit_text(self, actor: ConversationActor, work: EditText) -> None:
        text = render(self._t, work.key, work.params)
        ids = await self._store.sent(work.posted_key)
        if not ids:
            return  # never posted (e.g. the bridge restarted before it went out)
        try:
            await self._feishu.edit_text(ids[0], text, terms=CallTerms.of(terms_of(actor, work)))
        except FeishuError as exc:
            log.warning("could not edit a posted line (%s)", exc)

    async def _post_card(
        self, actor: ConversationActor, work: PostApprovalCard | PostQuestion
    ) -> None:
        # The core times a request out only once its card is shown (`Posted`), so it must
        # hear of a card that failed in any way, or the round would wait on it for ever.
        try:
            message_id = await self._show_card(actor, work)
        except Undeliverable:
            log.error("Feishu never took a card within its window; the request is cancelled")
            self._count("not_shown")
            actor.feed(CardNotShown(work.turn_id, work.request_id, given_up=True))
            return
        except Exception:
            log.exception("a card could not be posted; the request is cancelled")
            self._count("not_shown")
            actor.feed(CardNotShown(work.turn_id, work.request_id))
            return
        if message_id is None:
            actor.feed(CardNotShown(work.turn_id, work.request_id))
            return
        # Told first: the user's wait for the card counts from the step this feeds.
        actor.feed(Posted(work.idempotency_key, work.turn_id, (message_id,)))
        mark = partial(self._store.mark_sent, work.idempotency_key, [message_id], self._clock())
        await self._retry.call("mark_sent", mark)
        if isinstance(work, PostApprovalCard):
            save = partial(
                self._store.save_approval,
                work.request_id,
                work.turn_id,
                actor.key,
                message_id,
                work.requester,
                self._clock(),
                title=work.title,
            )
            await self._retry.call("save_approval", save)

    async def _show_card(
        self, actor: ConversationActor, work: PostApprovalCard | PostQuestion
    ) -> str | None:
        """The card, or the plain fallback when Feishu refuses it; None when both fail.
        Raises `Undeliverable` when Feishu never took it within its de-duplication window."""
        reply_to, uuid, terms = work.reply_to, work.idempotency_key, terms_of(actor, work)
        reply = partial(
            self._feishu.reply_card, in_thread=terms.in_thread, terms=CallTerms.of(terms)
        )
        since = self._clock()  # an outage is waited out (delivery.py), a refusal is not
        try:
            post = partial(reply, reply_to, self._cards.open_card(work), uuid=uuid)
            return await self._answers.gate.attempt(post, owed_since=since)
        except BusinessError as exc:
            log.warning("Feishu refused a card (%s); sending the plain fallback", exc.code)
            self._count("fallback")
        try:
            post = partial(reply, reply_to, self._cards.fallback_card(work), uuid=f"{uuid}:plain")
            return await self._answers.gate.attempt(post, owed_since=since)
        except Undeliverable:
            raise  # its window is over too: given up, not refused
        except FeishuError as exc:
            log.error("Feishu refused the plain card too (%s); the request is cancelled", exc)
            self._count("not_shown")
            return None

    def _count(self, fate: str) -> None:
        if self._metrics:
            self._metrics.cards_refused.labels(fate).inc()

    async def _update_card(
        self, actor: ConversationActor, work: UpdateApprovalCard | UpdateQuestionCard
    ) -> None:
        if isinstance(work, UpdateApprovalCard):
            status = approval_status(work)
            resolve = partial(
                self._store.resolve_approval, work.request_id, status, work.by, self._clock()
            )
            await self._retry.call("resolve_approval", resolve)
        if not work.patch:
            return  # the click's callback answer already replaced the card
        message_id = work.message_id
        if message_id is None:
            # Closed before Feishu confirmed it to the core: its post, ahead on this lane,
            # is done by now, and marked under the card's key.
            ids = await self._retry.call("sent", partial(self._store.sent, work.card_key))
            message_id = ids[0] if ids else None
        if message_id is not None:
            card, terms = self._cards.closed_card(work), CallTerms.of(terms_of(actor, work))
            patch = partial(self._feishu.update_card, message_id, card, terms=terms)
            await self._answers.gate.attempt(patch, owed_since=self._clock())

    async def _urge(self, actor: ConversationActor, work: Urge) -> None:
        """Feishu's urgent notification on each card still waiting for an answer when its
        turn comes (one answered since the core decided is left alone: the actor's state is
        read again before each call). Feishu down is waited out (the gate); a refusal is not
        retried: the core hears it (`UrgeRefused`) and @-mentions them instead, and a refusal
        for the scope makes every conversation mention from then on."""

        def answered(request_id: str) -> bool:
            conv = actor.conv
            asking = [a.request_id for a in conv.approvals]
            if conv.question is not None:
                asking.append(conv.question.request_id)
            return request_id not in asking

        waiting = tuple(r for r in work.request_ids if not answered(r))
        if not waiting:
            log.info("urge skipped in %s: the cards were answered meanwhile", actor.key)
            return
        if self._urgent.scope_missing:
            actor.feed(UrgeRefused(work.turn_id, waiting))
            return
        terms = terms_of(actor, work)
        for request_id, message_id in zip(work.request_ids, work.message_ids, strict=True):
            moot = partial(answered, request_id)
            call = partial(
                self._feishu.urgent_app,
                message_id,
                work.open_ids,
                terms=CallTerms.of(terms, moot=moot),
            )
            try:
                invalid = await self._answers.gate.attempt(
                    call, owed_since=self._clock(), moot=moot
                )
            except (Superseded, Undeliverable):
                continue  # answered while Feishu was away, or never reached in time
            except FeishuError as exc:
                if scope_missing(exc):
                    self._urgent.missing()  # said once; every conversation mentions now
                else:
                    # Any other refusal (a Feishu without the API, a message it will not
                    # urge): the people are still reached, by the @-mention line.
                    log.warning("Feishu refused an urgent notification (%s); mentioning", exc)
                actor.feed(UrgeRefused(work.turn_id, waiting))
                return
            if invalid:
                log.info(
                    "%d of %d could not be urged (not in the chat)",
                    len(invalid),
                    len(work.open_ids),
                )

    async def _record_terminal(self, work: RecordTerminal, sent: Mark | None) -> None:
        now = self._clock()
        turn_id, outcome, ending = work.turn_id, work.outcome.value, work.ending.value
        started, detail = work.started_at, work.detail
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
            actor.feed(TurnNotStarted(work.turn_id, NotStartedReason.SHUTTING_DOWN))
            return
        if not await self.confirm(actor.key):
            # Several instances: the lease went to another one, which runs it from the journal.
            log.warning("turn %s not started: %s is not this instance's", work.turn_id, actor.key)
            actor.feed(TurnNotStarted(work.turn_id, NotStartedReason.NOT_OWNER))
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
            actor.feed(TurnBegun(work.turn_id))
            await self.traces.add(work.turn_id, "start", "", now)
        if self._runner.stopping():  # began meanwhile: the next start runs it (never prompted)
            log.info("turn %s not started: the bridge is shutting down", work.turn_id)
            actor.feed(TurnNotStarted(work.turn_id, NotStartedReason.SHUTTING_DOWN))
            return
        self._runner.start(actor, work)


async def _always(key: str) -> bool:
    return True


async def _not_queued(actor: ConversationActor, work: Work) -> None:
    raise AssertionError(f"{type(work).__name__} is answered by whoever fed the input")


# The timeline entry for an effect just performed: what was shown, never its text.
def _trace_line(work: PostText) -> tuple[str, str, str] | None:
    if work.turn_id is None:
        return None
    return work.turn_id, "end" if work.final else "line", work.key


def _trace_reply(work: RelayAgentText) -> tuple[str, str, str] | None:
    if work.turn_id is None:
        return None
    return work.turn_id, "end" if work.final else "reply", f"{len(work.text)} chars"


def _trace_status_card(work: ShowStatusCard) -> tuple[str, str, str] | None:
    if not work.final:
        return None
    kind = "end" if work.view.end_key is None else "status_card"
    return work.turn_id, kind, work.view.phase.value


def _trace_card(kind: str) -> Callable[[PostApprovalCard | PostQuestion], tuple[str, str, str]]:
    return lambda work: (work.turn_id, kind, work.request_id)


def _trace_urge(work: Urge) -> tuple[str, str, str]:
    return work.turn_id, "urge", f"{len(work.open_ids)} people"


def _trace_cancel(work: CancelTurn) -> tuple[str, str, str]:
    return work.turn_id, "cancel", ""
