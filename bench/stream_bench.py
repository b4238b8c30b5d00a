"""Streaming turns at scale (issues 33 and 43): `feishu-bridge run` as its own process against
the emulator enforcing Feishu's rate limits, N chats each running a realistic coding-agent
turn (the scripted agent's `realistic`: 30–80 updates a second of 5–40 characters, thoughts
and a tool call every 2–5 s, then the answer, streamed at the same pace). Answers are drawn
(seeded) from `--sizes` characters in paragraphs; a share `--code` of them is Markdown with
```python blocks of up to a few hundred lines, inline code, bold words and bullet lists.

    python bench/stream_bench.py                             # N = 1, 50, 200; both styles
    python bench/stream_bench.py --n 1,20 --seconds 5        # a quick run
    python bench/stream_bench.py --n 200 --ramp 10           # arrivals spread over 10 s
    python bench/stream_bench.py --sizes 2000,6000 --code 0  # issue 33's plain answers

Everything is read from the emulator's record of the calls Feishu took (a call answered
200 with code 0), replayed in order into what each chat showed: the cards posted in it
(their `answer` element as each update left it) and the messages of the answer.

**The visible answer** of a turn is the concatenation, in posting order, of the `answer`
elements of its cards (the status card first, then the continuation cards titled
"回答（续 2）"… posted below it), followed by the answer's messages: text messages that are
not one of the bridge's own lines (any text of translations/*.json: the hint, heartbeats)
and the rich answer cards (one markdown element, no element_id). In messages style that is
the messages alone; in card style normally the cards alone (only what outgrew 8 cards
follows as messages).

**How exactness is judged.** Cards show the answer as card Markdown
(bridge/feishu/cards/status.py `answer_markdown`, bridge/feishu/text.py): `[]<>` become
fullwidth lookalikes in words, mentions get a zero-width space, a Markdown answer is parsed
and written again (blocks joined by blank lines, emphasis and list markers redrawn, fences
redrawn or, in messages, reopened in the next part). So both the agent's answer and the
visible answer are compared as their *words*: fence lines (```lang) dropped whole,
`［］＜＞` read as `[]<>`, and whitespace, zero-width spaces and the characters
`` ` * _ # > + ~ | \\ - `` dropped. **exact** = those words are equal: every word of the
answer shown, once, in order. A turn that is not exact is *repeated* (the visible words are
longer than the answer's, or a message repeats text a card shows), *missing* (shorter) or
*garbled* (as long, different). Separately, **code intact** checks what the words cannot:
the lines of the answer's code blocks (a CommonMark parse) against the code lines the
chat's pieces show when each is parsed alone as Feishu renders it (same lines, same
indentation, same characters, in order), for turns whose answer has code.

Per style and N it prints one row (and with `--json` that row as JSON, per turn details
included):
- **429**: calls the emulator refused past a limit (50/s to each API, sends 1,000/min, sends
  to one chat 5/s: Feishu's documented figures, docs/scaling.md; with `--total` also that
  many a second to all APIs together, the bridge told so);
- **exact x/N** as above (with how many were repeated / missing / garbled), **code x/M**,
  and (after the row) status or continuation cards still in streaming mode at the end;
- **silent**: the longest a streaming chat saw nothing new (any call Feishu took that
  changes the chat: a card update, a message, a reaction), from `FIRST_HINT` after the
  message (the product's first-hint promise) to the agent's last chunk; max over chats, and
  how many chats went silent over 5 s;
- **chunk→visible p50 / p95**: from the agent writing a chunk of the answer (its log's wall
  clock) to the chat first showing the answer's words up to that chunk's end;
- **first sign p50 / max**: from the message to the first thing the chat shows (the ack
  reaction, the hint line or the status card);
- **end p50 / p95 / max**: from the agent's last chunk to the chat showing the whole answer
  (its words complete); turns never complete are left out (they are not exact);
- **cpu**: the bridge process's own CPU (from /proc; the agents are other processes) per
  agent update, from the first message (sent once the bridge, up, has gone quiet: the
  ACP SDK it imports in the background after `/healthz` is a one-time cost, not a
  turn's), beside a bare ACP reader's (`floor`: the same prompts to the same scripted
  agent, two processes as the bridge has, read by a client that does nothing, from
  starting them, a session each prompt, as the bridge's figure counts; run alone,
  so the two never share the cores, once before the styles of each N and once after, and
  the mean of the two taken: this machine's speed drifts by 10-20% over minutes, and a
  floor on either side of the bridge's run cancels a steady drift; both are in the JSON);
- **calls/turn, sends/turn**: every call the bridge made from the first message on (refused
  ones too), divided by N; by API path (ids as `:id`) in the JSON; and (after the row) the
  messages Feishu took per turn by kind: a line of the bridge's by its translation key, an
  answer's text or card, a status card;
- **idle budget**: the longest stretch with no send taken while some chat had an answer
  pending (from the agent's last chunk until its answer showed whole) and the last minute's
  sends were under the bridge's pace (`SENDS_PER_MINUTE`), and how many such stretches
  reached 2 s: sends that waited while the budget had room (approximate: a continuation
  card waiting to be posted mid-answer is not seen as pending).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import functools
import itertools
import json
import os
import re
import string
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from markdown_it import MarkdownIt  # noqa: E402

from bench.spawned import (  # noqa: E402
    BRIDGE,
    bridge_env,
    cpu_s,
    free_port,
    loop_lag,
    wait_healthy,
    wait_quiet,
)
from bridge.config.budget import FEISHU_SENDS_PER_MINUTE, MINUTE_MARGIN  # noqa: E402
from bridge.devtools.emulator import FeishuEmulator  # noqa: E402
from bridge.i18n import LOCALES, load_catalog  # noqa: E402

FEISHU = {"app_per_second": 50, "sends_per_minute": 1000, "chat_per_second": 5}
FIRST_HINT = 5.0  # the product's default BRIDGE_FIRST_HINT_SECONDS
SILENT = 5.0  # a streaming chat silent longer than this is counted
STALL = 2.0  # an idle-budget stretch this long is counted
SENDS_PER_MINUTE = FEISHU_SENDS_PER_MINUTE * MINUTE_MARGIN  # the bridge's pace by default
AGENTS = 2  # agent processes, for the bridge (BRIDGE_MAX_AGENTS) and the floor alike
AGENT = [sys.executable, "-m", "bridge.devtools.scripted_agent"]


def python_path() -> str:
    """This checkout first: the bridge and the agents it starts run the code measured."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- words: the answer as compared --------------------------------------------------------

_FENCE_LINE = re.compile(r"^[ \t]*(?:`{3,}|~{3,}).*$", re.MULTILINE)
_MARKUP = re.compile(r"[\s\u200b`*_#>+~|\\-]")
_LOOKALIKES = str.maketrans("［］＜＞", "[]<>")
_GONE = "\0"


def _masked(text: str) -> str:
    """`text` with what the comparison ignores replaced by _GONE, character for character."""
    text = _FENCE_LINE.sub(lambda m: _GONE * len(m.group()), text.translate(_LOOKALIKES))
    return _MARKUP.sub(_GONE, text)


def words(text: str) -> str:
    """What exactness compares (the module's docstring): rendering-proof, order-keeping."""
    return _masked(text).replace(_GONE, "")


_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def code_lines(pieces: Iterable[str]) -> list[str]:
    """The lines of the code blocks each piece shows, parsed alone, in order (blank lines
    and trailing spaces dropped: a block cut in two loses nothing to them)."""
    out: list[str] = []
    for piece in pieces:
        for token in _PARSER.parse(piece):
            if token.type in ("fence", "code_block"):
                out += [line.rstrip() for line in token.content.splitlines() if line.strip()]
    return out


@dataclass
class Answer:
    """One turn's answer as the agent wrote it (its log record)."""

    text: str
    sent: list[tuple[float, int]]  # (wall time, characters written by then) per chunk
    updates: int
    words: str = ""
    ends: list[int] = field(default_factory=list)  # words[i] comes from text[ends[i]]

    def __post_init__(self) -> None:
        masked = _masked(self.text)
        self.words = masked.replace(_GONE, "")
        self.ends = [i for i, c in enumerate(masked) if c != _GONE]

    @functools.cached_property
    def code(self) -> list[str]:
        return code_lines([self.text])

    def covered(self, shown: str) -> int:
        """Characters of the answer the shown words cover: up to its first word not shown."""
        low, high = 0, min(len(shown), len(self.words))
        while low < high:  # the longest common prefix, compared in C
            mid = (low + high + 1) // 2
            if shown[:mid] == self.words[:mid]:
                low = mid
            else:
                high = mid - 1
        return self.ends[low] if low < len(self.ends) else len(self.text)


def _templates() -> list[tuple[str, str]]:
    """Each of the bridge's own texts (every locale) by its key, as a pattern whose
    placeholders match anything."""
    keyed = []
    for locale in LOCALES:
        for key, template in load_catalog(locale).items():
            parsed = list(string.Formatter().parse(template))
            if len("".join(text for text, *_ in parsed).strip()) >= 4:
                pattern = "".join(re.escape(t) + (".*?" if f else "") for t, f, *_ in parsed)
                keyed.append((key, pattern))
    return keyed


_TEMPLATES = _templates()
BRIDGE_LINES = re.compile("|".join(sorted({p for _, p in _TEMPLATES})), re.DOTALL)
_KEYED = [(key, re.compile(pattern, re.DOTALL)) for key, pattern in _TEMPLATES]


def line_key(text: str) -> str:
    return next((key for key, pattern in _KEYED if pattern.fullmatch(text)), "line")


def _card_answer(card: Any) -> str | None:
    """The `answer` element of a status or continuation card; None for any other card."""
    for element in (card or {}).get("body", {}).get("elements", []):
        if isinstance(element, dict) and element.get("element_id") == "answer":
            return str(element.get("content", ""))
    return None


def _card_markdown(card: Any) -> str:
    """A rich answer card's text: its markdown elements."""
    elements = (card or {}).get("body", {}).get("elements", [])
    return "".join(str(e.get("content", "")) for e in elements if e.get("tag") == "markdown")


@dataclass
class Shown:
    """What a chat shows of its turn's answer: its cards' answer elements, in posting order,
    and the answer's messages after them."""

    pages: list[str]
    parts: list[str]
    streaming: int = 0  # cards still in streaming mode (at the end: left open)

    @classmethod
    def of(cls, messages: Iterable[Any]) -> Shown:
        pages, parts, streaming = [], [], 0
        for message in messages:
            if message.msg_type == "interactive":
                page = _card_answer(message.data)
                if page is not None:
                    pages.append(page)
                    streaming += bool(message.data.get("config", {}).get("streaming_mode"))
                else:
                    parts.append(_card_markdown(message.data))
            elif message.msg_type == "text" and not BRIDGE_LINES.fullmatch(message.text or ""):
                parts.append(message.text or "")
        return cls(pages, parts, streaming)

    def judge(self, answer: Answer) -> str:
        """exact, repeated, missing or garbled (the module's docstring)."""
        cards = "".join(words(p) for p in self.pages)
        shown = cards + "".join(words(p) for p in self.parts)
        if shown == answer.words:
            return "exact"
        repeats = any(len(words(p)) >= 20 and words(p) in cards for p in self.parts)
        if repeats or len(shown) > len(answer.words):
            return "repeated"
        return "missing" if len(shown) < len(answer.words) else "garbled"

    def code_intact(self, answer: Answer) -> bool | None:
        if not answer.code:
            return None
        return code_lines([*self.pages, *self.parts]) == answer.code

    def code_difference(self, answer: Answer) -> str | None:
        """Where the code shown first differs from the answer's (the line, each side), and
        where it does once lookalikes are read back (`［］＜＞` as `[]<>`)."""
        shown = code_lines([*self.pages, *self.parts])
        first = _first_difference(answer.code, shown)
        if first is None:
            return None
        back = _first_difference(answer.code, [line.translate(_LOOKALIKES) for line in shown])
        return f"{first}; with ［］＜＞ read as []<>: {back or 'intact'}"


def _first_difference(wrote: list[str], shown: list[str]) -> str | None:
    for i, (line, seen) in enumerate(itertools.zip_longest(wrote, shown)):
        if line != seen:
            return f"code line {i + 1}: agent {line!r}, chat {seen!r}"
    return None


# --- the replay: what each chat showed, when ----------------------------------------------

_CARD_PATH = re.compile(r"/open-apis/cardkit/v1/cards/([^/]+)(/.*)?$")
_MESSAGE_PATH = re.compile(r"/open-apis/im/v1/messages/([^/]+)(/reactions.*)?$")
_SEND_PATH = re.compile(r"/open-apis/im/v1/messages(?:/[^/]+/reply)?$")
_ID = re.compile(r"^(?:[a-z]{2}_\w+|\d{6,})$")


def is_send(call: Any) -> bool:
    return call.method == "POST" and _SEND_PATH.fullmatch(call.path) is not None


def _body_bytes(calls: list[Any]) -> Counter[str]:
    """The JSON bodies' bytes (as compact JSON, about what went over the wire), by API."""
    sizes: Counter[str] = Counter()
    for call in calls:
        if call.body is not None:
            sizes[api_of(call)] += len(json.dumps(call.body, ensure_ascii=False).encode())
    return sizes


def api_of(call: Any) -> str:
    """The call's method and path, ids as `:id`."""
    parts = call.path.split("/")
    parts = [
        ":id" if _ID.match(part) or (i and parts[i - 1] == "reactions") else part
        for i, part in enumerate(parts)
    ]
    return f"{call.method} {'/'.join(parts).removeprefix('/open-apis')}"


@dataclass
class Timeline:
    """One chat as the calls changed it: every visible change, and the answer's coverage."""

    changes: list[tuple[float, str]] = field(default_factory=list)  # (time, what)
    growth: list[tuple[float, int, bool]] = field(default_factory=list)  # (time, covered, whole)
    pages: dict[str, str] = field(default_factory=dict)  # card (id) → its answer's words
    parts: dict[str, str] = field(default_factory=dict)  # message id → its words


class Replay:
    """The chats of `answers` as the calls Feishu took since `since` left them, in order."""

    def __init__(self, emu: FeishuEmulator, answers: dict[str, Answer], since: float) -> None:
        self.answers = answers
        self.chats: dict[str, Timeline] = {chat: Timeline() for chat in answers}
        self._cards: dict[str, str] = {}  # card id → its answer's words, posted or not
        self._card_chat: dict[str, str] = {}
        self.sent: Counter[str] = Counter()  # messages posted, by kind (a line by its key)
        for call in emu.calls():
            if call.at >= since and call.ok:
                self._apply(emu, call)

    def _apply(self, emu: FeishuEmulator, call: Any) -> None:
        if call.method == "GET":
            return
        body = call.body if isinstance(call.body, dict) else {}
        data = call.response.get("data") or {} if isinstance(call.response, dict) else {}
        if call.method == "POST" and call.path == "/open-apis/cardkit/v1/cards":
            page = _card_answer(json_value(body.get("data")))
            self._cards[str(data.get("card_id"))] = words(page or "")
            return
        card = _CARD_PATH.match(call.path)
        if card is not None:
            card_id, tail = card.groups()
            page = _changed_answer(call.method, tail or "", body)
            if page is not None:
                self._cards[card_id] = words(page)
            chat = self._card_chat.get(card_id)
            if chat is not None:  # a card not posted yet shows nothing
                self._changed(chat, call.at, "card", card_id if page is not None else None)
            return
        if is_send(call):
            self._posted(call, body, data)
            return
        message = _MESSAGE_PATH.match(call.path)
        if message is not None:  # a reaction, a patched card, an edited text
            try:
                chat = emu.message(message.group(1)).chat_id
            except KeyError:  # a message the emulator never had
                return
            what = "reaction" if message.group(2) else "edit"
            if what == "edit" and call.method == "PATCH":
                page = _card_answer(json_value(body.get("content")))
                if page is not None:
                    self._cards[message.group(1)] = words(page)
                    self._changed(chat, call.at, what, message.group(1))
                    return
            self._changed(chat, call.at, what)

    def _posted(self, call: Any, body: dict[str, Any], data: dict[str, Any]) -> None:
        chat, message_id = str(data.get("chat_id")), str(data.get("message_id"))
        timeline = self.chats.get(chat)
        if timeline is None:
            return
        content = json_value(body.get("content"))
        if body.get("msg_type") == "interactive" and isinstance(content, dict):
            if content.get("type") == "card":  # a CardKit card, shown from now on
                self.sent["card"] += 1
                card_id = str((content.get("data") or {}).get("card_id"))
                self._card_chat[card_id] = chat
                timeline.pages.setdefault(card_id, "")
                self._changed(chat, call.at, "card", card_id)
                return
            page = _card_answer(content)
            if page is not None:  # a status card posted whole (CardKit refused)
                self.sent["card"] += 1
                self._cards[message_id] = words(page)
                timeline.pages.setdefault(message_id, "")
                self._changed(chat, call.at, "card", message_id)
                return
            self.sent["answer card"] += 1
            timeline.parts[message_id] = words(_card_markdown(content))
        elif body.get("msg_type") == "text" and isinstance(content, dict):
            text = str(content.get("text", ""))
            if BRIDGE_LINES.fullmatch(text):
                self.sent[line_key(text)] += 1
                self._changed(chat, call.at, "line")
                return
            self.sent["answer text"] += 1
            timeline.parts[message_id] = words(text)
        self._changed(chat, call.at, "answer", "")

    def _changed(self, chat: str, at: float, what: str, card: str | None = None) -> None:
        """The chat changed; `card` not None: maybe its answer too (a card's id, or "")."""
        timeline = self.chats.get(chat)
        if timeline is None:  # a chat whose agent never finished: not measured
            return
        timeline.changes.append((at, what))
        if card is None:
            return
        if card:
            timeline.pages[card] = self._cards.get(card, "")
        answer = self.answers[chat]
        shown = "".join(timeline.pages.values()) + "".join(timeline.parts.values())
        whole = shown == answer.words
        covered = answer.covered(shown)
        if not timeline.growth or timeline.growth[-1][1:] != (covered, whole):
            timeline.growth.append((at, covered, whole))


def _changed_answer(method: str, tail: str, body: dict[str, Any]) -> str | None:
    """The card's answer as a change of a CardKit card leaves it (None: not changed): its
    text streamed, the card updated whole, the element replaced or patched, or a batch of
    element actions (bridge/feishu/requests.py)."""
    if tail == "/elements/answer/content":
        return str(body.get("content", ""))
    if tail == "" and method == "PUT":
        return _card_answer(json_value((body.get("card") or {}).get("data")))
    if tail == "/elements/answer":
        element = json_value(body.get("element" if method == "PUT" else "partial_element"))
        return _content(element)
    if tail == "/batch_update":
        page = None
        for action in json_value(body.get("actions")) or []:
            params = action.get("params") if isinstance(action, dict) else None
            if isinstance(params, dict) and params.get("element_id") == "answer":
                change = params.get("partial_element") or params.get("element")
                page = _content(change) if _content(change) is not None else page
        return page
    return None


def _content(element: Any) -> str | None:
    content = element.get("content") if isinstance(element, dict) else None
    return content if isinstance(content, str) else None


def json_value(text: Any) -> Any:
    if isinstance(text, dict):
        return text
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


# --- a run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turns:
    """What each chat's message asks the scripted agent for."""

    seconds: float
    sizes: tuple[int, int]
    code: float
    seed: int = 0
    stream: float | None = None

    def seed_of(self, i: int) -> int:
        return self.seed * 1_000_000 + i + 1

    def prompt(self, i: int, log: Path) -> str:
        low, high = self.sizes
        text = f"realistic {self.seed_of(i)} {self.seconds} {log} sizes={low}-{high}"
        text += f" code={self.code}"
        return text + (f" stream={self.stream}" if self.stream is not None else "")

    @property
    def longest(self) -> float:
        """A turn's length at most: SECONDS, or its answer at the slowest pace (30 chunks
        of 22.5 characters a second on average), or its stream."""
        return max(self.seconds, self.stream or 0.0, self.sizes[1] / (30 * 22.5))


class Run:
    def __init__(self, emu: FeishuEmulator, style: str, n: int, turns: Turns, log: Path):
        self.emu, self.style, self.n, self.turns, self.log = emu, style, n, turns, log
        self.chats: list[str] = []
        self.asked: dict[str, float] = {}  # chat -> when the message was pushed (wall)
        self.began = 0.0
        # The emulator shares this process's loop: the poll reads only what is new, so the
        # bench's own bookkeeping never delays Feishu's answers to the bridge.
        self._records: dict[int, dict[str, Any]] = {}
        self._read = 0
        self._ended: set[str] = set()
        self._looked: dict[str, tuple[int, int]] = {}
        self._answers: dict[str, Answer] = {}

    async def start(self, ramp: float = 0.0) -> None:
        """Every chat's message, all at once, or spread evenly over `ramp` seconds."""
        self.chats = [self.emu.open_chat("p2p", user_open_id=f"ou_u{i}") for i in range(self.n)]
        pushes = []
        begin = time.monotonic()
        self.began = time.time()
        for i, chat in enumerate(self.chats):
            if ramp > 0:
                await asyncio.sleep(max(0.0, begin + ramp * i / self.n - time.monotonic()))
            self.asked[chat] = time.time()
            text = self.turns.prompt(i, self.log)
            pushes.append(asyncio.create_task(self.emu.send_user_message(text, chat_id=chat)))
        await asyncio.gather(*pushes)

    def records(self) -> dict[int, dict[str, Any]]:
        if self.log.exists():
            with self.log.open("rb") as log:
                log.seek(self._read)
                data = log.read()
            whole = data[: data.rfind(b"\n") + 1]  # a line being written waits for the next poll
            self._read += len(whole)
            for line in whole.splitlines():
                if line.strip():
                    record = json.loads(line)
                    self._records[record["seed"]] = record
        return self._records

    def answers(self) -> dict[str, Answer]:
        """Each chat's answer, once its agent is done."""
        records = self.records()
        for i, chat in enumerate(self.chats):
            record = records.get(self.turns.seed_of(i))
            if record is not None and chat not in self._answers:
                self._answers[chat] = Answer(record["answer"], record["sent"], record["updates"])
        return dict(self._answers)

    def by_chat(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {chat: [] for chat in self.chats}
        for message in self.emu.bot_messages():
            if message.chat_id in out:
                out[message.chat_id].append(message)
        return out

    async def done(self) -> bool:
        """Every agent done and its chat showing the answer exactly, its cards closed
        (streaming off: the ended card, not one still typing), a chat looked at again only
        when its messages changed. The emulator shares this loop: it is let in between
        chats (200 answers judged at once would hold its calls, then count them bunched
        in its one-second windows, as a 429 the bridge never caused)."""
        answers = self.answers()
        messages = self.by_chat()
        for chat, answer in answers.items():
            if chat in self._ended:
                continue
            shown = messages[chat]
            look = (len(shown), max((m.update_time_ms for m in shown), default=0))
            if self._looked.get(chat) == look:
                continue
            self._looked[chat] = look
            seen = Shown.of(shown)
            if seen.judge(answer) == "exact" and not seen.streaming:
                self._ended.add(chat)
            await asyncio.sleep(0)
        return len(self._ended) == self.n


async def one(
    style: str,
    n: int,
    turns: Turns,
    settle: float,
    total: int = 0,
    ramp: float = 0.0,
    *,
    detail: bool = False,
    warm: float = 0.0,
) -> dict[str, Any]:
    """One row: N turns in one style; `detail` keeps each turn's growth and changes. The
    messages come once the bridge is up and quiet (its start finished: a crowd meeting a
    bridge just started), `warm` seconds more after that."""
    folder = Path(tempfile.mkdtemp(prefix="stream-bench-"))
    log = folder / "turns.jsonl"
    (folder / "work").mkdir()
    async with FeishuEmulator(time_scale=1.0) as emu:
        emu.set_rate_limits(**FEISHU, total_per_second=total or None)
        port = free_port()
        emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
        env = bridge_env(
            emu,
            folder,
            port,
            BRIDGE_ALLOW_ALL="true",
            BRIDGE_PRESENCE_STYLE=style,
            BRIDGE_MAX_RUNNING_TURNS=str(n + 10),
            BRIDGE_MAX_AGENTS=str(AGENTS),
            BRIDGE_LOG_LEVEL="WARNING",
            BRIDGE_FEISHU_TOTAL_CALLS_PER_SECOND=str(total),
            PYTHONPATH=python_path(),
        )
        with (folder / "bridge.log").open("wb") as out:
            process = subprocess.Popen(  # noqa: ASYNC220 - once per run
                [str(BRIDGE), "run"], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        lags: list[float] = []
        probe = asyncio.create_task(loop_lag(lags))
        try:
            await wait_healthy(port, process)
            await wait_quiet(process.pid)
            await asyncio.sleep(warm)
            run = Run(emu, style, n, turns, log)
            cpu0, t0 = cpu_s(process.pid), time.time()
            agents0 = _children_cpu(process.pid)
            await run.start(ramp)
            deadline = t0 + ramp + turns.longest * 1.5 + settle
            while not await run.done() and time.time() < deadline:
                await asyncio.sleep(1.0)
                agents0 = {**_children_cpu(process.pid), **agents0}
            cpu, wall = cpu_s(process.pid) - cpu0, time.time() - t0
            agents = _children_cpu(process.pid)
            agents_cpu = sum(agents.values()) - sum(agents0.get(pid, 0.0) for pid in agents)
            result = measure(run, cpu, wall, timed_out=not await run.done(), detail=detail)
            keep_calls(run, folder / "calls.jsonl")
            result["agents_core_pct"] = 100 * agents_cpu / wall
            result["emulator_lag_max_s"] = max(lags, default=0.0)
            result["folder"] = str(folder)
            return result
        finally:
            probe.cancel()
            process.terminate()
            await asyncio.to_thread(process.wait, 30)


def keep_calls(run: Run, path: Path) -> None:
    """Every call Feishu saw in the run, one JSON line each (time from the first message,
    method, path, whether Feishu took it, the chat of a message's call), to read a chat's
    story after the row (the folder is printed with `--json`)."""
    chats: dict[str, str] = {}
    with path.open("w") as out:
        for call in run.emu.calls():
            if call.at < run.began or call.path.startswith("/open-apis/auth/"):
                continue
            data = call.response.get("data") or {} if isinstance(call.response, dict) else {}
            chat = data.get("chat_id") if isinstance(data, dict) else None
            message, card = _MESSAGE_PATH.match(call.path), _CARD_PATH.match(call.path)
            if message is not None:
                chat = chats.get(message.group(1), chat)
                with contextlib.suppress(KeyError):  # a user's message: its reactions
                    chat = chat or run.emu.message(message.group(1)).chat_id
            elif card is not None:
                chat = chats.get(card.group(1), chat)
            if isinstance(data, dict) and chat and data.get("message_id"):
                chats[str(data["message_id"])] = str(chat)
                body = call.body if isinstance(call.body, dict) else {}
                content = json_value(body.get("content"))
                if isinstance(content, dict) and content.get("type") == "card":
                    chats[str((content.get("data") or {}).get("card_id"))] = str(chat)
            line = [round(call.at - run.began, 4), call.method, call.path, call.ok, chat]
            out.write(json.dumps(line) + "\n")


def _children_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each agent process the bridge started."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return {}
    return {int(child): cpu_s(int(child)) for child in children}


# --- the figures --------------------------------------------------------------------------


def turn_figures(
    chat: str, asked: float, answer: Answer, timeline: Timeline, shown: Shown
) -> dict[str, Any]:
    """One turn's figures (the module's docstring says how each is measured)."""
    first_chunk, last_chunk = answer.sent[0][0], answer.sent[-1][0]
    changes = [t for t, _ in timeline.changes if t >= asked]
    first = next(((t, what) for t, what in timeline.changes if t >= asked), None)
    quiet_from = asked + FIRST_HINT
    points = sorted({quiet_from, last_chunk, *(t for t in changes if quiet_from < t < last_chunk)})
    silent = max((b - a for a, b in itertools.pairwise(points)), default=0.0)
    # The answer's coverage as it grew: (time, most characters shown so far).
    growth: list[tuple[float, int]] = []
    for at, covered, _ in timeline.growth:
        if covered > (growth[-1][1] if growth else 0):
            growth.append((at, covered))
    # Whole at the agent's end (its last chunk only closed a fence: 0), or when it became so.
    before = [whole for at, _, whole in timeline.growth if at <= last_chunk]
    if before and before[-1]:
        whole_at: float | None = last_chunk
    else:
        after = (at for at, _, whole in timeline.growth if at > last_chunk and whole)
        whole_at = next(after, None)
    reached = [c for _, c in growth]
    latencies = []
    for at, chars in answer.sent:
        i = bisect.bisect_left(reached, chars)
        if i < len(growth):
            latencies.append(growth[i][0] - at)
    # From the first chunk until the answer is whole: the longest wait for the next growth.
    until = whole_at if whole_at is not None else (growth[-1][0] if growth else first_chunk)
    grew = [first_chunk, *(at for at, _ in growth if first_chunk < at <= until), until]
    return {
        "chat": chat,
        "size": len(answer.text),
        "has_code": bool(answer.code),
        "updates": answer.updates,
        "judged": shown.judge(answer),
        "code_intact": shown.code_intact(answer),
        "code_difference": shown.code_difference(answer) if answer.code else None,
        "cards": len(shown.pages),
        "cards_open": shown.streaming,
        "messages": len(shown.parts),
        "first_sign_s": first[0] - asked if first else None,
        "first_sign": first[1] if first else None,
        "silent_s": silent,
        "latencies": latencies,
        "end_s": whole_at - last_chunk if whole_at is not None else None,
        "growth_max_s": max((b - a for a, b in itertools.pairwise(grew)), default=0.0),
        "growth": [(at - first_chunk, chars) for at, chars in growth],
        "changes": [(at - first_chunk, what) for at, what in timeline.changes],
        "first_chunk_s": first_chunk - asked,
        "last_chunk_s": last_chunk - first_chunk,
        "pending": (last_chunk, whole_at),
    }


def idle_budget(
    sends: list[float], pending: list[tuple[float, float]], limit: float
) -> tuple[float, int]:
    """The longest stretch with no send while an answer was pending and the last minute's
    sends were under `limit`, and how many such stretches reached STALL."""
    stretches = []
    merged: list[list[float]] = []
    for a, b in sorted(pending):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    for a, b in merged:
        inside = sends[bisect.bisect_right(sends, a) : bisect.bisect_left(sends, b)]
        for x, y in itertools.pairwise([a, *inside, b]):
            minute = bisect.bisect_right(sends, x) - bisect.bisect_right(sends, x - 60.0)
            if minute < limit:
                stretches.append(y - x)
    return max(stretches, default=0.0), sum(s >= STALL for s in stretches)


def measure(
    run: Run, cpu: float, wall: float, *, timed_out: bool, detail: bool = False
) -> dict[str, Any]:
    answers = run.answers()
    replay = Replay(run.emu, answers, run.began)
    messages = run.by_chat()
    end = time.time()
    turns = [
        turn_figures(chat, run.asked[chat], answer, replay.chats[chat], Shown.of(messages[chat]))
        for chat, answer in answers.items()
    ]
    updates = sum(a.updates for a in answers.values())
    calls = [
        c
        for c in run.emu.calls()
        if c.at >= run.began and not c.path.startswith("/open-apis/auth/")
    ]
    sends = sorted(c.at for c in calls if is_send(c) and c.ok)
    pending = [(a, b if b is not None else end) for a, b in (t["pending"] for t in turns)]
    idle, stalls = idle_budget(sends, pending, SENDS_PER_MINUTE)
    judged = Counter(t["judged"] for t in turns)
    with_code = [t for t in turns if t["code_intact"] is not None]
    latencies = [x for t in turns for x in t["latencies"]]
    first = [t["first_sign_s"] for t in turns if t["first_sign_s"] is not None]
    ends = [t["end_s"] for t in turns if t["end_s"] is not None]
    silent = [t["silent_s"] for t in turns]
    n = run.n
    for t in turns:
        t["chunk_p95_s"] = pct(t.pop("latencies"), 0.95)
        del t["pending"]
        if not detail:
            del t["growth"], t["changes"]
    return {
        "style": run.style,
        "n": n,
        "turns_done": len(answers),
        "timed_out": timed_out,
        "updates": updates,
        "cpu_s": cpu,
        "us_per_update": cpu / updates * 1e6 if updates else float("nan"),
        "core_pct": 100 * cpu / wall,
        "rate_limited": len(run.emu.limits.refused()),
        "exact": judged["exact"],
        "repeated": judged["repeated"],
        "missing": judged["missing"],
        "garbled": judged["garbled"],
        "code_turns": len(with_code),
        "code_intact": sum(bool(t["code_intact"]) for t in with_code),
        "cards_open": sum(t["cards_open"] for t in turns),
        "silent_max_s": max(silent, default=float("nan")),
        "silent_over_5s": sum(s > SILENT for s in silent),
        "chunk_p50_s": pct(latencies, 0.5),
        "chunk_p95_s": pct(latencies, 0.95),
        "first_sign_p50_s": pct(first, 0.5),
        "first_sign_max_s": max(first, default=float("nan")),
        "first_sign_kinds": dict(Counter(t["first_sign"] for t in turns)),
        "end_p50_s": pct(ends, 0.5),
        "end_p95_s": pct(ends, 0.95),
        "end_max_s": max(ends, default=float("nan")),
        "calls_per_turn": len(calls) / n,
        "sends_per_turn": sum(is_send(c) for c in calls) / n,
        "calls_per_turn_by_api": {
            api: count / n for api, count in Counter(api_of(c) for c in calls).most_common()
        },
        "body_kib_per_turn_by_api": {
            api: size / 1024 / n for api, size in _body_bytes(calls).most_common()
        },
        "sends_per_turn_by_kind": {kind: count / n for kind, count in replay.sent.most_common()},
        "idle_budget_max_s": idle,
        "idle_budget_stalls": stalls,
        "sizes": [t["size"] for t in turns],
        "turns": turns,
    }


# --- the floor: a bare ACP reader ---------------------------------------------------------


async def floor(prompts: list[str], ramp: float) -> dict[str, float]:
    """CPU of a client that reads the agents' stream and does nothing with it (this
    process's own CPU, from starting its agents to the last answer: the bridge's figure
    counts its agents' start, their `initialize` and a session per chat too)."""
    from acp import spawn_agent_process, text_block

    class Client:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            pass

        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        def on_connect(self, conn: Any) -> None:
            pass

    cwd = tempfile.mkdtemp(prefix="stream-floor-")
    cpu0 = time.process_time()
    async with contextlib.AsyncExitStack() as stack:
        conns = []
        for _ in range(min(AGENTS, len(prompts))):
            spawned = spawn_agent_process(Client(), AGENT[0], *AGENT[1:], cwd=cwd)  # type: ignore[arg-type]
            conn, _process = await stack.enter_async_context(spawned)
            await conn.initialize(protocol_version=1)
            conns.append(conn)
        sessions = []
        for i in range(len(prompts)):
            conn = conns[i % len(conns)]
            sessions.append((conn, (await conn.new_session(cwd=cwd)).session_id))
        begin = time.monotonic()

        async def ask(i: int) -> None:
            await asyncio.sleep(max(0.0, begin + ramp * i / len(prompts) - time.monotonic()))
            conn, session_id = sessions[i]
            await conn.prompt(session_id=session_id, prompt=[text_block(prompts[i])])

        await asyncio.gather(*(ask(i) for i in range(len(prompts))))
        return {"cpu_s": time.process_time() - cpu0}


async def floor_row(n: int, turns: Turns, ramp: float) -> dict[str, float]:
    """The floor for N turns in a process of its own; its CPU per agent update."""
    log = Path(tempfile.mkdtemp(prefix="stream-floor-")) / "turns.jsonl"
    prompts = [turns.prompt(i, log) for i in range(n)]
    command = [sys.executable, __file__, "--floor-child", json.dumps([prompts, ramp])]
    env = {**os.environ, "PYTHONPATH": python_path()}
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, check=False, env=env
    )
    if done.returncode:
        raise RuntimeError(f"the floor failed: {done.stderr.strip()[-500:]}")
    cpu = json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"]
    updates = sum(json.loads(line)["updates"] for line in log.read_text().splitlines() if line)
    return {"floor_us_per_update": cpu / updates * 1e6 if updates else float("nan")}


def _mean_floor(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    first, last = before["floor_us_per_update"], after["floor_us_per_update"]
    return {
        "floor_us_per_update": (first + last) / 2,
        "floor_before_us_per_update": first,
        "floor_after_us_per_update": last,
    }


# --- the table ----------------------------------------------------------------------------


def _s(*values: float) -> str:
    cells = ("-" if v != v else f"{v:.2f}" if v < 1 else f"{v:.1f}" for v in values)  # nan: -
    return " / ".join(cells) + "s"


# The table: each column's heading and its cell for a row.
COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("style", lambda r: r["style"]),
    ("N", lambda r: str(r["n"])),
    ("429s", lambda r: str(r["rate_limited"])),
    (
        "exact",
        lambda r: (
            f"{r['exact']}/{r['n']}"
            + "".join(f" {r[k]} {k}" for k in ("repeated", "missing", "garbled") if r[k])
        ),
    ),
    ("code intact", lambda r: f"{r['code_intact']}/{r['code_turns']}"),
    ("silent max, >5s", lambda r: f"{_s(r['silent_max_s'])}, {r['silent_over_5s']}"),
    ("chunk→visible p50/p95", lambda r: _s(r["chunk_p50_s"], r["chunk_p95_s"])),
    ("first sign p50/max", lambda r: _s(r["first_sign_p50_s"], r["first_sign_max_s"])),
    ("end p50/p95/max", lambda r: _s(r["end_p50_s"], r["end_p95_s"], r["end_max_s"])),
    (
        "µs/update bridge/floor (before, after)",
        lambda r: "{:.0f} / {:.0f} ({:.0f}, {:.0f})".format(
            r["us_per_update"],
            r.get("floor_us_per_update", float("nan")),
            r.get("floor_before_us_per_update", float("nan")),
            r.get("floor_after_us_per_update", float("nan")),
        ),
    ),
    ("calls, sends /turn", lambda r: f"{r['calls_per_turn']:.1f}, {r['sends_per_turn']:.1f}"),
    ("idle budget, ≥2s", lambda r: f"{_s(r['idle_budget_max_s'])}, {r['idle_budget_stalls']}"),
]
WIDTHS = [8, 4, 4, 8, 11, 15, 21, 18, 20, 38, 18, 16]


def heading() -> str:
    return " | ".join(h.ljust(w) for (h, _), w in zip(COLUMNS, WIDTHS, strict=True))


def show(r: dict[str, Any]) -> str:
    cells = " | ".join(cell(r).ljust(w) for (_, cell), w in zip(COLUMNS, WIDTHS, strict=True))
    open_cards = f"{r['cards_open']} cards left streaming, " if r["cards_open"] else ""
    return (
        f"{cells} | {'TIMED OUT ' if r['timed_out'] else ''}{open_cards}{r['turns_done']} turns,"
        f" {r['updates']} updates, bridge {r['core_pct']:.0f}% of a core, agents"
        f" {r['agents_core_pct']:.0f}%, emulator lag max {r['emulator_lag_max_s']:.2f}s;"
        " sends/turn: "
        + ", ".join(f"{kind} {n:.2f}" for kind, n in r["sends_per_turn_by_kind"].items())
    )


def options(parser: argparse.ArgumentParser) -> None:
    """The options every streaming bench shares."""
    parser.add_argument("--seconds", type=float, default=60.0, help="each turn's length at least")
    parser.add_argument("--settle", type=float, default=60.0, help="extra wait for the ends")
    parser.add_argument("--seed", type=int, default=0, help="draws every turn (sizes, pace)")
    parser.add_argument("--json", action="store_true", help="also print each row as JSON")
    parser.add_argument(
        "--total", type=int, default=0, help="also cap all calls together (a whole-app meter)"
    )


def sizes(text: str) -> tuple[int, int]:
    low, _, high = text.partition(",")
    return int(low), int(high or low)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="1,50,200", help="turns at once, comma-separated")
    parser.add_argument("--styles", default="messages,card")
    parser.add_argument(
        "--ramp", type=float, default=0.0, help="spread the N messages over this many seconds"
    )
    parser.add_argument(
        "--sizes", type=sizes, default=(500, 20000), help="answer sizes, MIN,MAX characters"
    )
    parser.add_argument(
        "--code", type=float, default=0.3, help="share of answers with long code blocks"
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the bare ACP reader")
    parser.add_argument(
        "--warm",
        type=float,
        default=0.0,
        help="seconds more the bridge is up, once it has gone quiet, before the messages",
    )
    parser.add_argument("--floor-child", help=argparse.SUPPRESS)
    options(parser)
    args = parser.parse_args(argv)
    if args.floor_child:
        prompts, ramp = json.loads(args.floor_child)
        print(json.dumps(await floor(prompts, ramp)))
        return
    turns = Turns(args.seconds, args.sizes, args.code, args.seed)
    print(heading(), flush=True)
    for n in (int(x) for x in args.n.split(",")):
        before = {} if args.no_floor else await floor_row(n, turns, args.ramp)
        results = []
        for style in args.styles.split(","):
            results.append(
                await one(style, n, turns, args.settle, args.total, args.ramp, warm=args.warm)
            )
        base = {} if args.no_floor else _mean_floor(before, await floor_row(n, turns, args.ramp))
        for result in results:
            result.update(base)
            print(show(result), flush=True)
            if args.json:
                print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
