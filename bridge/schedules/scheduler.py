"""Scheduled prompts (/every, /at, BRIDGE_SCHEDULES): the clock that makes them due, the
store that keeps them, and the effects the core asks of them.

When a schedule is due the conversation's core decides (its gate reads the execution state,
core/schedules.py): the run is announced, or skipped with a reason. A skipped schedule stays
due and is tried again when the conversation's snapshot next says idle (and, as a safety
net, every `retry` seconds); occurrences that pass meanwhile are skipped, not stacked: one
run, then the next occurrence at least half a period after it (core/schedules.py,
`following`). A restart finds due schedules in the store and runs each once.

A slot runs at most once: an announced run is in flight until the cache holds the
next slot, and the store records each slot once (`note_schedule_run` is conditional).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from functools import partial
from typing import Protocol
from zoneinfo import ZoneInfo

from bridge.clock import Cancellable, Clock
from bridge.config.schedules import SchedulesSection
from bridge.core.delivery import Lane, chat_of, plain_terms, where
from bridge.core.effects import AnnounceSchedule, Effect, ManageSchedules, ScheduleSkipped
from bridge.core.inputs import (
    CommandName,
    CoreEvent,
    ScheduleAnswered,
    ScheduledRun,
    ScheduleDue,
    ScheduleResult,
)
from bridge.core.schedules import (
    following,
    format_interval,
    parse_interval,
    split_request,
)
from bridge.feishu.api import FeishuApi
from bridge.feishu.delivery import FeishuGate
from bridge.feishu.requests import CallTerms
from bridge.feishu.text import neutralize_mentions
from bridge.i18n import Translator
from bridge.ops.metrics import Metrics
from bridge.schedules.texts import ScheduleTexts
from bridge.schedules.times import parse_at
from bridge.store.port import Schedule, ScheduleKind, Store
from bridge.store.steady import StoreRetry

log = logging.getLogger(__name__)

MAX_PER_CONVERSATION = 20


@dataclass(frozen=True)
class ConfiguredSchedule:
    """One entry of BRIDGE_SCHEDULES: a repeating (`every`, seconds) or one-time (`at`, epoch
    seconds) prompt an operator set for a chat."""

    chat_id: str
    prompt: str = field(repr=False)
    every: float | None = None
    at: float | None = None

    @property
    def key(self) -> str:
        """Stable across restarts while the entry is unchanged (its store record's key)."""
        raw = json.dumps([self.chat_id, self.every, self.at, self.prompt], ensure_ascii=False)
        return "cfg:" + hashlib.sha256(raw.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class ScheduleSettings:
    min_interval: float = 60.0  # the shortest /every a user may ask for
    zone: tzinfo | None = None  # wall-clock times (/at 09:30, lists); None: the host's
    configured: tuple[ConfiguredSchedule, ...] = ()
    retry: float | None = None  # re-check a skipped schedule this often (None: min_interval)

    @classmethod
    def from_settings(cls, settings: SchedulesSection) -> ScheduleSettings:
        zone = ZoneInfo(settings.bridge_timezone) if settings.bridge_timezone else None
        configured = []
        for entry in settings.bridge_schedules:
            at = None
            if entry.at is not None:
                when = datetime.fromisoformat(entry.at)
                if when.tzinfo is None:
                    when = when.replace(tzinfo=zone) if zone else when.astimezone()
                at = when.timestamp()
            every = entry.every_seconds
            configured.append(ConfiguredSchedule(entry.chat_id, entry.prompt, every, at))
        return cls(
            min_interval=settings.bridge_schedule_min_interval_seconds,
            zone=zone,
            configured=tuple(configured),
        )


@dataclass(frozen=True)
class _Run:
    slot: float  # the occurrence an announced run takes
    following: float | None  # the next one (None: a one-time schedule, removed)


class ConversationActor(Protocol):
    """A conversation as the scheduler drives it: fed its inputs, known by its key."""

    @property
    def key(self) -> str: ...

    def feed(self, event: CoreEvent) -> list[Effect]: ...


class Conversations(Protocol):
    """The engine's live conversations, which the composition root hands over."""

    def get(self, key: str) -> ConversationActor: ...


class Claims(Protocol):
    """Which conversations this instance runs (several instances: `Ownership`)."""

    def holds(self, key: str) -> bool: ...

    def kick(self, key: str, *, takeover: bool = False) -> None: ...


class Scheduler:
    def __init__(
        self,
        *,
        store: Store,
        feishu: FeishuApi,
        translator: Translator,
        clock: Clock,
        settings: ScheduleSettings,
        gate: FeishuGate | None = None,
        metrics: Metrics | None = None,
        retry: StoreRetry | None = None,
    ) -> None:
        self._store = store
        # Through a database outage each call is tried again (every one is safe twice: an
        # added schedule is found by its command's message before it is added again).
        self._retry = retry or StoreRetry()
        self._feishu = feishu
        self._t = translator
        self._texts = ScheduleTexts(translator, settings.zone, clock.wall)
        # Slots are wall-clock times (/at 09:30); the wake-up is asked of the clock port,
        # and `check` re-arms a wake-up that comes before its slot.
        self._clock = clock.wall
        self._wake = clock
        self._settings = settings
        self._gate = gate  # while Feishu is down a due run waits (its header could not go)
        self._metrics = metrics
        self._conversations: Conversations | None = None
        self._cache: dict[int, Schedule] = {}  # every live schedule, as the store holds it
        self._next: dict[int, _Run] = {}  # announced runs, in flight until recorded
        self._timer: Cancellable | None = None
        self._poked = False
        self._started = False
        # Several instances: only the conversation's owner runs its schedules.
        self.owner: Claims | None = None

    def bind(self, conversations: Conversations) -> None:
        self._conversations = conversations

    # -- the clock -------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the schedules (adding the configured ones, dropping configured ones no longer
        configured) and arm the clock. A schedule that came due while the bridge was down
        is due now: it runs once, at the conversation's first idle moment."""
        now = self._clock()
        wanted = {c.key: c for c in self._settings.configured}
        for known in await self._of():
            if known.config_key and known.config_key not in wanted:
                await self._retry.call(
                    "remove_schedule", partial(self._store.remove_schedule, known.schedule_id)
                )
        for key, entry in wanted.items():
            await self._add_configured(key, entry, now)
        self._cache = {s.schedule_id: s for s in await self._of()}
        self._started = True
        self.check()

    async def _add_configured(self, key: str, entry: ConfiguredSchedule, now: float) -> None:
        if entry.every is not None:
            kind, due = ScheduleKind.EVERY, now + entry.every
        elif entry.at is not None and entry.at > now:
            kind, due = ScheduleKind.AT, entry.at
        else:
            return  # a one-time schedule already past (it ran, or was set for the past)
        add = partial(
            self._store.add_schedule,
            entry.chat_id, entry.chat_id, "", kind, entry.every, entry.prompt, due, now,
            config_key=key,
        )  # fmt: skip
        await self._retry.call("add_schedule", add)  # a configured key is added once

    def close(self) -> None:
        self._started = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def check(self) -> None:
        """Try every due schedule (in number order), then arm the clock for the next (a
        wake-up before a slot, the loop's time not being the wall clock, only re-arms)."""
        self._poked = False
        if not self._started:
            return
        now = self._clock()
        for schedule in sorted(self._cache.values(), key=lambda s: s.schedule_id):
            if schedule.next_due_at <= now and schedule.schedule_id not in self._next:
                self._try(schedule, now)
        self._arm(now)

    def _arm(self, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting = [s.next_due_at for s in self._cache.values() if s.schedule_id not in self._next]
        if not waiting:
            return
        retry = self._settings.retry or self._settings.min_interval
        at = min(due if due > now else now + retry for due in waiting)
        self._timer = self._wake.call_at(self._wake.now() + max(0.0, at - now), self.check)

    def on_snapshot(self, key: str, snapshot: dict[str, object]) -> None:
        """A conversation's state changed: when it is idle and owes a due schedule, try
        soon (not inside the step that published it)."""
        if self._poked or snapshot.get("phase") != "idle":
            return
        now = self._clock()
        if any(
            s.conversation_key == key and s.next_due_at <= now and s.schedule_id not in self._next
            for s in self._cache.values()
        ):
            self._poked = True
            asyncio.get_running_loop().call_soon(self.check)

    async def reload(self, key: str) -> None:
        """Several instances: this one just took the conversation over; its schedules as
        the store holds them now (the last owner may have run or added some)."""
        for sid in [sid for sid, s in self._cache.items() if s.conversation_key == key]:
            del self._cache[sid]
        self._cache.update({s.schedule_id: s for s in await self._of(key)})
        if self._started:
            self.check()

    def _try(self, schedule: Schedule, now: float) -> None:
        assert self._conversations is not None, "bind() first"
        if self.owner is not None and not self.owner.holds(schedule.conversation_key):
            self.owner.kick(schedule.conversation_key)  # claimed when nobody runs it
            return
        if self._gate is not None and self._gate.down:
            return
        actor = self._conversations.get(schedule.conversation_key)
        effects = actor.feed(
            ScheduleDue(schedule.schedule_id, schedule.creator_open_id, schedule.prompt)
        )
        if any(isinstance(e, AnnounceSchedule) for e in effects):
            # Decided: from now on the run is in flight; nothing fires it a second time.
            every, slot = schedule.every_seconds, schedule.next_due_at
            after = following(slot, every, now) if every is not None else None
            self._next[schedule.schedule_id] = _Run(slot, after)

    # -- effects -----------------------------------------------------------------------------

    async def announce(self, actor: ConversationActor, work: AnnounceSchedule) -> None:
        """Record the run first (a crash after it loses one run, never posts two), then the
        header, then the run itself as a turn answering the header."""
        sid = work.schedule_id
        run, schedule = self._next.get(sid), self._cache.get(sid)
        now = self._clock()
        try:
            if run is None or schedule is None or not await self._record(sid, run, now):
                log.info("schedule %d: its run was removed or already recorded", sid)
                return
        finally:
            # In flight until the cache holds the next slot (or, failing, still this one).
            self._next.pop(sid, None)
            self._arm(self._clock())
        self._count("ran")
        log.info("schedule %d runs in %s", sid, actor.key)
        text = neutralize_mentions(self._t(work.key, **dict(work.params)))
        idem = f"schedule:{sid}:{run.slot:.3f}"
        terms = CallTerms.of(plain_terms(Lane.ANSWER, actor.key))  # metered as its chat's
        if where(actor.key)[1] and schedule.anchor_message_id:  # a topic thread: answer in it
            ids = await self._feishu.reply_text(
                schedule.anchor_message_id, text, uuid=idem, in_thread=True, terms=terms
            )
        else:
            ids = await self._feishu.send_text(schedule.chat_id, text, uuid=idem, terms=terms)
        await self._retry.call("mark_sent", partial(self._store.mark_sent, idem, ids, now))
        actor.feed(ScheduledRun(ids[0], sid, work.requester, work.prompt))

    async def _record(self, sid: int, run: _Run, now: float) -> bool:
        """Take the slot in the store; False if it was not there to take."""
        # Tried again after a failure that may have committed, the slot is found taken: that
        # run is lost, never posted twice (as after a crash).
        if run.following is None:
            taken = await self._retry.call(
                "remove_schedule", partial(self._store.remove_schedule, sid)
            )
            self._cache.pop(sid, None)
            return taken
        note = partial(self._store.note_schedule_run, sid, run.slot, now, run.following)
        taken = await self._retry.call("note_schedule_run", note)
        known = (
            self._cache.get(sid)
            if taken
            else await self._retry.call("schedule", partial(self._store.schedule, sid))
        )
        if known is None:  # removed meanwhile
            self._cache.pop(sid, None)
        elif taken:
            self._cache[sid] = replace(known, last_run_at=now, next_due_at=run.following)
        else:  # another writer ran this slot: the schedule as the store holds it now
            self._cache[sid] = known
        return taken

    async def _of(self, key: str | None = None) -> list[Schedule]:
        """The conversation's schedules (every one without a key), through an outage."""
        return await self._retry.call("schedules", partial(self._store.schedules, key))

    async def skipped(self, work: ScheduleSkipped) -> None:
        now = self._clock()
        skip = partial(self._store.note_schedule_skip, work.schedule_id, work.reason, now)
        await self._retry.call("note_schedule_skip", skip)
        known = self._cache.get(work.schedule_id)
        if known is not None:
            self._cache[work.schedule_id] = replace(
                known, last_skip_at=now, last_skip_reason=work.reason
            )
        self._count(f"skipped_{work.reason}")
        log.info("schedule %d skipped: %s", work.schedule_id, work.reason)

    def _count(self, fate: str) -> None:
        if self._metrics is not None:
            self._metrics.schedule_runs.labels(fate).inc()

    async def manage(self, actor: ConversationActor, work: ManageSchedules) -> None:
        result, params = await self._manage(actor, work)
        actor.feed(ScheduleAnswered(work.message_id, result, tuple(params.items())))

    async def _manage(
        self, actor: ConversationActor, work: ManageSchedules
    ) -> tuple[ScheduleResult, dict[str, str | int]]:
        match work.command:
            case CommandName.SCHEDULES.value:
                return self._texts.listing(await self._of(actor.key), self._clock())
            case CommandName.UNSCHEDULE.value:
                return await self._unschedule(actor, work)
            case _:
                return await self._add(actor, work)

    async def _add(
        self, actor: ConversationActor, work: ManageSchedules
    ) -> tuple[ScheduleResult, dict[str, str | int]]:
        now = self._clock()
        when, prompt = split_request(work.arg)
        if not when or not prompt:
            return ScheduleResult.NO_PROMPT, {}
        every: float | None = None
        if work.command == CommandName.EVERY.value:
            every = parse_interval(when)
            if every is None:
                return ScheduleResult.BAD_INTERVAL, {"interval": when}
            if every < self._settings.min_interval:
                return ScheduleResult.TOO_SHORT, {
                    "minimum": format_interval(self._settings.min_interval)
                }
            kind, due = ScheduleKind.EVERY, now + every
        else:
            at = parse_at(when, now, self._texts.zone())
            if at is None:
                return ScheduleResult.BAD_TIME, {"time": when, "zone": self._texts.zone_name()}
            kind, due = ScheduleKind.AT, at
        if len(await self._of(actor.key)) >= MAX_PER_CONVERSATION:
            return ScheduleResult.TOO_MANY, {"limit": MAX_PER_CONVERSATION}

        async def add() -> Schedule | None:
            # A try that failed may have committed: the command's message finds it.
            for known in await self._store.schedules(actor.key):
                if known.anchor_message_id == work.message_id:
                    return known
            return await self._store.add_schedule(
                actor.key,
                chat_of(actor.key),
                work.sender,
                kind,
                every,
                prompt,
                due,
                now,
                anchor_message_id=work.message_id,
            )

        made = await self._retry.call("add_schedule", add)
        assert made is not None, "only a configured schedule can collide"
        self._cache[made.schedule_id] = made
        self._arm(now)
        return ScheduleResult.ADDED, {
            "number": made.schedule_id,
            "when": self._texts.when(made),
            "next": self._texts.time(made.next_due_at),
        }

    async def _unschedule(
        self, actor: ConversationActor, work: ManageSchedules
    ) -> tuple[ScheduleResult, dict[str, str | int]]:
        number = work.arg.strip().lstrip("#")
        if not number.isdigit():
            return ScheduleResult.UNSCHEDULE_USAGE, {}
        found = await self._retry.call("schedule", partial(self._store.schedule, int(number)))
        if found is None or found.conversation_key != actor.key:
            return ScheduleResult.NOT_FOUND, {"number": number}
        params: dict[str, str | int] = {"number": found.schedule_id}
        if found.config_key:
            return ScheduleResult.CONFIGURED, params
        if found.creator_open_id != work.sender and not work.manage_all:
            return ScheduleResult.NOT_YOURS, params
        await self._retry.call(
            "remove_schedule", partial(self._store.remove_schedule, found.schedule_id)
        )
        self._cache.pop(found.schedule_id, None)
        self._next.pop(found.schedule_id, None)
        return ScheduleResult.REMOVED, params

    # -- texts -------------------------------------------------------------------------------
