"""A busy team under the default budget (issue 43): `feishu-bridge run` as its own process,
as an operator gets it (no raised sends or app calls), against the emulator enforcing
Feishu's published limits (50 calls a second to each API, 1,000 sends a minute, 5 sends a
second to one chat: stream_bench's `FEISHU`), N chats talking without pause: each sends its
next message as soon as the last is answered.

    python bench/busy_team.py                   # 24 chats, 8 minutes
    python bench/busy_team.py --minutes 1       # a quick run
    python bench/busy_team.py --json            # the figures as JSON too

Each chat cycles through memory_bench's turns (an echo, a short stream, an approval clicked
"allow once" as soon as its card shows, a slow turn silent past the running hint), one of
its approvals a question instead (answered with its first choice as soon as its card
shows). One card in eight, drawn (seeded per chat), nobody answers: it times out after
BRIDGE_APPROVAL_TIMEOUT_SECONDS=30, as in the issue. Every message carries a token its
answer repeats; a message is answered when the token reaches Feishu, or (nobody answering)
when the timeout line does. The criteria of issue 43:

- **no chat waits more than 5 s for its next visible change while Feishu's limits leave
  room.** A visible change is a call Feishu took (200, code 0) that changes what the chat
  shows: a message posted, a card patched or updated (a CardKit card once it is posted), a
  reaction added or removed (the ack is the first sign a message was seen), and a card a
  click's answer replaced. A chat *waits* while it has something pending (from its message
  to its answer), except while a card asks the user (from the card's post until the click,
  or until the timeout is due for a card nobody answers): that is the user's turn. Each
  wait runs from the message, a change or the end of the user's turn to the next change.
  It prints each chat's longest wait, the max and p99 over all waits, and each wait past
  5 s: what started and ended it; whether Feishu's limits had room then (the most calls
  Feishu took in a trailing minute of each API during the wait, against 1,000 (the
  emulator enforces the sends' minute only, the bridge paces every API's), in a trailing
  second of each API, against 50, and sends to the chat a second, against 5: a wait while
  one was at its limit is Feishu's, any other the bridge's); and the bridge's own budget
  then, read from its /metrics each second: calls waiting by lane (ending, answer, card,
  hint, refresh) and the sends left in its burst, and which lanes with calls waiting were
  held back by its pace (the burst under what a call of that lane needs to go: the lanes
  below the ending leave a share of the burst to the lanes above).
- **no approval or question times out before its card was shown for the full timeout.**
  Per kind: asked, shown (the card posted), answered (the click's answer came back), timed
  out (the line "…timed out…" posted); the time from each timed-out card's post to its
  timeout line, which must be at least the timeout; and how many timed out without a card
  shown (must be 0).

Also: the messages answered, the 429s (must be 0), the sends Feishu took each minute and
each 10 s (steady pacing, no burst then starve), each API's busiest minute and second, the
bridge's calls granted, mean wait and most waiting by lane, its CPU, and how late the
emulator's loop (this process's) woke at worst.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import itertools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.memory_bench import button_value  # noqa: E402
from bench.memory_bench import script as memory_script  # noqa: E402
from bench.spawned import (  # noqa: E402
    BRIDGE,
    bridge_env,
    cpu_s,
    follow_calls,
    free_port,
    loop_lag,
    wait_healthy,
)
from bench.stream_bench import FEISHU, json_value, pct, python_path  # noqa: E402
from bridge.config.budget import FEISHU_SENDS_PER_MINUTE, MINUTE_MARGIN  # noqa: E402
from bridge.core.delivery import Lane  # noqa: E402
from bridge.devtools.emulator import FeishuEmulator  # noqa: E402
from bridge.feishu.budget import SEND, BudgetPolicy, api_of, kept_for_lanes  # noqa: E402
from bridge.i18n import LOCALES, load_catalog  # noqa: E402

TIMEOUT = 30.0  # BRIDGE_APPROVAL_TIMEOUT_SECONDS, as in the issue
WAIT = 5.0  # a chat waiting longer than this for its next visible change is counted
STUCK = 120.0  # a message not answered by then is counted stuck, and the chat goes on
SETTLE = 90.0  # after the run, how long the messages in flight may take to end
PACE = FEISHU_SENDS_PER_MINUTE * MINUTE_MARGIN  # the minute's sends the bridge paces to

APPROVAL, QUESTION = "approval", "question"  # the kinds of card that ask the user
UNANSWERED = "-unanswered"  # a card nobody answers: it times out
# Each chat's turns, in turn (chat i starts at turn i): memory_bench's, with a question
# where it has its second approval.
CYCLE = (
    *("echo", "stream", "echo", APPROVAL, "echo", "stream", "echo", QUESTION),
    *("echo", "stream", "echo", APPROVAL, "echo", "stream", "echo", "slow"),
)
# The share of cards nobody answers, drawn per card (seeded per chat): drawn, not placed in
# the cycle, so the chats' 30 s waits do not fall in step and leave the bridge idle.
UNANSWERED_SHARE = 1 / 8


def script(kind: str, token: str) -> str:
    """The user's message: what the scripted agent does, ending with the token."""
    if kind.startswith(QUESTION):
        ask = "Which env? staging|production" if kind == QUESTION else "Which region? north|south"
        return f"ask {ask}\nsay {token}"
    if kind == APPROVAL + UNANSWERED:
        return f"permission Deploy to production\nsay {token}"
    return memory_script(kind, token)


def _lines(*keys: str) -> re.Pattern[str]:
    """The bridge's lines of `keys`, in every locale, placeholders matching anything."""
    patterns = set()
    for locale in LOCALES:
        catalog = load_catalog(locale)
        for key in keys:
            parts = re.split(r"\{\w+\}", catalog[key])
            patterns.add(".*?".join(re.escape(part) for part in parts))
    return re.compile("|".join(sorted(patterns)))


TIMED_OUT = _lines("presence.approval_timed_out", "presence.reply_timed_out")
_MESSAGE = re.compile(r"^/open-apis/im/v1/messages/([^/]+)(?:/([^/]+))?")
_CARD = re.compile(r"^/open-apis/cardkit/v1/cards/([^/]+)")


LANES = tuple(lane.name.lower() for lane in Lane)  # the budget's lanes, first first
# The sends a call of each lane needs in the bridge's burst to go: one, and the share of
# the burst it leaves to the lanes above it (bridge/feishu/budget.py).
NEEDS = {
    lane.name.lower(): 1.0 + kept
    for lane, kept in zip(Lane, kept_for_lanes(BudgetPolicy(sends_per_minute=PACE)), strict=True)
}
# Its one app's series (labelled app="default"), by lane where they have one.
_BUDGET = re.compile(
    r'^bridge_feishu_budget_(\w+?)\{app="[\w-]+"(?:,lane="(\w+)")?\} (\S+)$', re.MULTILINE
)


async def scrape(port: int, samples: list[tuple[float, dict[str, float]]]) -> None:
    """The bridge's call budget from its /metrics each second until cancelled: calls
    waiting by lane, calls granted and seconds waited by lane, the sends' burst left."""
    async with httpx.AsyncClient(trust_env=False, timeout=2.0) as http:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
                found = _BUDGET.finditer(text)
                sample = {m[1] + (f":{m[2]}" if m[2] else ""): float(m[3]) for m in found}
                samples.append((time.time(), sample))
            await asyncio.sleep(1.0)


def metered(call: Any) -> str:
    """The API Feishu meters the call under, as the bridge's budget names it (ids left
    out; a send and a reply are one, `send`)."""
    return api_of(call.method, call.path)


def is_send(call: Any) -> bool:
    return metered(call) == SEND


@dataclass
class Ask:
    """One message of a chat, from its push to its answer."""

    chat: str
    user: str
    kind: str
    token: str
    sent: float  # wall clock, as the emulator's record
    done: asyncio.Future[None]
    ended: float | None = None  # the answer (or the timeout line) reached Feishu
    how: str = ""  # answered, timed out, stuck
    shown: float | None = None  # its card was posted
    clicked: float | None = None  # the click's answer came back
    click_ok: bool = False

    @property
    def card_kind(self) -> str | None:
        """approval or question when the turn asks the user with a card."""
        base = self.kind.removesuffix(UNANSWERED)
        return base if base in (APPROVAL, QUESTION) else None

    @property
    def unanswered(self) -> bool:
        return self.kind.endswith(UNANSWERED)

    def users_turn(self) -> tuple[float, float] | None:
        """While its card waits for the user: no wait of the bridge's runs then."""
        if self.shown is None:
            return None
        if self.unanswered:
            return self.shown, self.shown + TIMEOUT
        return self.shown, self.clicked if self.clicked is not None else self.shown


@dataclass(frozen=True)
class Change:
    at: float
    what: str  # message, card, reaction, edit, recall, click (a card the click replaced)
    api: str


class Team:
    """The chats, each sending its next message once the last is answered, and what the
    bridge's calls changed in each, read from the emulator's record as they come."""

    def __init__(self, emu: FeishuEmulator, seed: int = 0) -> None:
        self.emu = emu
        self.seed = seed
        self.stopping = False
        self.asks: list[Ask] = []
        self.chats: list[str] = []
        self.changes: dict[str, list[Change]] = defaultdict(list)
        self._current: dict[str, Ask] = {}  # chat -> its message pending (or the last one)
        self._card_chat: dict[str, str] = {}  # CardKit card -> the chat it was posted in
        self._unposted: dict[str, str] = {}  # CardKit card not posted yet -> its text so far
        self._clicks: set[asyncio.Task[None]] = set()

    async def chat(self, i: int) -> None:
        user = f"ou_busy{i}"
        chat = self.emu.open_chat("p2p", user_open_id=user)
        self.chats.append(chat)
        loop = asyncio.get_running_loop()
        draw = random.Random(f"{self.seed}:{i}")
        for n in itertools.count():
            if self.stopping:
                return
            kind = CYCLE[(i + n) % len(CYCLE)]
            if kind in (APPROVAL, QUESTION) and draw.random() < UNANSWERED_SHARE:
                kind += UNANSWERED
            ask = Ask(chat, user, kind, f"busyq{i}n{n}q", time.time(), loop.create_future())
            self._current[chat] = ask
            self.asks.append(ask)
            await self.emu.send_user_message(
                script(kind, ask.token), chat_id=chat, sender_open_id=user
            )
            try:
                await asyncio.wait_for(asyncio.shield(ask.done), STUCK)
            except TimeoutError:
                ask.how = "stuck"

    async def watch(self) -> None:
        """Reads each call Feishu took once (and lets the emulator forget it)."""
        await follow_calls(self.emu, self._took)

    def _took(self, call: Any) -> None:
        if call.ok and call.method != "GET":
            self._look(call)

    def _look(self, call: Any) -> None:
        chat, what, text = self._where(call)
        if chat is None:
            return
        self.changes[chat].append(Change(call.at, what, metered(call)))
        ask = self._current.get(chat)
        if ask is None or ask.ended is not None:
            return
        if ask.token in text:
            self._end(ask, call.at, "answered")
        elif is_send(call) and TIMED_OUT.search(text):
            self._end(ask, call.at, "timed out")
        elif is_send(call) and ask.card_kind is not None:
            content = json_value(call.body.get("content"))
            choice = "allow-once" if ask.card_kind == APPROVAL else None
            value = button_value(content, ask.card_kind, choice)
            card = ((call.response or {}).get("data") or {}).get("message_id")
            if value is not None and card and ask.shown is None:
                ask.shown = call.at
                if not ask.unanswered:
                    task = asyncio.create_task(self._click(ask, card, value))
                    self._clicks.add(task)
                    task.add_done_callback(self._clicks.discard)

    def _where(self, call: Any) -> tuple[str | None, str, str]:
        """The chat the call changed (None: no chat's view changed), how, and the text it
        shows there (a CardKit card posted: also what it was given before)."""
        text = json.dumps(call.body, ensure_ascii=False)
        data = (call.response or {}).get("data") or {}
        if is_send(call):
            chat = str(data.get("chat_id"))
            content = json_value(call.body.get("content"))
            if isinstance(content, dict) and content.get("type") == "card":
                card = str((content.get("data") or {}).get("card_id"))
                self._card_chat[card] = chat
                return chat, "card", self._unposted.pop(card, "") + text
            return chat, "message", text
        if call.method == "POST" and call.path == "/open-apis/cardkit/v1/cards":
            self._unposted[str(data.get("card_id"))] = text
            return None, "", text
        cardkit = _CARD.match(call.path)
        if cardkit is not None:
            card = cardkit.group(1)
            found = self._card_chat.get(card)
            if found is None:  # not posted yet: nobody sees it
                self._unposted[card] = self._unposted.get(card, "") + text
            return found, "card", text
        message = _MESSAGE.match(call.path)
        if message is None or message.group(2) in ("urgent_app", "urgent_sms", "urgent_phone"):
            return None, "", text  # not a chat's view (an urgent notification is apart)
        try:
            chat = self.emu.message(message.group(1)).chat_id
        except KeyError:
            return None, "", text
        if message.group(2) == "reactions":
            return chat, "reaction", text
        return chat, "recall" if call.method == "DELETE" else "edit", text

    async def _click(self, ask: Ask, card: str, value: dict[str, Any]) -> None:
        result = await self.emu.click_card(card, value, ask.user)  # only the asker may answer
        ask.clicked, ask.click_ok = time.time(), result.ok
        if result.card_replaced:
            self.changes[ask.chat].append(Change(ask.clicked, "click", "card callback"))

    def _end(self, ask: Ask, at: float, how: str) -> None:
        ask.ended, ask.how = at, how
        if not ask.done.done():
            ask.done.set_result(None)


# --- the figures ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    chat: str
    kind: str  # the pending message's kind
    start: float
    end: float
    started_by: str  # the message, a change (what, on which API) or the user's turn over
    ended_by: str  # the change that ended it ("-" when none came)

    @property
    def seconds(self) -> float:
        return self.end - self.start


def waits(team: Team, until: float) -> list[Wait]:
    """Every wait of every chat (the module's docstring): between the message, each change
    and the end of the user's turn, to the next change, while the message is pending."""
    out = []
    for ask in team.asks:
        end = ask.ended if ask.ended is not None else min(until, ask.sent + STUCK)
        turn = ask.users_turn()
        points = [(ask.sent, "message sent")]
        points += [(c.at, f"{c.what} ({c.api})") for c in team.changes[ask.chat]]
        points = [p for p in points if ask.sent <= p[0] <= end]
        if turn is not None and ask.sent < turn[1] < end:
            points.append((turn[1], "user's turn over"))
        points.sort()
        if ask.ended is None:
            points.append((end, "-"))  # still pending at the end: the wait so far
        for (a, began), (b, what) in itertools.pairwise(points):
            if turn is not None and turn[0] <= a < turn[1]:
                continue  # the user's turn
            out.append(Wait(ask.chat, ask.kind, a, b, began, what))
    return out


@dataclass
class Meter:
    """What Feishu took (the emulator's count), to tell whether its limits had room."""

    offset: float  # wall clock minus the emulator's (monotonic) clock
    taken: list[Any] = field(default_factory=list)
    by_api: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    chat_sends: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    sends: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        for c in self.taken:
            at = c.at + self.offset
            self.by_api[metered(c)].append(at)
            if is_send(c):
                self.sends.append(at)
                if c.chat is not None:
                    self.chat_sends[c.chat].append(at)

    @staticmethod
    def busiest(times: list[float], a: float, b: float, window: float) -> int:
        """The most of `times` in any trailing `window` ending within [a, b]."""
        ends = [a, *times[bisect.bisect_left(times, a) : bisect.bisect_right(times, b)]]
        return max(
            bisect.bisect_right(times, t) - bisect.bisect_right(times, t - window) for t in ends
        )

    def peaks(self, a: float, b: float) -> dict[str, tuple[int, int]]:
        """Each API's most calls Feishu took in a trailing minute and second within [a, b]."""
        return {
            api: (self.busiest(t, a, b, 60.0), self.busiest(t, a, b, 1.0))
            for api, t in sorted(self.by_api.items())
        }

    def room(self, wait: Wait) -> dict[str, Any]:
        """Whether Feishu's limits had room during the wait: each API's minute (1,000: Feishu
        meters every API's minute as it does the sends', though the emulator enforces the
        sends' only) and second (50), and the chat's sends a second (5)."""
        peaks = self.peaks(wait.start, wait.end)
        by_minute = max(peaks.items(), key=lambda i: i[1][0], default=("-", (0, 0)))
        by_second = max(peaks.items(), key=lambda i: i[1][1], default=("-", (0, 0)))
        chat = self.busiest(self.chat_sends.get(wait.chat, []), wait.start, wait.end, 1.0)
        spent = (
            by_minute[1][0] >= FEISHU["sends_per_minute"]
            or by_second[1][1] >= FEISHU["app_per_second"]
            or chat >= FEISHU["chat_per_second"]
        )
        return {
            "sends_minute": peaks.get(SEND, (0, 0))[0],
            "busiest_api_minute": f"{by_minute[1][0]} {by_minute[0]}",
            "busiest_api_second": f"{by_second[1][1]} {by_second[0]}",
            "chat_sends_second": chat,
            "feishu_spent": spent,
        }


@dataclass
class Budget:
    """The bridge's budget as /metrics showed it each second."""

    samples: list[tuple[float, dict[str, float]]]

    def during(self, a: float, b: float) -> list[dict[str, float]]:
        """The samples from a second before `a` to a second after `b`."""
        return [s for at, s in self.samples if a - 1.0 <= at <= b + 1.0]

    def queued(self, a: float, b: float) -> dict[str, Any]:
        """The most calls waiting in each lane and the least of the sends' burst left."""
        samples = self.during(a, b)
        most = {
            lane: max((s.get(f"waiting:{lane}", 0) for s in samples), default=0) for lane in LANES
        }
        ready = min((s.get("sends_ready", float("nan")) for s in samples), default=float("nan"))
        held = [lane for lane, need in NEEDS.items() if most[lane] and ready < need]
        return {
            "queued": {k: int(v) for k, v in most.items() if v},
            "sends_ready_min": ready,
            "held_by_pace": held,  # lanes with calls waiting while the burst was under their need
        }

    def lanes(self, a: float, b: float) -> dict[str, dict[str, float]]:
        """Per lane over [a, b]: calls granted, their mean wait, the most waiting at once."""
        samples = self.during(a, b)
        if len(samples) < 2:
            return {}
        first, last = samples[0], samples[-1]
        out = {}
        for lane in LANES:
            granted = last.get(f"calls_total:{lane}", 0) - first.get(f"calls_total:{lane}", 0)
            waited = last.get(f"wait_seconds_total:{lane}", 0) - first.get(
                f"wait_seconds_total:{lane}", 0
            )
            out[lane] = {
                "granted": granted,
                "mean_wait_s": waited / granted if granted else float("nan"),
                "most_waiting": max(s.get(f"waiting:{lane}", 0) for s in samples),
            }
        return out


def requests(team: Team) -> dict[str, Any]:
    """Approvals and questions: asked, shown, answered, timed out (the module's docstring)."""
    out: dict[str, Any] = {}
    for kind in (APPROVAL, QUESTION):
        asks = [a for a in team.asks if a.card_kind == kind]
        timed_out = [a for a in asks if a.how == "timed out"]
        shown_for = [a.ended - a.shown for a in timed_out if a.ended and a.shown is not None]
        out[kind] = {
            "asked": len(asks),
            "to_answer": sum(not a.unanswered for a in asks),
            "shown": sum(a.shown is not None for a in asks),
            "answered": sum(a.click_ok for a in asks),
            "timed_out": len(timed_out),
            "timed_out_unshown": sum(a.shown is None for a in timed_out),
            "timed_out_early": sum(s < TIMEOUT for s in shown_for),
            "shown_to_timeout_min_s": min(shown_for, default=float("nan")),
            "shown_to_timeout_max_s": max(shown_for, default=float("nan")),
            "shown_to_timeout_s": sorted(round(s, 2) for s in shown_for),
            "unanswered_pending_at_end": sum(a.unanswered and a.ended is None for a in asks),
        }
    return out


def figures(
    team: Team, emu: FeishuEmulator, meter: Meter, budget: Budget, start: float, stop: float
) -> dict[str, Any]:
    all_waits = waits(team, stop)
    seconds = [w.seconds for w in all_waits]
    long = sorted((w for w in all_waits if w.seconds > WAIT), key=lambda w: -w.seconds)
    per_chat: dict[str, float] = {}
    for w in all_waits:
        per_chat[w.chat] = max(per_chat.get(w.chat, 0.0), w.seconds)
    details = [
        {
            "chat": w.chat,
            "at_s": w.start - start,
            "wait_s": w.seconds,
            "kind": w.kind,
            "started_by": w.started_by,
            "ended_by": w.ended_by,
            **meter.room(w),
            **budget.queued(w.start, w.end),
        }
        for w in long
    ]
    minutes = int((stop - start) // 60 + 1)
    per_minute = [0] * minutes
    tens = [0] * int((stop - start) // 10 + 1)
    for at in meter.sends:
        if start <= at < stop:
            per_minute[int((at - start) // 60)] += 1
            tens[int((at - start) // 10)] += 1
    ready = [
        s["sends_ready"] for at, s in budget.samples if start <= at <= stop and "sends_ready" in s
    ]
    refused = emu.limits.refused()
    how = Counter(a.how or "pending at the end" for a in team.asks)
    return {
        "messages_sent": len(team.asks),
        "answered": how["answered"],
        "timed_out": how["timed out"],
        "stuck": how["stuck"],
        "pending_at_end": how["pending at the end"],
        "rate_limited": len(refused),
        "rate_limited_by": dict(Counter(f"{c.limited} {metered(c)}" for c in refused)),
        "waits": len(seconds),
        "wait_max_s": max(seconds, default=float("nan")),
        "wait_p99_s": pct(seconds, 0.99),
        "wait_p50_s": pct(seconds, 0.5),
        "waits_over_5s": len(long),
        "waits_over_5s_feishu_spent": sum(d["feishu_spent"] for d in details),
        "waits_over_5s_with_room": sum(not d["feishu_spent"] for d in details),
        "waits_over_5s_held_by_pace": sum(
            bool(d["held_by_pace"]) and not d["feishu_spent"] for d in details
        ),
        "chat_wait_max_s": [per_chat.get(chat, 0.0) for chat in team.chats],
        "long_waits": details,
        "long_waits_ended_by": dict(Counter(d["ended_by"] for d in details)),
        "requests": requests(team),
        "sends_per_minute": per_minute,
        "sends_per_10s": tens,
        "sends_max_minute": Meter.busiest(meter.sends, start, stop, 60.0),
        "lanes": budget.lanes(start, stop),
        "api_peaks": meter.peaks(start, stop),
        "sends_ready_p10_p50": (pct(ready, 0.1), pct(ready, 0.5)),
    }


def report(f: dict[str, Any], minutes: float) -> None:
    room = f["waits_over_5s_with_room"]
    print(
        f"messages: sent {f['messages_sent']}, answered {f['answered']}, ended by a timeout"
        f" {f['timed_out']}, stuck past {STUCK:.0f} s {f['stuck']}, pending at the end"
        f" {f['pending_at_end']}"
    )
    print(f"429s: {f['rate_limited']} {f['rate_limited_by'] or ''}")
    print(
        f"waits for the next visible change ({f['waits']}): max {f['wait_max_s']:.2f} s, p99"
        f" {f['wait_p99_s']:.2f} s, p50 {f['wait_p50_s']:.2f} s; over {WAIT:g} s:"
        f" {f['waits_over_5s']} ({room} while Feishu's limits had room,"
        f" {f['waits_over_5s_feishu_spent']} while one was spent; of those with room,"
        f" {f['waits_over_5s_held_by_pace']} while the bridge's pace held back a lane with"
        " calls waiting)"
    )
    print("each chat's longest wait, s: " + " ".join(f"{s:.1f}" for s in f["chat_wait_max_s"]))
    if f["long_waits"]:
        print(f"waits over {WAIT:g} s, longest first; what ended them:", f["long_waits_ended_by"])
        for d in f["long_waits"][:30]:
            queued = " ".join(f"{lane} {n}" for lane, n in d["queued"].items()) or "none"
            print(
                f"  {int(d['at_s'] // 60):2d}:{d['at_s'] % 60:04.1f} {d['wait_s']:5.2f} s"
                f" {d['kind']}: {d['started_by']} → {d['ended_by']}; Feishu took"
                f" {d['sends_minute']} sends/min, busiest API {d['busiest_api_minute']}/min,"
                f" {d['busiest_api_second']}/s, {d['chat_sends_second']}/s to the chat"
                f"{' (SPENT)' if d['feishu_spent'] else ''}; bridge queued: {queued},"
                f" sends burst left ≥ {d['sends_ready_min']:.1f}"
                + (f", too few for {'/'.join(d['held_by_pace'])}" if d["held_by_pace"] else "")
            )
        if len(f["long_waits"]) > 30:
            print(f"  … and {len(f['long_waits']) - 30} more (--json lists them all)")
    for kind, r in f["requests"].items():
        print(
            f"{kind}s: asked {r['asked']} ({r['to_answer']} to be answered), shown {r['shown']},"
            f" answered {r['answered']}, timed out {r['timed_out']} (without a card shown:"
            f" {r['timed_out_unshown']}; shown less than {TIMEOUT:g} s:"
            f" {r['timed_out_early']}); card shown → timeout line min"
            f" {r['shown_to_timeout_min_s']:.2f} s, max {r['shown_to_timeout_max_s']:.2f} s;"
            f" unanswered still waiting at the end {r['unanswered_pending_at_end']}"
        )
    print(
        "sends Feishu took per minute: "
        + " ".join(str(n) for n in f["sends_per_minute"])
        + f" (the last minute partial; most in any 60 s: {f['sends_max_minute']};"
        f" Feishu's limit {FEISHU['sends_per_minute']}, the bridge's pace {PACE:.0f})"
    )
    print("sends Feishu took per 10 s: " + " ".join(str(n) for n in f["sends_per_10s"]))
    steady = f["sends_per_10s"][6 : int(minutes * 6)]  # after the first minute, before the stop
    if steady:
        print(
            f"  after the first minute: min {min(steady)}, max {max(steady)},"
            f" mean {sum(steady) / len(steady):.0f} (the bridge's steady pace:"
            f" {PACE / 6:.0f})"
        )
    print(
        "Feishu's busiest minute / second per API: "
        + ", ".join(f"{api} {m}/{sec}" for api, (m, sec) in f["api_peaks"].items())
    )
    low, mid = f["sends_ready_p10_p50"]
    print(
        f"the bridge's sends burst left (/metrics sends_ready, each second): p10 {low:.1f},"
        f" p50 {mid:.1f}"
    )
    print("the bridge's budget per lane (calls granted, mean wait, most waiting at once):")
    print(
        "  "
        + "; ".join(
            f"{lane} {v['granted']:.0f}, {v['mean_wait_s']:.2f} s, {v['most_waiting']:.0f}"
            for lane, v in f["lanes"].items()
        )
    )
    waits_ok = room == 0
    timeouts_ok = all(
        r["timed_out_unshown"] == 0 and r["timed_out_early"] == 0 for r in f["requests"].values()
    )
    print(
        f"criteria: no wait over {WAIT:g} s while Feishu's limits had room:"
        f" {'yes' if waits_ok else 'NO'}; no approval or question timed out before its card"
        f" was shown {TIMEOUT:g} s: {'yes' if timeouts_ok else 'NO'}; 429s 0:"
        f" {'yes' if f['rate_limited'] == 0 else 'NO'}"
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="busy-team-"))
    (folder / "work").mkdir()
    async with FeishuEmulator(time_scale=1.0) as emu:
        emu.set_rate_limits(**FEISHU)
        port = free_port()
        emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
        env = bridge_env(
            emu,
            folder,
            port,
            BRIDGE_ALLOW_ALL="true",
            BRIDGE_PRESENCE_STYLE=args.style,
            BRIDGE_APPROVAL_TIMEOUT_SECONDS=str(TIMEOUT),
            BRIDGE_LOG_LEVEL="WARNING",
            PYTHONPATH=python_path(),
        )
        with (folder / "bridge.log").open("wb") as out:
            process = subprocess.Popen(  # noqa: ASYNC220 - once per run
                [str(BRIDGE), "run"], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        team = Team(emu, args.seed)
        lags: list[float] = []
        samples: list[tuple[float, dict[str, float]]] = []
        ops = int(env["BRIDGE_OPS_PORT"])
        tasks = [asyncio.create_task(loop_lag(lags)), asyncio.create_task(scrape(ops, samples))]
        try:
            await wait_healthy(port, process)
            load = os.getloadavg()
            print(
                f"{args.chats} chats, {args.minutes:g} min, style {args.style}, the default"
                f" budget, Feishu's limits enforced {FEISHU}, approval timeout {TIMEOUT:g} s;"
                f" load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()}"
                f" cores); log {folder / 'bridge.log'}",
                flush=True,
            )
            offset = time.time() - time.monotonic()  # the emulator's clock is monotonic
            start, cpu0 = time.time(), cpu_s(process.pid)
            tasks.append(asyncio.create_task(team.watch()))
            chats = [asyncio.create_task(team.chat(i)) for i in range(args.chats)]
            tasks += chats
            for minute in range(1, int(args.minutes) + 1):
                await asyncio.sleep(max(0.0, start + 60 * minute - time.time()))
                answered = sum(a.how == "answered" for a in team.asks)
                print(f"  {minute} min: {answered} answered", flush=True)
            await asyncio.sleep(max(0.0, start + 60 * args.minutes - time.time()))
            stop = time.time()
            cpu = cpu_s(process.pid) - cpu0
            team.stopping = True  # no new messages; those in flight may end
            await asyncio.wait(chats, timeout=SETTLE)
            await asyncio.sleep(1.0)  # the last calls read
            if process.poll() is not None:
                raise RuntimeError(f"the bridge exited {process.returncode}")
            taken = [c for c in emu.limits.counted if c.limited is None]
            meter, budget = Meter(offset, taken), Budget(samples)
            result = figures(team, emu, meter, budget, start, time.time())
            result["bridge_core_pct"] = 100 * cpu / (stop - start)
            result["emulator_lag_max_s"] = max(lags, default=0.0)
            result["log"] = str(folder / "bridge.log")
            return result
        finally:
            for task in tasks:
                task.cancel()
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--chats", type=int, default=24)
    parser.add_argument("--style", choices=("messages", "card"), default="messages")
    parser.add_argument("--seed", type=int, default=0, help="draws the cards nobody answers")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    report(result, args.minutes)
    print(
        f"bridge {result['bridge_core_pct']:.0f}% of a core; emulator loop late at most"
        f" {result['emulator_lag_max_s']:.2f} s"
    )
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
