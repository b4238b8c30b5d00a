"""The app's call budget: which waiting Feishu call goes next, and when. Pure: time is a
parameter, so tests drive it without a loop (the async shell is `pacer.py`).

Feishu meters an app as a whole (calls a second, message sends a minute) and each chat on
its own (calls a second to one chat); past a limit it answers 429 with a reset header
(docs/scaling.md cites the figures). Three token buckets mirror those limits, set below
them by the operator's margin. When calls wait, the next to go is chosen by:

1. its lane: the ending and the answer, then approval and question cards, then hints and
   acks, then card refreshes and progress lines, which are what yields when the budget is
   short (a card's refresh waits, and shows the newest view when its turn comes);
2. a hint waiting past its deadline goes first whatever its lane, so nothing starves it;
3. within a lane, the chat served longest ago: every live turn gets its fair share, a busy
   chat cannot crowd out a quiet one;
4. then arrival order.

A call whose chat has no token left is passed over, not waited for: one chat at its limit
never holds the others. A 429 pauses the chat it hit (or the app) for Feishu's reset, and
halves the app's rate; the rate then grows back by a fixed step a second while no 429
comes (additive increase, multiplicative decrease), so the budget settles just under
whatever limit Feishu really applies.

Not `aiolimiter` or `limits`: both read the loop's or the wall clock themselves (tests
could not inject time), neither can pass over a call whose chat is spent to grant the
next one, and neither changes its rate at run time; the arithmetic of a token bucket is
the few lines of `Bucket`, the rest is the choice above, which no library offers.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol


class Lane(IntEnum):
    """What a call is for, most urgent first."""

    ENDING = 0  # a turn's end signal: the final answer, the ended line, the final card
    ANSWER = 1  # the agent's words, files, diffs
    CARD = 2  # approval and question cards: someone must act on them
    HINT = 3  # the ack reaction, the first hint, the status card's first post
    REFRESH = 4  # a status card's refresh, a progress line


@dataclass(frozen=True)
class BudgetPolicy:
    """Rates already net of the safety margin (the settings take Feishu's figures × margin)."""

    app_per_second: float = 40.0
    sends_per_minute: float = 800.0
    chat_per_second: float = 4.0
    hint_deadline: float = 1.0  # seconds a hint may wait before it goes ahead of anything
    # Tokens a bucket holds at most, in seconds of its rate (at least one call): a burst
    # plus a second at the full rate must stay under a limit counted per second.
    burst_seconds: float = 0.2
    shrink: float = 0.5  # the app rate × this at a 429
    floor: float = 0.1  # the app rate never below this share of its setting
    recover_per_second: float = 2.0  # calls a second the rate regains each second

    @classmethod
    def of(cls, settings: Limits) -> BudgetPolicy:
        """Paced at the settings' margin of Feishu's limits."""
        margin = settings.bridge_feishu_budget_margin
        return cls(
            app_per_second=settings.bridge_feishu_app_calls_per_second * margin,
            sends_per_minute=settings.bridge_feishu_sends_per_minute * margin,
            chat_per_second=settings.bridge_feishu_chat_calls_per_second * margin,
        )


class Limits(Protocol):
    """The settings the budget is made from (bridge/config.py)."""

    bridge_feishu_app_calls_per_second: float
    bridge_feishu_sends_per_minute: float
    bridge_feishu_chat_calls_per_second: float
    bridge_feishu_budget_margin: float


@dataclass
class Bucket:
    rate: float
    capacity: float
    tokens: float
    at: float
    paused_until: float = 0.0

    @classmethod
    def full(cls, rate: float, burst_seconds: float, now: float) -> Bucket:
        capacity = max(1.0, rate * burst_seconds)
        return cls(rate, capacity, capacity, now)

    def refill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
            self.at = now

    def ready(self, now: float) -> bool:
        return now >= self.paused_until and self.tokens >= 1.0 - 1e-9

    def ready_at(self, now: float) -> float:
        """When the next whole token is there (and any pause over)."""
        short = max(0.0, 1.0 - self.tokens)
        return max(self.paused_until, now + short / self.rate if self.rate > 0 else math.inf)


@dataclass(eq=False)
class Waiter:
    lane: Lane
    chat: str | None
    send: bool  # a message send (counted against the sends-a-minute limit too)
    since: float
    seq: int = 0
    deadline: float = math.inf  # past it, a hint goes first
    handle: Any = None  # the async shell's future


@dataclass
class Usage:
    """What the operator sees (bridge/ops/metrics.py, /status)."""

    granted: Counter[str] = field(default_factory=Counter)  # by lane
    waited: dict[str, float] = field(default_factory=dict)  # seconds waited, by lane
    rate_limited: int = 0  # 429s seen
    recent: list[float] = field(default_factory=list)  # grant times of the last window


class Scheduler:
    WINDOW = 10.0  # seconds over which calls a second are reported

    def __init__(self, policy: BudgetPolicy, now: float) -> None:
        self.policy = policy
        self._app = Bucket.full(policy.app_per_second, policy.burst_seconds, now)
        self._sends = Bucket.full(policy.sends_per_minute / 60.0, policy.burst_seconds, now)
        self._chats: dict[str, Bucket] = {}
        self._served: dict[str, float] = {}  # chat -> when it was last granted a call
        self._waiting: list[Waiter] = []
        self._seq = itertools.count()
        self._last_shrink = -math.inf
        self.usage = Usage()

    # -- the rate --------------------------------------------------------------------------

    @property
    def app_rate(self) -> float:
        return self._app.rate

    def rate_limited(self, now: float, reset_after: float | None, chat: str | None) -> None:
        """A 429: wait out Feishu's reset (the chat's, or the app's when the call had no
        chat), and halve the app's rate once per burst of 429s."""
        self.usage.rate_limited += 1
        self._refill(now)
        pause = now + (reset_after if reset_after is not None else 1.0)
        bucket = self._chat(chat, now) if chat is not None else self._app
        bucket.paused_until = max(bucket.paused_until, pause)
        bucket.tokens = min(bucket.tokens, 0.0)
        if now - self._last_shrink >= 1.0:  # calls already in flight bring their own 429
            self._last_shrink = now
            floor = self.policy.app_per_second * self.policy.floor
            self._app.rate = max(floor, self._app.rate * self.policy.shrink)

    def _refill(self, now: float) -> None:
        target = self.policy.app_per_second
        if self._app.rate < target:  # the additive step back, from the last refill on
            grown = self._app.rate + (now - self._app.at) * self.policy.recover_per_second
            self._app.refill(now)
            self._app.rate = min(target, grown)
        else:
            self._app.refill(now)
        self._sends.refill(now)

    def _chat(self, chat: str, now: float) -> Bucket:
        bucket = self._chats.get(chat)
        if bucket is None:
            policy = self.policy
            bucket = self._chats[chat] = Bucket.full(
                policy.chat_per_second, policy.burst_seconds, now
            )
        bucket.refill(now)
        return bucket

    # -- waiting and granting --------------------------------------------------------------

    def waiter(self, lane: Lane, chat: str | None, send: bool, now: float) -> Waiter:
        deadline = now + self.policy.hint_deadline if lane is Lane.HINT else math.inf
        return Waiter(lane, chat, send, now, next(self._seq), deadline)

    def offer(self, waiter: Waiter, now: float) -> list[Waiter]:
        """Queue `waiter`; every waiter that may go now (it among them, or not)."""
        self._waiting.append(waiter)
        return self.grant(now)

    def withdraw(self, waiter: Waiter) -> None:
        if waiter in self._waiting:
            self._waiting.remove(waiter)

    def grant(self, now: float) -> list[Waiter]:
        """Take tokens for every waiter that may go now, in the order of the module doc."""
        if not self._waiting:
            return []
        self._refill(now)
        if not self._app.ready(now):
            return []
        granted: list[Waiter] = []
        for waiter in sorted(self._waiting, key=lambda w: self._rank(w, now)):
            if not self._app.ready(now):
                break
            if waiter.send and not self._sends.ready(now):
                continue
            # Feishu's 5 a second to one user or group is its send-message limit: only a
            # send takes from the chat's bucket (a card entity's change, a reaction, an edit
            # are metered by the app's), though every call counts for the chat's fair turn.
            chat = self._chat(waiter.chat, now) if waiter.chat is not None and waiter.send else None
            if chat is not None and not chat.ready(now):
                continue
            self._app.tokens -= 1.0
            if waiter.send:
                self._sends.tokens -= 1.0
            if chat is not None:
                chat.tokens -= 1.0
            if waiter.chat is not None:
                self._served[waiter.chat] = now
            granted.append(waiter)
            self._count(waiter, now)
        if granted:
            gone = set(map(id, granted))
            self._waiting = [w for w in self._waiting if id(w) not in gone]
        return granted

    def _rank(self, waiter: Waiter, now: float) -> tuple[int, float, int]:
        lane = -1 if now >= waiter.deadline else int(waiter.lane)
        served = self._served.get(waiter.chat, -math.inf) if waiter.chat is not None else -math.inf
        return lane, served, waiter.seq

    def _count(self, waiter: Waiter, now: float) -> None:
        usage = self.usage
        usage.granted[waiter.lane.name.lower()] += 1
        name = waiter.lane.name.lower()
        usage.waited[name] = usage.waited.get(name, 0.0) + now - waiter.since
        usage.recent.append(now)
        if len(usage.recent) > 64 and usage.recent[0] < now - self.WINDOW:
            cut = next(i for i, t in enumerate(usage.recent) if t >= now - self.WINDOW)
            del usage.recent[:cut]

    def next_wake(self, now: float) -> float | None:
        """The earliest time a waiting call could go; None when nothing waits."""
        if not self._waiting:
            self._forget_idle(now)
            return None
        self._refill(now)
        app_at = self._app.ready_at(now)
        sends_at = self._sends.ready_at(now)
        best = math.inf
        for waiter in self._waiting:
            at = max(app_at, sends_at) if waiter.send else app_at
            if waiter.chat is not None:
                at = max(at, self._chat(waiter.chat, now).ready_at(now))
            best = min(best, at)
        return best

    def _forget_idle(self, now: float) -> None:
        """Chats whose bucket is full again and unpaused hold nothing worth keeping."""
        if len(self._chats) < 256:
            return
        for chat, bucket in list(self._chats.items()):
            bucket.refill(now)
            if bucket.tokens >= bucket.capacity and now >= bucket.paused_until:
                del self._chats[chat]
                self._served.pop(chat, None)

    # -- the operator's view ---------------------------------------------------------------

    def state(self, now: float) -> dict[str, Any]:
        self._refill(now)
        waiting = Counter(w.lane.name.lower() for w in self._waiting)
        recent = [t for t in self.usage.recent if t >= now - self.WINDOW]
        return {
            "rate": round(self._app.rate, 3),
            "limit": self.policy.app_per_second,
            "chat_limit": self.policy.chat_per_second,
            "sends_per_minute": self.policy.sends_per_minute,
            "calls_per_second": round(len(recent) / self.WINDOW, 3),
            "waiting": {lane.name.lower(): waiting.get(lane.name.lower(), 0) for lane in Lane},
            "granted": {lane.name.lower(): self.usage.granted[lane.name.lower()] for lane in Lane},
            "waited_seconds": {
                lane.name.lower(): round(self.usage.waited.get(lane.name.lower(), 0.0), 3)
                for lane in Lane
            },
            "rate_limited": self.usage.rate_limited,
        }
