"""The engine: wires the conversation actors to the intake, the effect executor and the turn
runner, and owns their shared task set.

    intake.py       Feishu inputs → core inputs (messages, refusals, clicks, recovery)
    actor.py        one conversation: `step` the core, queue the effects, perform in order
    executor.py     effects → Feishu calls, store writes, answers to the agent
    turn_runner.py  a turn: slot, session, prompt, runtime events back into the core
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from bridge.clock import Clock, system_random
from bridge.core import Options, Timings
from bridge.core.inputs import SessionCloseRequested, UrgentUnavailable
from bridge.core.state import WAITING_USER_STATES, ExecState, Urgency
from bridge.engine.actor import ConversationActor, Conversations
from bridge.engine.card_views import CardViews
from bridge.engine.executor import EffectExecutor
from bridge.engine.intake import Intake
from bridge.engine.reactions import ReactionEmoji, Reactions
from bridge.engine.status_cards import StatusCards
from bridge.engine.switches import Switches
from bridge.engine.turn_runner import SessionEnded, TurnRunner
from bridge.engine.urgency import UrgentMode
from bridge.feishu.api import FeishuApi
from bridge.feishu.budget import CallBudget
from bridge.feishu.delivery import DeliveryPolicy, FeishuGate
from bridge.feishu.events import CardAction, CardActionReply, InboundMessage, MenuClick
from bridge.i18n import Translator
from bridge.media.attachments import Attachments
from bridge.media.voice import SpeechApi, Voice, VoiceMode
from bridge.ops.metrics import Metrics
from bridge.runtime.port import AgentRuntime
from bridge.runtime.router import Projects, Routes
from bridge.schedules.scheduler import Claims, Scheduler, ScheduleSettings
from bridge.store.port import JournaledMessage, Store
from bridge.store.steady import StoreRetry
from bridge.tasks import TaskTracker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    timings: Timings
    options: Options
    ack_emoji: str  # the received state's reaction
    max_running_turns: int
    card_interval: float = 0.5  # least seconds between two changes of one status card
    # The agents and workspaces a conversation may move between (/agent, /cd).
    # The projects a conversation may work on (a single `Routes`: one, unnamed).
    routes: Routes | Projects = field(default_factory=Routes.single)
    attachments_dir: Path | None = None  # where a turn's images and files wait (None: none)
    max_attachment_mb: int = 20
    voice: str | None = None  # BRIDGE_VOICE (None: transcribe when Feishu grants it)
    voice_max_seconds: int = 300
    schedules: ScheduleSettings = field(default_factory=ScheduleSettings)
    delivery: DeliveryPolicy = field(default_factory=DeliveryPolicy)  # through an outage
    # The other states' reactions (received: `ack_emoji`).
    reaction_emoji: ReactionEmoji = field(default_factory=ReactionEmoji)
    store_retry: StoreRetry = field(default_factory=StoreRetry)  # a turn's store calls, likewise
    app: str = ""  # the app's name in log lines, when the bridge serves several


class Engine:
    def __init__(
        self,
        *,
        feishu: FeishuApi,
        runtime: AgentRuntime,
        store: Store,
        translator: Translator,
        config: EngineConfig,
        clock: Clock,
        publish: Callable[[str, dict[str, object]], object],
        metrics: Metrics | None = None,
        session_ended: SessionEnded | None = None,
        rng: random.Random | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        self._tasks = TaskTracker("engine")
        self.budget = budget  # the app's Feishu call budget (for /status)
        now = clock.now
        # Feishu's health as the posts find it: one gate for the app (delivery.py).
        self.gate = FeishuGate(now, rng or system_random(), config.delivery, config.app)
        if metrics is not None:
            metrics.watch_feishu(self.gate.state)
        cards = CardViews(translator, requester_may_approve=config.options.requester_may_approve)
        self._feishu = feishu
        self.urgent_mode = UrgentMode(
            config.options.urgency is not Urgency.OFF, on_missing=self._urgent_unavailable
        )
        speech = self._speech = feishu if isinstance(feishu, SpeechApi) else None
        self.voice_mode = VoiceMode(config.voice if speech is not None else "file")
        attachments = (
            Attachments(
                feishu=feishu, folder=config.attachments_dir, max_mb=config.max_attachment_mb
            )
            if config.attachments_dir is not None
            else None
        )
        self.runner = runner = TurnRunner(
            runtime=runtime,
            store=store,
            retry=config.store_retry,
            clock=now,
            tasks=self._tasks,
            max_running_turns=config.max_running_turns,
            attachments=attachments,
            metrics=metrics,
            session_ended=session_ended,
            cancel_limit=config.timings.cancel_limit,
            voice=Voice(
                feishu=speech,
                folders=attachments,
                max_seconds=config.voice_max_seconds,
                max_mb=config.max_attachment_mb,
            )
            if speech is not None and attachments is not None
            else None,
        )
        status_cards = StatusCards(
            feishu=feishu,
            store=store,
            translator=translator,
            clock=now,
            tasks=self._tasks,
            interval=config.card_interval,
            gate=self.gate,
            retry=config.store_retry,
            metrics=metrics,
            budget=budget,
        )
        self.schedules = Scheduler(
            store=store,
            feishu=feishu,
            translator=translator,
            clock=clock,
            settings=config.schedules,
            gate=self.gate,
            metrics=metrics,
            retry=config.store_retry,
        )
        routes = config.routes
        projects = routes if isinstance(routes, Projects) else Projects.single(routes)
        self.executor = EffectExecutor(
            feishu=feishu,
            runtime=runtime,
            store=store,
            translator=translator,
            cards=cards,
            runner=runner,
            switches=Switches(
                routes=projects, runtime=runtime, store=store, runner=runner, clock=now
            ),
            routes=projects,
            status_cards=status_cards,
            schedules=self.schedules,
            clock=now,
            reactions=Reactions(
                feishu=feishu,
                gate=self.gate,
                emoji=replace(config.reaction_emoji, received=config.ack_emoji),
                tasks=self._tasks,
                budget=budget,
            ),
            gate=self.gate,
            retry=config.store_retry,
            urgent=self.urgent_mode,
            metrics=metrics,
            budget=budget,
        )
        self._conversations = Conversations(
            options=config.options,
            timings=config.timings,
            clock=clock,
            perform=self.executor.perform,
            route=self.executor.route,
            watchers=(publish, self.schedules.on_snapshot),
            tasks=self._tasks,
        )
        self.schedules.bind(self._conversations)
        self._store = store
        self.intake = Intake(
            conversations=self._conversations,
            store=store,
            feishu=feishu,
            translator=translator,
            cards=cards,
            clock=now,
            tasks=self._tasks,
        )

    @property
    def conversations(self) -> dict[str, ConversationActor]:
        return self._conversations.by_key()

    # The receiver's MessageSink, answered by the intake.
    def accept(self, message: InboundMessage) -> None:
        self.intake.accept(message)

    def refuse(self, message: InboundMessage) -> None:
        self.intake.refuse(message)

    async def card_action(self, action: CardAction) -> CardActionReply:
        return await self.intake.card_action(action)

    def recall(self, conversation_key: str, message_id: str) -> None:
        self.intake.recall(conversation_key, message_id)

    def menu(self, click: MenuClick, chat_id: str | None, admitted: bool) -> None:
        self.intake.menu(click, chat_id, admitted)

    # Several instances (cluster/ownership.py): what the conversation's owner asks.
    def share(
        self,
        owner: Claims,
        confirm: Callable[[str], Awaitable[bool]],
        forward: Callable[[CardAction], Awaitable[CardActionReply | None]],
    ) -> None:
        """Clicks on another instance's cards go to it (`forward`); a turn starts and its
        prompt goes out only while `confirm` says the lease is ours; schedules run where
        `owner` holds their conversation."""
        self.intake.forward = forward
        self.executor.confirm = confirm
        self.runner.confirm = confirm
        self.schedules.owner = owner

    def accept_journaled(self, message: JournaledMessage) -> None:
        self.intake.accept_journaled(message)

    async def take_over(
        self, key: str, fresh: Mapping[str, InboundMessage], leftovers: Collection[str]
    ) -> list[str]:
        return await self.intake.take_over(key, fresh, leftovers)

    async def local_card_action(self, action: CardAction) -> CardActionReply | None:
        return await self.intake.local_card_action(action)

    async def reload_schedules(self, key: str) -> None:
        await self.schedules.reload(key)

    async def close_session(self, key: str) -> bool:
        """The operator ends the conversation's agent session, like /new without a chat
        line; False (nothing done) while a round runs or messages wait for one."""
        actor = self._conversations.get(key)
        if actor.conv.state is not ExecState.IDLE or actor.conv.queue:
            return False
        actor.feed(SessionCloseRequested())
        await actor.wait_idle()  # unbound when this returns
        return True

    def forget(self, key: str) -> None:
        """Several instances: another one runs the conversation now. Its turn here is cut
        without a word (the new owner tells the user) and its actor forgotten."""
        actor = self._conversations.drop(key)
        if actor is None:
            return
        actor.close()
        if actor.conv.turn is not None:
            self._tasks.cancel({f"turn:{actor.conv.turn.turn_id}"})

    async def recover(self, before: float) -> None:
        await self.intake.recover(before)

    def probe_voice(self) -> None:
        """Asks Feishu, in the background, whether it will recognize speech (start-up; said
        plainly in the log); a voice that comes before the answer is heard (the default)."""
        if self._speech is not None:
            self._tasks.spawn(self.voice_mode.probe(self._speech), name="voice-probe")

    def probe_urgent(self) -> None:
        """Asks Feishu, in the background, whether it will send urgent notifications
        (start-up; said plainly in the log when the scope is missing)."""
        self._tasks.spawn(self.urgent_mode.probe(self._feishu), name="urgent-probe")

    def _urgent_unavailable(self) -> None:
        # Every conversation, and each one made from now on, urges by @-mention.
        options = self._conversations.options
        if options.urgency is Urgency.APP:
            self._conversations.options = replace(options, urgency=Urgency.MENTION)
        for actor in self._conversations:
            actor.feed(UrgentUnavailable())

    async def start_schedules(self) -> None:
        """Load the scheduled prompts and start their clock (after `recover`)."""
        await self.schedules.start()

    async def drain(self, grace: float) -> None:
        """Let running turns finish within `grace`; a turn waiting for a person cannot, so it
        is cut at once (its card is expired and its user told at the next start)."""
        waiting = {
            f"turn:{actor.conv.turn.turn_id}"
            for actor in self._conversations
            if actor.conv.turn is not None and actor.conv.state in WAITING_USER_STATES
        }
        self._tasks.cancel(waiting)
        self.schedules.close()
        for actor in self._conversations:
            actor.close()
        await self._tasks.drain(grace)
        await self.executor.traces.close()

    async def wait_idle(self) -> None:
        """Until every actor has performed what it was given, and every reaction change it
        handed over is made (tests and shutdown)."""
        await self._conversations.wait_idle()
        await self.executor.reactions.wait_idle()


__all__ = ["Engine", "EngineConfig"]
