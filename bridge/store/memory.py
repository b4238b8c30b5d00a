"""`MemoryStore`: the in-process fake of the `Store` port, for unit tests of other modules.

Same semantics as `SqliteStore` (the same test suite runs against both): first-wins claims,
first terminal wins, arrival order, `UnknownTurn`, cascading prune, `StoreClosed` outside
`open()`/`close()`. The data lives in the instance and survives `close()` + `open()`, so a
test can simulate a bridge restart by closing and reopening the same object.

Every method completes without awaiting anything, so each call is atomic on the event loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bridge.store.port import (
    DEFAULT_RETENTION_SECONDS,
    MESSAGE_TRANSITIONS,
    Approval,
    ApprovalStatus,
    AsyncLifecycle,
    JournaledMessage,
    MessageState,
    Schedule,
    ScheduleKind,
    SessionRecord,
    Store,
    StoreClosed,
    TraceEntry,
    TraceRecord,
    TurnOutcome,
    TurnRecord,
    UnknownTurn,
)
from bridge.store.port_cluster import InstanceRecord, Lease, UnownedConversation
from bridge.store.port_owed import OwedPost


class MemoryStore(AsyncLifecycle):
    def __init__(self, *, retention_seconds: float = DEFAULT_RETENTION_SECONDS) -> None:
        self.retention_seconds = retention_seconds
        self._open = False
        self._events: dict[str, float] = {}  # event id -> seen at
        self._event_messages: dict[str, str] = {}  # message id -> event id
        self._messages: dict[str, JournaledMessage] = {}  # insertion order == arrival order
        self._preferences: dict[str, dict[str, str]] = {}
        self._sessions: dict[tuple[str, str], SessionRecord] = {}
        self._bindings: dict[str, str] = {}
        self._p2p_chats: dict[str, str] = {}  # open id -> private chat id
        self._turns: dict[str, TurnRecord] = {}
        self._traces: dict[str, list[TraceEntry]] = {}
        self._approvals: dict[str, Approval] = {}
        self._outbox: dict[str, tuple[tuple[str, ...], float]] = {}
        self._schedules: dict[int, Schedule] = {}
        # key -> (owner or None when released, fence, expires_at); rows are never deleted
        self._leases: dict[str, tuple[str | None, int, float]] = {}
        self._instances: dict[str, InstanceRecord] = {}
        self._owed: dict[str, OwedPost] = {}
        self._message_seq = 0
        self._trace_seq = 0
        self._schedule_seq = 0
        self._owed_seq = 0

    def __repr__(self) -> str:
        return f"MemoryStore({'open' if self._open else 'closed'})"

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    def _check(self) -> None:
        if not self._open:
            raise StoreClosed(f"{self!r} is not open")

    # -- 1. inbound dedup --------------------------------------------------------------------

    async def claim_event(self, event_id: str, message_id: str | None, now: float) -> bool:
        self._check()
        if event_id in self._events:
            return False
        if message_id is not None and message_id in self._event_messages:
            return False
        self._events[event_id] = now
        if message_id is not None:
            self._event_messages[message_id] = event_id
        return True

    # -- 2. inbound journal ------------------------------------------------------------------

    async def journal_message(
        self,
        conversation_key: str,
        message_id: str,
        sender_open_id: str,
        chat_id: str,
        text: str,
        now: float,
        attachments: str = "",
    ) -> bool:
        self._check()
        if message_id in self._messages:
            return False
        self._message_seq += 1
        self._messages[message_id] = JournaledMessage(
            seq=self._message_seq,
            message_id=message_id,
            conversation_key=conversation_key,
            sender_open_id=sender_open_id,
            chat_id=chat_id,
            text=text,
            state=MessageState.QUEUED,
            received_at=now,
            updated_at=now,
            attachments=attachments,
        )
        return True

    async def set_message_state(self, message_id: str, state: MessageState, now: float) -> bool:
        self._check()
        state = MessageState(state)
        current = self._messages.get(message_id)
        if current is None or current.state not in MESSAGE_TRANSITIONS[state]:
            return False
        self._messages[message_id] = replace(current, state=state, updated_at=now)
        return True

    async def take_messages(self, message_ids: Sequence[str], fence: int) -> None:
        self._check()
        for message_id in message_ids:
            message = self._messages.get(message_id)
            if message is not None and message.taken < fence:
                self._messages[message_id] = replace(message, taken=fence)

    async def interrupt_running_messages(self, now: float) -> int:
        self._check()
        running = [m for m in self._messages.values() if m.state is MessageState.RUNNING]
        for m in running:
            self._messages[m.message_id] = replace(
                m, state=MessageState.INTERRUPTED, updated_at=now
            )
        return len(running)

    async def message(self, message_id: str) -> JournaledMessage | None:
        self._check()
        return self._messages.get(message_id)

    async def pending_messages(self, conversation_key: str) -> list[JournaledMessage]:
        return [
            m for m in await self.unfinished_messages() if m.conversation_key == conversation_key
        ]

    async def unfinished_messages(self) -> list[JournaledMessage]:
        self._check()
        return sorted(
            (m for m in self._messages.values() if m.state is not MessageState.DONE),
            key=lambda m: m.seq,
        )

    # -- a user's private chat with the bot --------------------------------------------------

    async def remember_p2p_chat(self, open_id: str, chat_id: str, now: float) -> None:
        self._check()
        self._p2p_chats[open_id] = chat_id

    async def p2p_chat(self, open_id: str) -> str | None:
        self._check()
        return self._p2p_chats.get(open_id)

    # -- 3. session bindings -----------------------------------------------------------------

    async def bind_session(self, conversation_key: str, session_id: str, now: float) -> None:
        self._check()
        self._bindings[conversation_key] = session_id

    async def session_for(self, conversation_key: str) -> str | None:
        self._check()
        return self._bindings.get(conversation_key)

    async def unbind(self, conversation_key: str) -> bool:
        self._check()
        return self._bindings.pop(conversation_key, None) is not None

    # -- 4. turns ----------------------------------------------------------------------------

    async def start_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        self._check()
        if turn_id in self._turns:
            return False
        self._turns[turn_id] = TurnRecord(
            turn_id=turn_id,
            conversation_key=conversation_key,
            message_id=message_id,
            started_at=now,
            outcome=None,
            finished_at=None,
        )
        return True

    async def finish_turn(self, turn_id: str, outcome: TurnOutcome, now: float) -> bool:
        self._check()
        outcome = TurnOutcome(outcome)
        current = self._turns.get(turn_id)
        if current is None or current.outcome is not None:
            return False
        self._turns[turn_id] = replace(current, outcome=outcome, finished_at=now)
        return True

    async def begin_turn(
        self, turn_id: str, conversation_key: str, message_id: str, now: float
    ) -> bool:
        started = await self.start_turn(turn_id, conversation_key, message_id, now)
        await self.set_message_state(message_id, MessageState.RUNNING, now)
        return started

    async def end_turn(
        self,
        turn_id: str,
        message_id: str,
        outcome: TurnOutcome,
        now: float,
        *,
        sent: tuple[str, Sequence[str]] | None = None,
    ) -> bool:
        if sent is not None:
            await self.mark_sent(sent[0], sent[1], now)
        finished = await self.finish_turn(turn_id, outcome, now)
        await self.set_message_state(message_id, MessageState.DONE, now)
        return finished

    async def mark_prompted(self, turn_id: str, now: float) -> bool:
        self._check()
        current = self._turns.get(turn_id)
        if current is None or current.prompted_at is not None:
            return False
        self._turns[turn_id] = replace(current, prompted_at=now)
        return True

    async def turn(self, turn_id: str) -> TurnRecord | None:
        self._check()
        return self._turns.get(turn_id)

    async def running_turns(self) -> list[TurnRecord]:
        self._check()
        return [t for t in self._turns.values() if t.outcome is None]

    # -- 5. trace timeline -------------------------------------------------------------------

    async def trace(self, turn_id: str, kind: str, detail: str, now: float) -> None:
        self._check()
        if turn_id not in self._turns:
            raise UnknownTurn(turn_id)
        self._trace_seq += 1
        self._traces.setdefault(turn_id, []).append(
            TraceEntry(seq=self._trace_seq, turn_id=turn_id, kind=kind, detail=detail, at=now)
        )

    async def trace_many(self, records: Sequence[TraceRecord]) -> None:
        self._check()
        for turn_id, kind, detail, at in records:
            if turn_id in self._turns:
                await self.trace(turn_id, kind, detail, at)

    async def trace_for(self, turn_id: str) -> list[TraceEntry]:
        self._check()
        return list(self._traces.get(turn_id, ()))

    # -- 6. approvals ------------------------------------------------------------------------

    async def save_approval(
        self,
        request_id: str,
        turn_id: str,
        conversation_key: str,
        card_message_id: str,
        requester_open_id: str,
        now: float,
        title: str = "",
    ) -> bool:
        self._check()
        if request_id in self._approvals:
            return False
        if turn_id not in self._turns:
            raise UnknownTurn(turn_id)
        self._approvals[request_id] = Approval(
            request_id=request_id,
            turn_id=turn_id,
            conversation_key=conversation_key,
            card_message_id=card_message_id,
            requester_open_id=requester_open_id,
            created_at=now,
            status=ApprovalStatus.OPEN,
            decided_by=None,
            decided_at=None,
            title=title,
        )
        return True

    async def resolve_approval(
        self, request_id: str, status: ApprovalStatus, decided_by: str | None, now: float
    ) -> bool:
        self._check()
        status = ApprovalStatus(status)
        if status is ApprovalStatus.OPEN:
            raise ValueError("an approval cannot be resolved to 'open'")
        current = self._approvals.get(request_id)
        if current is None or current.status is not ApprovalStatus.OPEN:
            return False
        self._approvals[request_id] = replace(
            current, status=status, decided_by=decided_by, decided_at=now
        )
        return True

    async def approval(self, request_id: str) -> Approval | None:
        self._check()
        return self._approvals.get(request_id)

    async def open_approvals(self) -> list[Approval]:
        self._check()
        return [a for a in self._approvals.values() if a.status is ApprovalStatus.OPEN]

    # -- 7. outbox marks ---------------------------------------------------------------------

    async def mark_sent(self, idempotency_key: str, message_ids: Sequence[str], now: float) -> bool:
        self._check()
        if idempotency_key in self._outbox:
            return False
        self._outbox[idempotency_key] = (tuple(str(m) for m in message_ids), now)
        self._owed.pop(idempotency_key, None)  # the mark settles its post
        return True

    async def sent(self, idempotency_key: str) -> list[str] | None:
        self._check()
        entry = self._outbox.get(idempotency_key)
        return None if entry is None else list(entry[0])

    # -- what a conversation chose and had ---------------------------------------------------

    async def set_preference(
        self, conversation_key: str, name: str, value: str, now: float
    ) -> None:
        self._check()
        self._preferences.setdefault(conversation_key, {})[name] = value

    async def preferences(self, conversation_key: str) -> dict[str, str]:
        self._check()
        return dict(self._preferences.get(conversation_key, {}))

    async def preference_everywhere(self, name: str) -> dict[str, str]:
        self._check()
        return {key: chosen[name] for key, chosen in self._preferences.items() if name in chosen}

    async def note_session(self, record: SessionRecord) -> None:
        self._check()
        key = (record.conversation_key, record.session_id)
        known = self._sessions.get(key)
        if known is not None:
            record = replace(
                record,
                title=record.title or known.title,
                started_at=known.started_at,
                active_at=max(known.active_at, record.active_at),
            )
        self._sessions[key] = record

    async def sessions_of(self, conversation_key: str, limit: int = 20) -> list[SessionRecord]:
        self._check()
        mine = [r for (k, _), r in self._sessions.items() if k == conversation_key]
        mine.sort(key=lambda r: (r.active_at, r.started_at), reverse=True)
        return mine[:limit]

    # -- schedules ---------------------------------------------------------------------------

    async def add_schedule(
        self,
        conversation_key: str,
        chat_id: str,
        creator_open_id: str,
        kind: ScheduleKind,
        every_seconds: float | None,
        prompt: str,
        next_due_at: float,
        now: float,
        *,
        anchor_message_id: str = "",
        config_key: str = "",
    ) -> Schedule | None:
        self._check()
        if config_key and any(s.config_key == config_key for s in self._schedules.values()):
            return None
        self._schedule_seq += 1
        record = Schedule(
            schedule_id=self._schedule_seq,
            conversation_key=conversation_key,
            chat_id=chat_id,
            creator_open_id=creator_open_id,
            kind=ScheduleKind(kind),
            every_seconds=every_seconds,
            prompt=prompt,
            next_due_at=next_due_at,
            created_at=now,
            anchor_message_id=anchor_message_id,
            config_key=config_key,
        )
        self._schedules[record.schedule_id] = record
        return record

    async def schedule(self, schedule_id: int) -> Schedule | None:
        self._check()
        return self._schedules.get(schedule_id)

    async def schedules(self, conversation_key: str | None = None) -> list[Schedule]:
        self._check()
        return sorted(
            (
                s
                for s in self._schedules.values()
                if conversation_key is None or s.conversation_key == conversation_key
            ),
            key=lambda s: s.schedule_id,
        )

    async def remove_schedule(self, schedule_id: int) -> bool:
        self._check()
        return self._schedules.pop(schedule_id, None) is not None

    async def note_schedule_run(
        self, schedule_id: int, slot: float, ran_at: float, next_due_at: float
    ) -> bool:
        self._check()
        known = self._schedules.get(schedule_id)
        if known is None or known.next_due_at != slot:
            return False
        self._schedules[schedule_id] = replace(known, last_run_at=ran_at, next_due_at=next_due_at)
        return True

    async def note_schedule_skip(self, schedule_id: int, reason: str, at: float) -> bool:
        self._check()
        known = self._schedules.get(schedule_id)
        if known is None:
            return False
        self._schedules[schedule_id] = replace(known, last_skip_at=at, last_skip_reason=reason)
        return True

    # -- leases (same contract as the SQL stores') -------------------------------------------

    async def claim_lease(
        self,
        conversation_key: str,
        owner: str,
        now: float,
        ttl: float,
        *,
        take_expired: bool = True,
    ) -> int | None:
        self._check()
        if not owner:
            raise ValueError("a lease owner is a non-empty instance id")
        held = self._leases.get(conversation_key)
        if held is None:
            fence = 1
        else:
            holder, fence, expires_at = held
            if holder is not None and holder != owner and (expires_at > now or not take_expired):
                return None
            if holder == owner:  # never moved back (bridge/store/sql_store.py `_CLAIM`)
                self._leases[conversation_key] = (owner, fence, max(expires_at, now + ttl))
                return fence
            fence += 1
        self._leases[conversation_key] = (owner, fence, now + ttl)
        return fence

    async def renew_leases(self, owner: str, now: float, ttl: float) -> list[str]:
        self._check()
        keys = sorted(k for k, (holder, _, _) in self._leases.items() if holder == owner)
        for key in keys:
            _, fence, expires_at = self._leases[key]
            self._leases[key] = (owner, fence, max(expires_at, now + ttl))
        return keys

    async def release_leases(self, owner: str, keys: Sequence[str] | None = None) -> int:
        self._check()
        chosen = set(self._leases if keys is None else keys)
        released = 0
        for key, (holder, fence, expires_at) in list(self._leases.items()):
            if holder == owner and key in chosen:
                self._leases[key] = (None, fence, expires_at)
                released += 1
        return released

    async def lease_of(self, conversation_key: str, now: float) -> Lease | None:
        self._check()
        held = self._leases.get(conversation_key)
        if held is None or held[0] is None or held[2] <= now:
            return None
        return Lease(owner=held[0], fence=held[1], expires_at=held[2])

    async def unowned_conversations(self, now: float) -> list[UnownedConversation]:
        self._check()
        found: dict[str, UnownedConversation] = {}
        waiting = [
            m.conversation_key
            for m in sorted(self._messages.values(), key=lambda m: m.seq)
            if m.state is not MessageState.DONE
        ]
        owed = [post.conversation_key for post in await self.owed()]  # as sql_store `_UNOWNED`
        for key in [*waiting, *owed]:
            holder, fence, expires_at = self._leases.get(key, (None, 0, 0.0))
            if key not in found and (holder is None or expires_at <= now):
                found[key] = UnownedConversation(key, holder, fence)
        return list(found.values())

    async def interrupt_running_of(self, conversation_key: str, now: float) -> int:
        self._check()
        running = [
            m
            for m in self._messages.values()
            if m.conversation_key == conversation_key and m.state is MessageState.RUNNING
        ]
        for m in running:
            self._messages[m.message_id] = replace(
                m, state=MessageState.INTERRUPTED, updated_at=now
            )
        return len(running)

    # -- instances ---------------------------------------------------------------------------

    async def heartbeat(
        self,
        instance_id: str,
        epoch: str,
        now: float,
        ops_url: str = "",
        info: Mapping[str, Any] | None = None,
    ) -> None:
        self._check()
        known = self._instances.get(instance_id)
        started = known.started_at if known is not None and known.epoch == epoch else now
        # Through JSON, as the SQL stores keep it: the caller's dict is not shared.
        facts = json.loads(json.dumps(dict(info or {})))
        self._instances[instance_id] = InstanceRecord(
            instance_id, epoch, started, now, ops_url, facts
        )

    async def instances(self, now: float) -> list[InstanceRecord]:
        self._check()
        return [
            replace(record, age=now - record.heartbeat_at)
            for _, record in sorted(self._instances.items())
        ]

    # -- owed posts (a mark settles its post, as the SQL stores' trigger does) ---------------

    async def owe(
        self,
        idempotency_key: str,
        conversation_key: str,
        turn_id: str | None,
        payload: str,
        now: float,
    ) -> bool:
        self._check()
        if idempotency_key in self._owed or idempotency_key in self._outbox:
            return False
        self._owed_seq += 1
        post = OwedPost(self._owed_seq, idempotency_key, conversation_key, turn_id, payload, now)
        self._owed[idempotency_key] = post
        return True

    async def owed(self) -> list[OwedPost]:
        self._check()
        return sorted(self._owed.values(), key=lambda p: p.seq)

    async def settle(self, idempotency_key: str) -> None:
        self._check()
        self._owed.pop(idempotency_key, None)

    # -- housekeeping ------------------------------------------------------------------------

    async def prune(self, now: float) -> int:
        self._check()
        cutoff = now - self.retention_seconds
        removed = 0

        old_events = [e for e, at in self._events.items() if at < cutoff]
        for event_id in old_events:
            del self._events[event_id]
        self._event_messages = {m: e for m, e in self._event_messages.items() if e in self._events}
        removed += len(old_events)

        old_messages = [
            m.message_id
            for m in self._messages.values()
            if m.state is MessageState.DONE and m.updated_at < cutoff
        ]
        for message_id in old_messages:
            del self._messages[message_id]
        removed += len(old_messages)

        old_approvals = [
            a.request_id
            for a in self._approvals.values()
            if a.decided_at is not None and a.decided_at < cutoff
        ]
        for request_id in old_approvals:
            del self._approvals[request_id]
        removed += len(old_approvals)

        old_turns = {
            t.turn_id
            for t in self._turns.values()
            if t.finished_at is not None and t.finished_at < cutoff
        }
        for turn_id in old_turns:  # cascade, as the foreign keys do in SQLite
            del self._turns[turn_id]
            self._traces.pop(turn_id, None)
        self._approvals = {r: a for r, a in self._approvals.items() if a.turn_id not in old_turns}
        removed += len(old_turns)

        old_marks = [k for k, (_, at) in self._outbox.items() if at < cutoff]
        for key in old_marks:
            del self._outbox[key]
        removed += len(old_marks)

        old_sessions = [k for k, r in self._sessions.items() if r.active_at < cutoff]
        for session_key in old_sessions:
            del self._sessions[session_key]
        removed += len(old_sessions)

        gone = [i for i, r in self._instances.items() if r.heartbeat_at < cutoff]
        for instance_id in gone:
            del self._instances[instance_id]
        return removed + len(gone)


if TYPE_CHECKING:
    _conforms: type[Store] = MemoryStore
