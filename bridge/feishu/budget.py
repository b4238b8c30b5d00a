"""The app's call budget: which waiting Feishu call goes next, and when, and the calls
waiting for their turn on the event loop.

The choice (`CallQueue`) is pure: time is a parameter, so tests drive it without a loop.
`CallBudget` is its shell on the loop: every Feishu call the client makes waits there for
its turn. Who a call is for and why travels on the request (`requests.CallTerms`: its
chat and lane, which the core's terms decide). A status card refresh takes its token
*before* it picks the view to show (`acquire`, then the change `Paid`): the view it then
draws is the newest one, however long it waited.

Feishu meters each API of an app on its own ("每个 API、每个应用、每个租户": 50 calls a
second for most, the send API also 1,000 a minute), and message sends to one chat (5 a
second); past a limit it answers 429 with a reset header (docs/scaling.md cites the
figures). Buckets mirror those limits, set below them by a margin: one per API
a call is metered under (`Waiter.api`), one for the minute's sends, one per chat, and an
optional cap on all calls together for a tenant or gateway that meters the app as a
whole. When calls wait, the next to go is chosen by:

1. its lane: the ending and the answer, then approval and question cards, then hints and
   acks, then card refreshes and progress lines, which are what yields when the budget is
   short (a card's refresh waits, and shows the newest view when its turn comes);
2. a hint or a card (an approval, a question: the user's turn) waiting past its deadline
   goes first whatever its lane, and may spend the burst's reserve kept for the lanes above
   it: under a steady flood of endings the reserve never fills, and the user would wait for
   the flood to pass;
3. within a lane, the chat served longest ago: every live turn gets its fair share, a busy
   chat cannot crowd out a quiet one;
4. then arrival order.

A call whose chat or API has no token left is passed over, not waited for: one chat or
API at its limit never holds the others. No lane starves while Feishu allows its calls: a
waiting call goes within its buckets' time to refill to what its lane may take and to what
the calls that went meanwhile took (`CallQueue.longest_wait`, the bound the simulator
holds the budget to). A 429 pauses the chat it hit (or its API) for Feishu's reset, and
halves that API's rate; the rate then grows back by a fixed step a second while no 429
comes (additive increase, multiplicative decrease), so the budget settles just under
whatever limit Feishu really applies.

Each API's minute (sends, and every other API: Feishu meters each at 1,000 a minute) is
spent neither in one burst nor at a crawl (`Minute`). Each API's 50 a second would let the
whole minute go in its first 20 s, and then every chat would see nothing for 40 s, cards
waiting for an approval among them; a steady pace with a small burst would make 200 chats
arriving at once wait 13 s for their cards. So a fifth of the minute may go at once after
a quiet spell (180 of the 900: a crowd's reactions, cards and endings at the API's second's
pace), and a call goes only if the minute left after it still allows a floor of the rest
spread over the window (`(900 - 180) / 60`, twelve a second): a burst is paid for by a
slower minute, never by silence, and no 60 s ever holds more than the configured figure.
Under a load that never pauses the calls go at 5% under the minute's average, evenly. A lane's
share (`SEND_SHARE`) is of a reserve of three seconds of the minute: a lane takes a call
only while it leaves `(1 - share)` of the reserve for the lanes above it
(`kept_for_lanes`), so a flood of progress lines never spends what an answer or an ending
that comes needs.

Feishu's minute outlives the process: a restarted bridge starts with the grants its
predecessor recorded (`Spent`, kept in the app's data folder by `budget_record.py`), and
takes the seconds since that record, if it did not stop cleanly, as spent at the pace. A
bridge with no record (its first start) has spent nothing, so a crowd meeting a bridge just
started gets its reactions and cards at the API's second's pace, as on one long up.

Not `aiolimiter` or `limits`: both read the loop's or the wall clock themselves (tests
could not inject time), neither can pass over a call whose chat is spent to grant the
next one, and neither changes its rate at run time; the arithmetic of a token bucket is
the few lines of `Bucket`, the rest is the choice above, which no library offers.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from bridge.core.delivery import Lane

if TYPE_CHECKING:
    from bridge.feishu.requests import CallTerms

# The share of the sends' burst each lane may spend: a flood of progress lines or hints
# never empties what the answers and endings behind them need.
SEND_SHARE = (1.0, 1.0, 0.9, 0.75, 0.5)  # by lane: ending, answer, card, hint, refresh

# A token counts as whole this close to one: the float sums of refills fall short of it.
_SLACK = 1e-9


def _later(now: float, wait: float) -> float:
    """`now + wait` for a wait > 0, and never `now` itself: at an epoch time's float step a
    wait of a few nanoseconds rounds away, and a wake-up at `now` would find the bucket
    just as short, again and again until the clock moves."""
    at = now + wait
    return at if at > now else math.nextafter(now, math.inf)


@dataclass(frozen=True)
class BudgetPolicy:
    """Rates already net of the safety margin (the settings take Feishu's figures × margin)."""

    app_per_second: float = 40.0  # each API's
    sends_per_minute: float = 900.0
    chat_per_second: float = 4.0
    total_per_second: float = 0.0  # all calls together; 0: no cap beyond each API's
    hint_deadline: float = 1.0  # seconds a hint may wait before it goes ahead of anything
    card_deadline: float = 2.0  # likewise an approval or a question card
    # Likewise the agent's words and a command's reply: else the endings of busy chats,
    # whose next turn ends as soon as the last did, pass it over for as long as they last.
    answer_deadline: float = 3.0
    # Tokens a bucket holds at most, in seconds of its rate (at least one call): a burst
    # plus a second at the full rate must stay under a limit counted per second.
    burst_seconds: float = 0.05
    # The share of an API's minute a burst may take at once (`Minute`).
    minute_burst: float = 0.2
    # The room kept in an API's minute for the lanes above (`SEND_SHARE`), in seconds of
    # the minute's average: an answer or an ending that comes finds it there.
    reserve_seconds: float = 3.0
    # The most calls of one API held at once: each from when it goes until a second after
    # its answer (0: no such cap). Feishu counts a call when it arrives, at any moment in
    # between: a server running late takes calls sent over more than a second within one
    # (`Held`).
    held_per_api: float = 0.0
    shrink: float = 0.5  # the app rate × this at a 429
    floor: float = 0.1  # the app rate never below this share of its setting
    recover_per_second: float = 2.0  # calls a second the rate regains each second

    @classmethod
    def of(cls, limits: Limits) -> BudgetPolicy:
        """Paced at the limits' margin of Feishu's limits."""
        margin = limits.margin
        app = limits.app_calls_per_second * margin
        granted_at_once = max(1.0, app * cls.burst_seconds)  # granted, not yet gone
        return cls(
            app_per_second=app,
            sends_per_minute=limits.sends_per_minute * limits.minute_margin,
            chat_per_second=limits.chat_calls_per_second * margin,
            total_per_second=limits.total_calls_per_second * margin,
            held_per_api=max(1.0, math.floor(limits.app_calls_per_second - granted_at_once)),
        )


class Limits(Protocol):
    """Feishu's limits the budget is made from (bridge/config/budget.py)."""

    @property
    def app_calls_per_second(self) -> float: ...
    @property
    def sends_per_minute(self) -> float: ...
    @property
    def chat_calls_per_second(self) -> float: ...
    @property
    def total_calls_per_second(self) -> float: ...
    @property
    def margin(self) -> float: ...
    @property
    def minute_margin(self) -> float: ...


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

    def ready(self, now: float, keep: float = 0.0) -> bool:
        """A whole token there beyond the `keep` held back (and any pause over)."""
        return now >= self.paused_until and self.tokens >= 1.0 + keep - _SLACK

    def ready_at(self, now: float, keep: float = 0.0) -> float:
        """When the next whole token beyond `keep` is there (and any pause over)."""
        short = 1.0 + keep - _SLACK - self.tokens
        if short <= 0.0:
            return max(self.paused_until, now)
        return max(self.paused_until, _later(now, short / self.rate) if self.rate > 0 else math.inf)

    def reserve(self, share: float) -> float:
        """The tokens a lane with `share` of the burst leaves to the lanes above it."""
        return (1.0 - share) * (self.capacity - 1.0)


class Minute:
    """An API's minute: at most `limit` calls in any 60 s, a burst of `capacity` after a
    quiet spell, a steady 95% of `limit / 60` a second under a load that never pauses, and
    never a stop.

    Two rules. **Room**: a call goes only if, after it, sending on at `rate` (the floor,
    `(limit - capacity) / 60`) breaks no 60 s window: with the grant times of the last
    60 s at `t_k` (k = 0 … W-1, oldest first), the calls that may go now are at most
    `limit - W + k - rate × (t_k + 60 - now)` for every k. So a burst is paid for by a
    slower next minute, never by silence. **Pace**: the calls that may go at once are
    tokens refilled at 95% of the minute's average and never more than the room: after a
    quiet spell they are the whole burst (200 chats arriving at once get their reactions,
    cards and replies at the API's second's pace), while under a load that never pauses
    they stay near none, so a burst's calls expiring a minute later free room without
    another burst (the minute does not go in bursts and slow stretches for ever).
    The room and the tokens only grow as time passes, at `rate` at least:
    `CallQueue.longest_wait` counts on that."""

    __slots__ = ("_at", "_first", "_log", "_lows", "_pace", "_tokens", "capacity", "limit", "rate")

    def __init__(
        self,
        limit: float,
        burst_share: float,
        now: float,
        spent: Sequence[float] = (),
        unseen_since: float | None = None,
    ) -> None:
        self.limit = limit
        self.capacity = Minute.burst(limit, burst_share)
        self.rate = max(limit - self.capacity, limit / 2) / 60.0
        self._pace = 0.95 * limit / 60.0
        # Grant times of the last 60 s, oldest first: a restarted bridge's start with what
        # its predecessor recorded (`spent`), and, for the time since its last record
        # (`unseen_since`: it may have been killed after it), calls at the pace, evenly.
        # A bridge with no predecessor has spent nothing: its burst is there at once.
        log = sorted(t for t in spent if now - 60.0 <= t <= now)
        if unseen_since is not None:
            since = max(unseen_since, now - 60.0)
            unseen = math.floor(self._pace * (now - since))
            log += [now - (now - since) * (k + 0.5) / unseen for k in reversed(range(unseen))]
            log.sort()
        self._log: deque[float] = deque(log)
        # The room rule's min over k of (k - rate × t_k), kept as a sliding window's
        # minimum: each grant numbered from the first ever (`_first` is `_log[0]`'s), and
        # the grants that may yet be the least, by number, their values rising. A grant
        # expiring then costs nothing, where finding the least again cost the whole minute's
        # log each time (a thousand sends a minute: a thousand steps a call).
        self._first = 0
        self._lows: deque[tuple[int, float]] = deque()
        self._relearn(0)
        self._tokens = max(0.0, self.room(now))
        self._at = now

    @staticmethod
    def burst(limit: float, share: float) -> float:
        """The calls a minute of `limit` lets go at once: `share` of it, at least one and
        at most half."""
        return min(max(1.0, limit * share), max(1.0, limit / 2))

    def refill(self, now: float) -> None:
        """Forget the grants older than a minute; tokens for the time since."""
        log = self._log
        if log and log[0] < now - 60.0:  # (a window counts both its ends)
            lows = self._lows
            while log and log[0] < now - 60.0:
                log.popleft()
                if lows and lows[0][0] == self._first:
                    lows.popleft()
                self._first += 1
        if now > self._at:
            self._tokens = min(self._tokens + (now - self._at) * self._pace, self.room(now))
            self._at = now

    def _relearn(self, start: int) -> None:
        """The grants numbered from `start` on join the window again, oldest first."""
        log, first = self._log, self._first
        for k in range(start, first + len(log)):
            self._low(k, log[k - first])

    def _low(self, k: int, t: float) -> None:
        """Grant number `k` at `t` joins the window: the earlier ones it is below can never
        be the least again (it outlives them)."""
        value, lows = k - self.rate * t, self._lows
        while lows and lows[-1][1] >= value:
            lows.pop()
        lows.append((k, value))

    def room(self, now: float) -> float:
        """Calls that may go now by the room rule (fractional: a call needs a whole one)."""
        free = self.limit - len(self._log)  # the minute's figure itself
        if self._log:
            least = self._lows[0][1] - self._first  # min over k of (k - rate × t_k)
            free = min(free, free + least + self.rate * (now - 60.0))
        return min(self.capacity, free)

    def spent(self, now: float) -> list[float]:
        """The grant times of the last 60 s (what a successor starts with)."""
        self.refill(now)
        return list(self._log)

    @property
    def tokens(self) -> float:
        """The calls that may go at once, as of the last refill."""
        return self._tokens

    def ready(self, now: float, keep: float = 0.0) -> bool:
        """A whole call beyond the `keep` held back (refilled at `now`)."""
        return min(self._tokens, self.room(now)) >= 1.0 + keep - _SLACK

    def ready_at(self, now: float, keep: float = 0.0) -> float:
        """When a whole call beyond `keep` may go, at the latest: the tokens grow at the
        pace, the room at `rate` at least (a grant expiring can free it sooner; a call
        then offered finds it)."""
        need = 1.0 + keep - _SLACK
        wait = max(need - self._tokens, 0.0) / self._pace
        wait = max(wait, max(need - self.room(now), 0.0) / self.rate)
        return _later(now, wait) if wait > 0.0 else now

    def take(self, now: float) -> None:
        self._tokens -= 1.0
        self._low(self._first + len(self._log), now)
        self._log.append(now)

    def give_back(self) -> None:
        """A grant not used: forgotten (the newest stands for it; the margin under
        Feishu's figure covers the difference in when it expires)."""
        log = self._log
        if not log:
            return
        log.pop()
        newest, lows = self._first + len(log), self._lows  # the number the grant had
        if lows and lows[-1][0] == newest:
            lows.pop()
        # The grants after the last low left were dropped by the newest (or by grants it
        # dropped): without it, they may be lows again. Mostly a few, as the values rise
        # while calls go faster than the floor.
        self._relearn(lows[-1][0] + 1 if lows else self._first)
        self._tokens = min(self.capacity, self._tokens + 1.0)


class Held:
    """One API's calls that Feishu may count in one second: those on their way (from when
    they go until their answer) and those answered less than a second ago. A call arrives
    somewhere between, so if no more than `limit` are ever held at once, no second of
    Feishu's can count more than `limit`, however late its server runs: the bucket's pace
    alone is kept by send times, and a server that falls behind and then takes a second
    and a half of calls within one second counts past its limit (the one 429 of 200 card
    turns ending together on a loaded machine). With answers back within a fifth of a
    second this never binds at 40 a second; a slower Feishu lowers the pace with it."""

    __slots__ = ("answered", "going")

    def __init__(self) -> None:
        self.going = 0
        self.answered: deque[float] = deque()  # answer times of the last second

    def count(self, now: float) -> int:
        answered = self.answered
        while answered and answered[0] + 1.0 <= now:
            answered.popleft()
        return self.going + len(answered)

    def free_at(self, now: float, limit: float) -> float:
        """When fewer than `limit` are held, as far as known now: an answer to come may
        free a place sooner (`CallBudget.answered` then looks again)."""
        over = self.count(now) - int(limit) + 1  # places to free
        if over <= 0:
            return now
        if over > len(self.answered):
            return math.inf  # only an answer frees one
        return self.answered[over - 1] + 1.0


def kept_for_lanes(policy: BudgetPolicy) -> tuple[float, ...]:
    """What a call of each lane leaves in its minute for the lanes above it (by lane)."""
    burst = Minute.burst(policy.sends_per_minute, policy.minute_burst)
    reserve = min(burst, policy.sends_per_minute * policy.reserve_seconds / 60.0)
    return tuple((1.0 - share) * max(0.0, reserve - 1.0) for share in SEND_SHARE)


@dataclass(eq=False)
class Waiter:
    lane: Lane
    chat: str | None
    send: bool  # a message send (counted against the sends-a-minute limit too)
    since: float
    api: str = ""  # the API it is metered under (`api_of`)
    seq: int = 0
    deadline: float = math.inf  # past it, a hint or a card goes first
    handle: Any = None  # the async shell's future


@dataclass
class Usage:
    """What the operator sees (bridge/ops/metrics.py, /status)."""

    granted: Counter[str] = field(default_factory=Counter)  # by lane
    waited: dict[str, float] = field(default_factory=dict)  # seconds waited, by lane
    rate_limited: int = 0  # 429s seen
    recent: list[float] = field(default_factory=list)  # grant times of the last window


@dataclass(frozen=True)
class Spent:
    """What a bridge's predecessor spent of each API's minute, as a restart finds it
    (`budget_record.py`), in this process's time: the grant times it recorded
    (`by_api`), and since when it may have gone on unrecorded (`unseen_since`: its last
    record, unless it stopped cleanly after it; the calls of that time are taken as made
    at the pace, evenly)."""

    by_api: Mapping[str, Sequence[float]] = field(default_factory=dict)
    unseen_since: float | None = None


class _Took(Enum):
    """A waiter's try at its tokens (`CallQueue._take`)."""

    GRANTED = "granted"
    NO_MINUTE = "no-minute"  # its minute keeps what is left for the lanes above it
    NO_CHAT = "no-chat"  # a send: its chat's bucket is empty


_Entry = tuple[int, float, int, Waiter]  # a waiter's rank in `grant` (lane, served, seq) and it


class ApiQueue:
    """The calls waiting for one API: in arrival order, and ranked as `grant` takes them.

    The rank (the module doc's order) changes while a call waits: its chat is served (it
    goes later), its deadline passes (it goes first). Ranking every waiter at every grant
    cost time in proportion to the queue (1 ms a grant with 1,000 waiting, several grants
    a millisecond apart under load); here each waiter has one current entry in a heap, an
    entry whose chat was served since is moved down when it comes up (a rank only worsens
    that way), and a deadline's passing pushes a new entry (`_deadlines`). Entries no
    longer current are dropped as they come up."""

    __slots__ = ("_calls", "_current", "_deadlines", "_heap", "_lanes", "sends")

    def __init__(self) -> None:
        self.sends = 0  # waiters that are sends (metered by the sends' minute, not the API's)
        self._lanes: Counter[Lane] = Counter()  # the other waiters, by lane
        self._calls: dict[int, Waiter] = {}  # by seq, in arrival order
        self._heap: list[_Entry] = []
        self._current: dict[int, _Entry] = {}  # each waiter's entry in the heap, by seq
        self._deadlines: list[tuple[float, int]] = []  # (deadline, seq) not yet passed

    def __bool__(self) -> bool:
        return bool(self._calls)

    def __iter__(self) -> Iterator[Waiter]:
        return iter(self._calls.values())

    def add(self, waiter: Waiter, served: float, now: float) -> None:
        self._calls[waiter.seq] = waiter
        if waiter.send:
            self.sends += 1
        else:
            self._lanes[waiter.lane] += 1
        overdue = now >= waiter.deadline
        self._push(waiter, -1 if overdue else int(waiter.lane), served)
        if not overdue and waiter.deadline != math.inf:
            heapq.heappush(self._deadlines, (waiter.deadline, waiter.seq))
        if len(self._heap) > 2 * len(self._calls) + 32:  # mostly stale: rebuilt
            self._heap = list(self._current.values())
            heapq.heapify(self._heap)
        if len(self._deadlines) > 2 * len(self._calls) + 32:  # calls gone before theirs
            self._deadlines = [d for d in self._deadlines if d[1] in self._calls]
            heapq.heapify(self._deadlines)

    def remove(self, waiter: Waiter) -> bool:
        """Whether `waiter` was waiting here (its entry goes stale)."""
        self._current.pop(waiter.seq, None)
        if self._calls.pop(waiter.seq, None) is None:
            return False
        if waiter.send:
            self.sends -= 1
        elif self._lanes[waiter.lane] == 1:
            del self._lanes[waiter.lane]
        else:
            self._lanes[waiter.lane] -= 1
        return True

    @property
    def lanes(self) -> int:
        """How many lanes the waiters that are not sends are in."""
        return len(self._lanes)

    def head(self, now: float, served: Callable[[str | None], float]) -> _Entry | None:
        """The first waiter by rank at `now`, its chat's last service by `served`; left in
        place (`take` it, or leave it)."""
        deadlines, calls = self._deadlines, self._calls
        while deadlines and deadlines[0][0] <= now:
            waiter = calls.get(heapq.heappop(deadlines)[1])
            if waiter is not None:
                self._push(waiter, -1, served(waiter.chat))
        heap, current = self._heap, self._current
        while heap:
            entry = heap[0]
            lane, was, seq, waiter = entry
            if current.get(seq) is not entry:
                heapq.heappop(heap)
            elif (now_served := served(waiter.chat)) != was:  # served since: later now
                heapq.heappop(heap)
                self._push(waiter, lane, now_served)
            else:
                return entry
        return None

    def take(self) -> None:
        """Off the heap: the head `head` returned (kept current: `back` or `remove`)."""
        heapq.heappop(self._heap)

    def back(self, entry: _Entry) -> None:
        """A head taken and not granted: in line again, as it was."""
        if self._current.get(entry[2]) is entry:
            heapq.heappush(self._heap, entry)

    def _push(self, waiter: Waiter, lane: int, served: float) -> None:
        entry = (lane, served, waiter.seq, waiter)
        self._current[waiter.seq] = entry
        heapq.heappush(self._heap, entry)


class CallQueue:
    WINDOW = 10.0  # seconds over which calls a second are reported

    def __init__(self, policy: BudgetPolicy, now: float, before: Spent | None = None) -> None:
        self.policy = policy
        self._before = before or Spent()
        self._apis: dict[str, Bucket] = {}
        self._total = (
            Bucket.full(policy.total_per_second, policy.burst_seconds, now)
            if policy.total_per_second > 0
            else None
        )
        self._born = now  # an API's minute is made at its first call, as of this time
        self._sends = self._new_minute(SEND)
        self._send_keep = kept_for_lanes(policy)  # by lane
        # How long a call of each lane waits before it goes first (`Waiter.deadline`).
        self._patience = {lane: math.inf for lane in Lane} | {
            Lane.ANSWER: policy.answer_deadline,
            Lane.CARD: policy.card_deadline,
            Lane.HINT: policy.hint_deadline,
        }
        # Every other API's minute (Feishu meters each at 1,000 a minute, as it does sends),
        # paced the same way and shared by the lanes the same way.
        self._minutes: dict[str, Minute] = {SEND: self._sends}
        self._chats: dict[str, Bucket] = {}
        self._held: dict[str, Held] = {}  # by API, with a cap (`BudgetPolicy.held_per_api`)
        self._served: dict[str, float] = {}  # chat -> when it was last granted a call
        # The waiting calls by API, in arrival order: under load most wait on an API with
        # no token, and neither a grant nor the next wake-up need look at them one by one.
        self._waiting: dict[str, ApiQueue] = {}
        self._seq = itertools.count()
        self._last_shrink: dict[str, float] = {}  # API -> its last shrink
        self.usage = Usage()

    # -- the rate --------------------------------------------------------------------------

    @property
    def app_rate(self) -> float:
        """The lowest of the APIs' rates (an API shrunk by 429s shows here)."""
        rates = [bucket.rate for bucket in self._apis.values()]
        return min(rates, default=self.policy.app_per_second)

    def rate_limited(
        self, now: float, reset_after: float | None, chat: str | None, api: str = ""
    ) -> None:
        """A 429: wait out Feishu's reset (the chat's, or the API's when the call had no
        chat), and halve the API's rate once per burst of 429s."""
        self.usage.rate_limited += 1
        pause = now + (reset_after if reset_after is not None else 1.0)
        metered = self._api(api, now)
        bucket = self._chat(chat, now) if chat is not None else metered
        bucket.paused_until = max(bucket.paused_until, pause)
        bucket.tokens = min(bucket.tokens, 0.0)
        if now - self._last_shrink.get(api, -math.inf) >= 1.0:  # in flight: their own 429s
            self._last_shrink[api] = now
            floor = self.policy.app_per_second * self.policy.floor
            metered.rate = max(floor, metered.rate * self.policy.shrink)

    def refund(self, api: str, now: float) -> None:
        """A token taken for `api` and not used for it (`paid`): given back, to every bucket
        its grant took from but a chat's (a token paid ahead is never a send's). The
        minute's too: under a crowd the minute is what binds, and a token that went nowhere
        is room Feishu still has (seed 5277: a card's flusher that found its change made
        inline meanwhile held a cardkit API's minute from the other chats' cards)."""
        self._minute(api, now).give_back()
        taken = [self._api(api, now)]
        if self._total is not None:
            self._total.refill(now)
            taken.append(self._total)
        for bucket in taken:
            bucket.tokens = min(bucket.capacity, bucket.tokens + 1.0)

    def going(self, api: str) -> None:
        """A call of `api` goes now (its grant came before)."""
        if self.policy.held_per_api > 0:
            held = self._held.get(api)
            if held is None:
                held = self._held[api] = Held()
            held.going += 1

    def answered(self, api: str, now: float) -> bool:
        """A call of `api` came back (answered, failed or given up); whether its place may
        let a waiting call go (the held calls were what held it)."""
        held = self._held.get(api)
        if held is None:
            return False
        full = held.count(now) >= self.policy.held_per_api
        held.going -= 1
        held.answered.append(now)
        return full and api in self._waiting

    def _held_at(self, api: str, now: float) -> float:
        held = self._held.get(api)
        return now if held is None else held.free_at(now, self.policy.held_per_api)

    def _held_room(self, api: str, now: float) -> bool:
        held = self._held.get(api)
        return held is None or held.count(now) < self.policy.held_per_api

    def _api(self, api: str, now: float) -> Bucket:
        bucket = self._apis.get(api)
        if bucket is None:
            policy = self.policy
            bucket = self._apis[api] = Bucket.full(policy.app_per_second, policy.burst_seconds, now)
        target = self.policy.app_per_second
        if bucket.rate < target:  # the additive step back, from the last refill on
            grown = bucket.rate + max(0.0, now - bucket.at) * self.policy.recover_per_second
            bucket.refill(now)
            bucket.rate = min(target, grown)
        else:
            bucket.refill(now)
        return bucket

    def _minute(self, api: str, now: float) -> Minute:
        minute = self._minutes.get(api)
        if minute is None:
            minute = self._minutes[api] = self._new_minute(api)
        minute.refill(now)
        return minute

    def _new_minute(self, api: str) -> Minute:
        """`api`'s minute as of this budget's start, with what its predecessor spent."""
        policy, before = self.policy, self._before
        spent = before.by_api.get(api, ())
        return Minute(
            policy.sends_per_minute, policy.minute_burst, self._born, spent, before.unseen_since
        )

    def spent(self, now: float) -> dict[str, list[float]]:
        """Each API's grant times of the last 60 s (what a successor starts with)."""
        return {api: log for api, minute in self._minutes.items() if (log := minute.spent(now))}

    def minute_rate(self) -> float:
        """Calls a second one API takes at its steady pace (its minute's average)."""
        return self._sends.limit / 60.0

    def longest_wait(self, lane: Lane, send: bool, went: int, chat_went: int = 0) -> float:
        """The longest a call of `lane` waits for its turn, given the calls that took from
        its buckets meanwhile (`went` of its API, `chat_went` of its chat's sends): the
        time its buckets take to refill, from empty, to what its lane may take (a whole
        token, and in the minute's the share of its burst kept for the lanes above it)
        and to the tokens those calls took. A wake-up is armed for that moment
        (`next_wake`), so a call waiting longer was starved: passed over with its buckets'
        room left (the simulator holds the budget to this, tests/sim/invariants.py).
        At the rates set: a 429's pause and halved rate, or a cap on all calls together,
        hold calls longer."""
        policy = self.policy
        refills = [
            (1.0 + went) / policy.app_per_second,
            (1.0 + self._send_keep[lane] + went) / self._sends.rate,
        ]
        if send:
            refills.append((1.0 + chat_went) / policy.chat_per_second)
        return max(refills)

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

    def waiter(self, lane: Lane, chat: str | None, send: bool, now: float, api: str = "") -> Waiter:
        return Waiter(lane, chat, send, now, api, next(self._seq), now + self._patience[lane])

    def may_go(self, api: str, now: float, lane: Lane = Lane.ENDING) -> bool:
        """Whether a call of `api` in `lane` could have a token now (cheap: no waiter is
        looked at): its minute's tokens beyond what is kept for the lanes above it too."""
        return (
            self._total_ready(now)
            and self._api(api, now).ready(now)
            and self._held_room(api, now)
            and self._minute(api, now).ready(now, self._send_keep[lane])
        )

    def _total_ready(self, now: float) -> bool:
        """The cap on all calls together has a token (or there is none)."""
        if self._total is None:
            return True
        self._total.refill(now)
        return self._total.ready(now)

    def offer(self, waiter: Waiter, now: float) -> list[Waiter]:
        """Queue `waiter`; every waiter that may go now (it among them, or not)."""
        alone = not self._waiting
        if alone and self._alone(waiter, now):  # nothing to rank it against (a quiet bridge)
            return [waiter]
        queue = self._waiting.get(waiter.api)
        if queue is None:
            queue = self._waiting[waiter.api] = ApiQueue()
        queue.add(waiter, self._served_of(waiter.chat), now)
        return [] if alone else self.grant(now)

    def _served_of(self, chat: str | None) -> float:
        """When `chat` was last granted a call (-inf: never, or no chat): the rank's second
        key, least recently served first."""
        return self._served.get(chat, -math.inf) if chat is not None else -math.inf

    def _alone(self, waiter: Waiter, now: float) -> bool:
        """`grant` for one waiter with no other waiting: its tokens taken if all are there."""
        if not self._total_ready(now):
            return False
        api = self._ready_api(waiter.api, now)
        if api is None:
            return False
        if waiter.send:
            self._sends.refill(now)
        return self._take(waiter, api, now) is _Took.GRANTED

    def _ready_api(self, name: str, now: float) -> Bucket | None:
        """API `name`'s bucket, refilled, when it has a token and room for a call held."""
        bucket = self._api(name, now)
        return bucket if bucket.ready(now) and self._held_room(name, now) else None

    def withdraw(self, waiter: Waiter) -> None:
        queue = self._waiting.get(waiter.api)
        if queue is not None and queue.remove(waiter) and not queue:
            del self._waiting[waiter.api]

    def grant(self, now: float) -> list[Waiter]:
        """Take tokens for every waiter that may go now, in the order of the module doc."""
        if not self._waiting or not self._total_ready(now):
            return []
        total = self._total
        self._sends.refill(now)
        # Only waiters whose API has a token can go: under load most wait on an empty
        # bucket, and only the few that can are ranked, best first, as far as tokens last.
        ready: dict[str, Bucket] = {}
        for name in self._waiting:
            bucket = self._ready_api(name, now)
            if bucket is not None:
                ready[name] = bucket
        if not ready:
            return []
        # The order of the module doc: the lane (-1 past its deadline), the chat's last
        # service (as it was when this grant began), arrival. The ready APIs' heads are
        # merged: the next of an API comes up when its head is taken.
        before: dict[str, float] = {}  # chats served by this grant: their service before it

        def served_of(chat: str | None) -> float:
            was = before.get(chat) if chat is not None else None
            return was if was is not None else self._served_of(chat)

        heads: list[_Entry] = []
        for name in ready:
            head = self._waiting[name].head(now, served_of)
            if head is not None:
                heads.append(head)
        heapq.heapify(heads)  # (seq is unique: a waiter itself is never compared)
        granted: list[Waiter] = []
        passed: list[_Entry] = []  # taken off their queue's heap, still waiting
        while heads and ready:
            entry = heapq.heappop(heads)
            waiter = entry[3]
            queue = self._waiting[waiter.api]
            queue.take()
            api = ready[waiter.api]
            if total is not None and not total.ready(now):
                passed.append(entry)
                break
            if not api.ready(now) or not self._held_room(waiter.api, now):
                del ready[waiter.api]
                passed.append(entry)
                continue
            chat = waiter.chat
            was = self._served_of(chat)
            took = self._take(waiter, api, now)
            if took is _Took.GRANTED:
                granted.append(waiter)
                queue.remove(waiter)
                if chat is not None:
                    before.setdefault(chat, was)
            else:
                passed.append(entry)
                if took is _Took.NO_MINUTE and (waiter.api == SEND or not queue.sends):
                    # The rest of this API's queue ranks after it, so each leaves at
                    # least as much of the same minute for the lanes above (SEND_SHARE):
                    # none could go.
                    del ready[waiter.api]
                    continue
            head = queue.head(now, served_of)
            if head is not None:
                heapq.heappush(heads, head)
        for entry in passed:
            self._waiting[entry[3].api].back(entry)
        for name in {w.api for w in granted}:
            if not self._waiting[name]:
                del self._waiting[name]
        return granted

    def _take(self, waiter: Waiter, api: Bucket, now: float) -> _Took:
        """Take `waiter`'s tokens if its minute and its chat have them (its API's bucket
        `api`, refilled, and the cap on all calls have one): whether it may go, or why not."""
        minute = self._sends if waiter.send else self._minute(waiter.api, now)
        if not minute.ready(now, self._keep(waiter, now)):
            return _Took.NO_MINUTE
        # Feishu's 5 a second to one user or group is its send-message limit: only a send
        # takes from the chat's bucket (a card entity's change, a reaction, an edit are
        # metered by the app's), though every call counts for the chat's fair turn.
        chat = self._chat(waiter.chat, now) if waiter.chat is not None and waiter.send else None
        if chat is not None and not chat.ready(now):
            return _Took.NO_CHAT
        api.tokens -= 1.0
        minute.take(now)
        if self._total is not None:
            self._total.tokens -= 1.0
        if chat is not None:
            chat.tokens -= 1.0
        if waiter.chat is not None:
            self._served[waiter.chat] = now
        self._count(waiter, now)
        return _Took.GRANTED

    def _keep(self, waiter: Waiter, now: float) -> float:
        """What `waiter` leaves in its minute for the lanes above it: nothing past its deadline."""
        return 0.0 if now >= waiter.deadline else self._send_keep[waiter.lane]

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
        total_at = now
        if self._total is not None:
            self._total.refill(now)
            total_at = self._total.ready_at(now)
        self._sends.refill(now)
        best = math.inf
        for name, queue in self._waiting.items():
            api_at = max(total_at, self._api(name, now).ready_at(now), self._held_at(name, now))
            minute = self._minute(name, now)
            # When the minute has room for a call beyond each reserve: one figure per
            # lane's reserve, not per waiter (200 chats' sends wait in one queue).
            minute_at: dict[float, float] = {}
            lanes: set[Lane] = set()
            for waiter in queue:
                if not waiter.send and waiter.lane in lanes:
                    continue  # the first of its lane stood for it (the chat is no limit)
                keep = self._keep(waiter, now)
                at = minute_at.get(keep)
                if at is None:
                    at = minute_at[keep] = max(api_at, minute.ready_at(now, keep))
                if waiter.deadline < at:  # from its deadline on it may spend the reserve
                    spent = minute_at.get(0.0)
                    if spent is None:
                        spent = minute_at[0.0] = max(api_at, minute.ready_at(now))
                    at = min(at, max(spent, waiter.deadline))
                if not waiter.send:
                    # The first of each lane stands for the rest of it: the one that came
                    # first, whose deadline is the nearest.
                    lanes.add(waiter.lane)
                    best = min(best, at)
                    if len(lanes) == len(Lane) or (not queue.sends and len(lanes) == queue.lanes):
                        break  # the rest follow one already seen
                    continue
                if at >= best:  # its chat can only make it later
                    continue
                if waiter.chat is not None:
                    at = max(at, self._chat(waiter.chat, now).ready_at(now))
                best = min(best, at)
            if best <= now:  # nothing waits for less than nothing
                break
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
        for api in list(self._apis):
            self._api(api, now)
        waiting = Counter(w.lane.name.lower() for q in self._waiting.values() for w in q)
        recent = [t for t in self.usage.recent if t >= now - self.WINDOW]
        self._sends.refill(now)
        return {
            "rate": round(self.app_rate, 3),
            "limit": self.policy.app_per_second,
            "total_limit": self.policy.total_per_second or None,
            "apis": {api: round(bucket.rate, 3) for api, bucket in sorted(self._apis.items())},
            "chat_limit": self.policy.chat_per_second,
            "sends_per_minute": self.policy.sends_per_minute,
            "sends_per_second": round(self._sends.rate, 3),  # the steady pace
            "sends_ready": round(self._sends.tokens, 3),  # the burst left (its capacity at most)
            "calls_per_second": round(len(recent) / self.WINDOW, 3),
            "waiting": {lane.name.lower(): waiting.get(lane.name.lower(), 0) for lane in Lane},
            "granted": {lane.name.lower(): self.usage.granted[lane.name.lower()] for lane in Lane},
            "waited_seconds": {
                lane.name.lower(): round(self.usage.waited.get(lane.name.lower(), 0.0), 3)
                for lane in Lane
            },
            "rate_limited": self.usage.rate_limited,
            # Calls on their way or answered within the second, by API (`Held`).
            "held": {api: held.count(now) for api, held in sorted(self._held.items())},
        }


# --- the calls waiting on the event loop --------------------------------------------------

_MESSAGES = "/open-apis/im/v1/messages"


class _Handle(Protocol):
    def cancel(self) -> None: ...


CallAt = Callable[[float, Callable[[], None]], _Handle]


def default_lane(method: str, path: str) -> Lane:
    """A call's lane when its terms name none."""
    if "/reactions" in path:
        return Lane.HINT
    if path.startswith("/open-apis/cardkit/") or method in ("PATCH", "PUT"):
        return Lane.REFRESH
    return Lane.ANSWER


def is_send(method: str, path: str) -> bool:
    """A message send: a new message in a chat (a reply included)."""
    return method == "POST" and (path == _MESSAGES or path.endswith("/reply"))


SEND = "send"  # the API a send or a reply is metered under (one: they share the minute)


def api_of(method: str, path: str) -> str:
    """The API a call is metered under: its method and path, ids left out
    (`/open-apis/<service>/<version>/<resource>/<id>/<resource>/<id>…`)."""
    if is_send(method, path):
        return SEND
    parts = path.removeprefix("/open-apis/").split("/")
    named = [":id" if i >= 3 and i % 2 == 1 else part for i, part in enumerate(parts)]
    return f"{method} {'/'.join(named)}"


class CallBudget:
    def __init__(
        self,
        policy: BudgetPolicy | None = None,
        *,
        now: Callable[[], float],
        call_at: CallAt | None = None,
        before: Spent | None = None,
    ) -> None:
        self._now = now
        self._call_at = call_at
        self._sched = CallQueue(policy or BudgetPolicy(), now(), before)
        self._wake: _Handle | None = None
        self._wake_at = 0.0

    @property
    def scheduler(self) -> CallQueue:
        return self._sched

    async def before_call(
        self, method: str, path: str, terms: CallTerms, credit: str | None = None
    ) -> str:
        """Wait for this call's turn (the session asks before each try, retries too), as
        `terms`' chat and lane; `credit`: the API a token was already taken from. The API
        the call is metered under."""
        api = api_of(method, path)
        if credit is not None:
            if credit == api:
                return api
            self._sched.refund(credit, self._now())  # paid from another API's bucket
        which = terms.lane if terms.lane is not None else default_lane(method, path)
        await self.acquire(which, terms.chat, send=api == SEND, api=api)
        return api

    async def acquire(
        self, which: Lane, chat: str | None, *, send: bool = False, api: str = ""
    ) -> None:
        queued = self._queue(which, chat, send, api)
        if queued is None:
            return
        waiter, granted = queued
        try:
            await granted
        except asyncio.CancelledError:
            self._sched.withdraw(waiter)  # (granted just before: that token is spent)
            raise

    def _queue(
        self, which: Lane, chat: str | None, send: bool, api: str
    ) -> tuple[Waiter, asyncio.Future[None]] | None:
        """Offer a call to the scheduler: None when it may go now, else its place in the
        queue and the future its grant resolves."""
        now = self._now()
        waiter = self._sched.waiter(which, chat, send, now, api)
        granted = self._sched.offer(waiter, now)
        self._release([w for w in granted if w is not waiter])
        if waiter in granted:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter.handle = future
        return waiter, future

    def may_go(self, api: str, lane: Lane = Lane.ENDING) -> bool:
        """Whether a call of `api` in `lane` would find a token now (nothing is taken)."""
        return self._sched.may_go(api, self._now(), lane)

    def try_take(self, which: Lane, api: str, chat: str | None = None) -> bool:
        """Take a token of `api` for `chat` if one is there now (nothing queued waits for
        it); the caller then makes its call with it `Paid`."""
        now = self._now()
        if not self._sched.may_go(api, now, which):
            return False  # under load, most asks: answered without queueing
        waiter = self._sched.waiter(which, chat, False, now, api)
        granted = self._sched.offer(waiter, now)
        if waiter not in granted:
            self._sched.withdraw(waiter)
        self._release([w for w in granted if w is not waiter])
        return waiter in granted

    async def take_unless(
        self,
        which: Lane,
        moot: Callable[[], bool],
        changed: Callable[[], Awaitable[None]],
        *,
        api: str,
        chat: str | None = None,
    ) -> bool:
        """A token for `chat`. One there now is taken at once; else it is waited for until
        `moot()` comes true (asked now, then each time `changed()` completes): False then,
        and nothing is taken. True: the caller makes its call with it `Paid`."""
        queued = self._queue(which, chat, api == SEND, api)
        if queued is None:
            return True
        waiter, granted = queued
        try:
            while not granted.done():
                if moot():
                    self._sched.withdraw(waiter)
                    return False
                change = asyncio.ensure_future(changed())
                await asyncio.wait({granted, change}, return_when=asyncio.FIRST_COMPLETED)
                change.cancel()
        except asyncio.CancelledError:
            self._sched.withdraw(waiter)
            raise
        return True

    def going(self, api: str) -> None:
        """A call of `api` goes now, with its grant (`before_call`)."""
        self._sched.going(api)

    def answered(self, api: str) -> None:
        """A call that went (`going`) came back, whatever its answer."""
        if self._sched.answered(api, self._now()):
            self._arm()

    def refund(self, api: str) -> None:
        """A token of `api` taken (`take_unless`, `try_take`) and not used: given back."""
        self._sched.refund(api, self._now())

    def rate_limited(
        self, reset_after: float | None, method: str, path: str, chat: str | None = None
    ) -> None:
        chat = chat if is_send(method, path) else None  # a chat's limit is on sends
        self._sched.rate_limited(self._now(), reset_after, chat, api_of(method, path))
        self._arm()

    def state(self) -> dict[str, Any]:
        return self._sched.state(self._now())

    def spent(self) -> dict[str, list[float]]:
        """Each API's grant times of the last 60 s, on this budget's clock."""
        return self._sched.spent(self._now())

    # -- waking ----------------------------------------------------------------------------

    def _release(self, granted: list[Waiter]) -> None:
        for waiter in granted:
            future = waiter.handle
            if isinstance(future, asyncio.Future) and not future.done():
                future.set_result(None)
        self._arm()

    def _pump(self) -> None:
        self._wake = None
        self._release(self._sched.grant(self._now()))

    def _arm(self) -> None:
        """Wake at the next time a waiter could go (an early wake-up just re-arms)."""
        when = self._sched.next_wake(self._now())
        if when is None or when == math.inf:  # (only an answer can free a place: `answered`)
            return
        if self._wake is not None:
            if self._wake_at <= when:
                return
            self._wake.cancel()
        self._wake_at = when
        if self._call_at is not None:
            self._wake = self._call_at(when, self._pump)
        else:
            delay = max(0.0, when - self._now())
            self._wake = asyncio.get_running_loop().call_later(delay, self._pump)
