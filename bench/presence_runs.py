"""The presence contract on the real product, many times over: silent turns, and whether the
user was told, on time and all along, that the assistant works.

    python bench/presence_runs.py [--runs 50] [--style messages|card|both] [--concurrency 5]
                                  [--loop uvloop|asyncio] [--busy N] [--silence 5.0]
                                  [--first-hint 0.6] [--heartbeat 1.2] [--tolerance 0.3]

For each style it starts the local Feishu emulator and `feishu-bridge run` (its own process,
webhook mode, the scripted ACP agent), with `BRIDGE_FIRST_HINT_SECONDS` and
`BRIDGE_HEARTBEAT_SECONDS` set to `--first-hint` and `--heartbeat` and
`BRIDGE_PRESENCE_STYLE` to the style. Then `--runs` turns, `--concurrency` at a time in as
many chats (each chat warmed by one quick turn first, so its agent session is up), in which
the agent is silent for `--silence` seconds, then answers (`sleep MS` then `say TEXT`).

What the user saw, and when, is read from the emulator's record of the bridge's Feishu calls:
the running hint (messages) or the status card's appearance (card) — "the hint"; each
heartbeat line, or card update still showing the running elapsed time — "a heartbeat"; the
answer. A turn is OK when the hint came within `--first-hint` + `--tolerance` of the message
(Feishu's push), the hint, the heartbeats and the answer follow one another at most
`--heartbeat` + `--tolerance` apart, nothing says "working" after the answer, and nothing
else was shown. Per style it prints runs OK / total, the worst first-hint delay, the worst
gap, and each failing turn with its transcript; it exits 1 if any turn failed.

`--busy N` starts N processes that only spin, to load the cores: the early-timer race this
hunts (a deadline on the wall clock, a timer on the loop's) shows more under load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spawned import BRIDGE, bridge_env, free_port, wait_healthy  # noqa: E402
from bridge.i18n import Translator  # noqa: E402

ENCRYPT_KEY = "bench-encrypt-key"
TOKEN = "bench-verification-token"
PRESENCE = ("hint", "heartbeat")  # what says "working on it"
_CARD = re.compile(r"/open-apis/cardkit/v1/cards/([^/]+)(/elements/([^/]+)/content)?$")
_MESSAGE = re.compile(r"/open-apis/im/v1/messages/([^/]+)(/reply|/reactions)?$")


@dataclass
class Seen:
    at: float  # wall clock, as the emulator recorded the call
    kind: str  # ack, hint, heartbeat, answer, card (a change saying neither), other
    text: str


@dataclass
class Turn:
    index: int
    chat: int
    message_id: str
    sent_at: float  # when Feishu started pushing the message
    answer: str
    script: str
    seen: list[Seen] = field(default_factory=list)


class Screen:
    """What each user message got, read from the emulator's calls as they come (only the new
    ones at each look, so waiting on it costs nothing that grows with the run)."""

    def __init__(self, emu: Any, t: Translator) -> None:
        self._emu = emu
        self._read = 0
        self._hint = t("presence.running_hint")
        beat = re.escape(t("presence.heartbeat", elapsed="\0")).replace("\0", ".+")
        self._heartbeat = re.compile(f"^{beat}$", re.S)
        self.answers: dict[str, str] = {}  # user message id -> the answer its turn will give
        self.seen: dict[str, list[Seen]] = {}
        self._card_of: dict[str, str] = {}  # card id or card message id -> user message id
        self._created: dict[str, dict[str, Any]] = {}  # CardKit card id -> its first JSON

    def look(self) -> None:
        calls = self._emu.calls()
        for call in calls[self._read :]:
            if call.ok:
                self._take(call)
        self._read = len(calls)

    def answered(self, message_id: str) -> bool:
        self.look()
        return any(s.kind == "answer" for s in self.seen.get(message_id, ()))

    def _take(self, call: Any) -> None:
        if call.path == "/open-apis/cardkit/v1/cards" and call.method == "POST":
            card_id = str(call.response["data"]["card_id"])
            self._created[card_id] = json.loads(call.body["data"])
            return
        card = _CARD.match(call.path)
        if card is not None and call.method == "PUT":
            owner = self._card_of.get(card.group(1))
            if owner is not None:
                self._card_change(owner, call, element=card.group(3))
            return
        message = _MESSAGE.match(call.path)
        if message is None:
            return
        mid, what = message.group(1), message.group(2)
        if what == "/reactions" and call.method == "POST":
            self._add(mid, Seen(call.at, "ack", call.body["reaction_type"]["emoji_type"]))
        elif what == "/reply" and call.method == "POST":
            self._reply(mid, call)
        elif what is None and call.method == "PATCH" and mid in self._card_of:
            self._card_change(self._card_of[mid], call, element=None)  # a patched card

    def _reply(self, mid: str, call: Any) -> None:
        content = call.json_content()
        if call.body.get("msg_type") == "interactive":
            data = content.get("data") or {}
            card_id = data.get("card_id") if content.get("type") == "card" else None
            if card_id is not None:  # a CardKit card, created just before
                self._card_of[card_id] = mid
                content = self._created.pop(card_id, {})
            self._card_of[str(call.response["data"]["message_id"])] = mid
            self._add(mid, self._card(call.at, content, mid, "hint"))
            return
        text = " ".join(_strings(content)).strip()
        if self.answers.get(mid, "\0") in text:
            kind = "answer"
        elif text == self._hint:
            kind = "hint"
        elif self._heartbeat.match(text):
            kind = "heartbeat"
        else:
            kind = "other"
        self._add(mid, Seen(call.at, kind, text))

    def _card_change(self, mid: str, call: Any, element: str | None) -> None:
        if element is not None:  # streamed text into one element: the answer, or the status
            text = str(call.body.get("content", ""))
            kind = "answer" if self.answers.get(mid, "\0") in text else "card"
            if kind == "card" and element == "status":
                # A refresh of the working card's status line alone (the whole-card update
                # API was full): as much a sign of work as a whole refresh.
                kind = "heartbeat"
            self._add(mid, Seen(call.at, kind, f"[{element}] {text}"))
            return
        raw = (call.body.get("card") or {}).get("data") or call.body.get("content") or "{}"
        self._add(mid, self._card(call.at, json.loads(raw), mid, "heartbeat"))

    def _card(self, at: float, card: dict[str, Any], mid: str, working_kind: str) -> Seen:
        """A card as shown: the answer if it carries it; `working_kind` while its header says
        it works (the card's first showing counts as the hint whatever it says)."""
        title = str(((card.get("header") or {}).get("title") or {}).get("content", ""))
        parts = {e.get("element_id"): str(e.get("content", "")) for e in _elements(card)}
        words = " | ".join(p for p in (title, parts.get("status"), parts.get("answer")) if p)
        if self.answers.get(mid, "\0") in parts.get("answer", ""):
            return Seen(at, "answer", words)
        if working_kind == "hint" or title == self._hint:
            return Seen(at, working_kind, words or "(card)")
        return Seen(at, "card", words)

    def _add(self, mid: str, seen: Seen) -> None:
        self.seen.setdefault(mid, []).append(seen)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key in ("text", "content", "zh_cn", "en_us", "title"):
                yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def _elements(card: dict[str, Any]) -> list[dict[str, Any]]:
    body = card.get("body") or {}
    return [e for e in body.get("elements") or [] if isinstance(e, dict)]


# --- the verdict ---------------------------------------------------------------------------


@dataclass
class Verdict:
    first_hint: float | None  # seconds from the push to the hint
    worst_gap: float  # the longest stretch between hint, heartbeats and answer
    problems: list[str]


def judge(turn: Turn, args: argparse.Namespace) -> Verdict:
    seen = sorted(turn.seen, key=lambda s: s.at)
    answer = next((s.at for s in seen if s.kind == "answer"), None)
    before = [s.at for s in seen if s.kind in PRESENCE and (answer is None or s.at <= answer)]
    problems: list[str] = []
    first_limit, gap_limit = args.first_hint + args.tolerance, args.heartbeat + args.tolerance
    first = before[0] - turn.sent_at if before else None
    if answer is None:
        problems.append("no answer")
    if first is None:
        problems.append("no hint before the answer")
    elif first > first_limit:
        problems.append(f"first hint after {first:.3f} s (limit {first_limit:.2f})")
    marks = before + ([answer] if answer is not None else [])
    gaps = [b - a for a, b in itertools.pairwise(marks)]
    worst = max(gaps, default=0.0)
    if worst > gap_limit:
        problems.append(f"silent for {worst:.3f} s between signs of work (limit {gap_limit:.2f})")
    late = [s for s in seen if s.kind in PRESENCE and answer is not None and s.at > answer]
    if late:
        problems.append(f"{len(late)} sign(s) of work after the answer")
    odd = [s.text for s in seen if s.kind == "other"]
    if odd:
        problems.append(f"unexpected line(s): {odd}")
    return Verdict(first, worst, problems)


def transcript(turn: Turn) -> list[str]:
    said = turn.script.replace("\n", " / ")
    lines = [f"      +0.000 user      {said} (message {turn.message_id})"]
    for s in sorted(turn.seen, key=lambda s: s.at):
        lines.append(f"      +{s.at - turn.sent_at:.3f} {s.kind:9} {s.text}")
    return lines


# --- the runs ------------------------------------------------------------------------------


async def idle(ops_port: int, chat: str, http: httpx.AsyncClient) -> None:
    """Until the bridge says the chat's conversation is idle (its turn wholly over), so the
    next message starts a turn rather than waiting in the queue."""
    url = f"http://127.0.0.1:{ops_port}/runtime-states"
    for _ in range(600):
        states = (await http.get(url)).json()["conversations"]
        if states.get(chat, {}).get("state", "idle") == "idle":
            return
        await asyncio.sleep(0.05)


async def chat_runs(
    emu: Any, screen: Screen, chat: int, turns: list[int], args: argparse.Namespace, ops: int
) -> list[Turn]:
    user = f"ou_presence_{chat}"
    chat_id = emu.open_chat("p2p", user_open_id=user)
    done: list[Turn] = []
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        for index in [-1, *turns]:  # -1: the warm-up turn, not judged
            answer = f"turn {index} done" if index >= 0 else "warm"
            silence = f"sleep {round(args.silence * 1000)}\n" if index >= 0 else ""
            script = f"{silence}say {answer}"
            sent = await emu.send_user_message(script, chat_id=chat_id, sender_open_id=user)
            screen.answers[sent.message_id] = answer
            mid = sent.message_id
            with contextlib.suppress(TimeoutError):  # judged as "no answer"
                await emu.wait_for(lambda mid=mid: screen.answered(mid), args.silence + 30)
            await idle(ops, chat_id, http)
            if index >= 0:
                done.append(Turn(index, chat, mid, sent.first_attempt.at, answer, script))
    return done


async def run_style(style: str, args: argparse.Namespace, t: Translator) -> list[Turn]:
    from bridge.devtools.emulator import FeishuEmulator

    async with FeishuEmulator(encrypt_key=ENCRYPT_KEY, verification_token=TOKEN) as emu:
        with tempfile.TemporaryDirectory() as folder:
            port = free_port()
            env = bridge_env(
                emu,
                Path(folder),
                port,
                FEISHU_ENCRYPT_KEY=ENCRYPT_KEY,
                BRIDGE_ALLOW_ALL="true",
                BRIDGE_LOG_LEVEL="WARNING",
                BRIDGE_EVENT_LOOP=args.loop,
                BRIDGE_PRESENCE_STYLE=style,
                BRIDGE_FIRST_HINT_SECONDS=str(args.first_hint),
                BRIDGE_HEARTBEAT_SECONDS=str(args.heartbeat),
            )
            await asyncio.to_thread(Path(folder, "work").mkdir)
            bridge = subprocess.Popen([str(BRIDGE), "run"], env=env)  # noqa: ASYNC220
            try:
                await wait_healthy(port, bridge)
                emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
                screen = Screen(emu, t)
                shares = [
                    list(range(c, args.runs, args.concurrency)) for c in range(args.concurrency)
                ]
                ops = int(env["BRIDGE_OPS_PORT"])
                per_chat = await asyncio.gather(
                    *(chat_runs(emu, screen, c, s, args, ops) for c, s in enumerate(shares) if s)
                )
                await asyncio.sleep(args.heartbeat + args.tolerance)  # anything said too late
                screen.look()
            finally:
                bridge.terminate()
                bridge.wait(timeout=20)
    turns = sorted((turn for chat in per_chat for turn in chat), key=lambda turn: turn.index)
    for turn in turns:
        turn.seen = screen.seen.get(turn.message_id, [])
    return turns


def report(style: str, turns: list[Turn], args: argparse.Namespace) -> bool:
    verdicts = [(turn, judge(turn, args)) for turn in turns]
    failed = [(turn, v) for turn, v in verdicts if v.problems]
    firsts = [v.first_hint for _, v in verdicts if v.first_hint is not None]
    worst_first = f"{max(firsts):.3f} s" if firsts else "none"
    worst_gap = max((v.worst_gap for _, v in verdicts), default=0.0)
    print(
        f"{style:9} runs OK {len(turns) - len(failed)}/{len(turns)};"
        f" worst first hint {worst_first} (limit {args.first_hint + args.tolerance:.2f} s),"
        f" worst gap {worst_gap:.3f} s (limit {args.heartbeat + args.tolerance:.2f} s)"
    )
    for turn, verdict in failed:
        print(f"  turn {turn.index} (chat {turn.chat}): {'; '.join(verdict.problems)}")
        print("\n".join(transcript(turn)))
    return not failed


async def main(args: argparse.Namespace) -> int:
    t = Translator("zh_CN")
    styles = ("messages", "card") if args.style == "both" else (args.style,)
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])  # noqa: ASYNC220
        for _ in range(args.busy)
    ]
    print(
        f"{args.runs} silent turns per style ({args.silence:g} s, then the answer),"
        f" {args.concurrency} at a time, hint at {args.first_hint:g} s, heartbeat every"
        f" {args.heartbeat:g} s, tolerance {args.tolerance:g} s, on {args.loop},"
        f" {args.busy} busy process(es)"
    )
    ok = True
    try:
        for style in styles:
            began = time.perf_counter()
            turns = await run_style(style, args, t)
            ok = report(style, turns, args) and ok
            print(f"          ({time.perf_counter() - began:.0f} s)")
    finally:
        for process in busy:
            process.kill()
            process.wait()
    return 0 if ok else 1


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="turns per style")
    parser.add_argument("--style", choices=("messages", "card", "both"), default="both")
    parser.add_argument("--concurrency", type=int, default=5, help="chats running at once")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--busy", type=int, default=0, help="spinning processes to load cores")
    parser.add_argument("--silence", type=float, default=5.0, help="seconds before the answer")
    parser.add_argument("--first-hint", type=float, default=0.6)
    parser.add_argument("--heartbeat", type=float, default=1.2)
    parser.add_argument("--tolerance", type=float, default=0.3)
    return parser.parse_args()


if __name__ == "__main__":
    from bridge.loops import loop_factory

    arguments = parse()
    with asyncio.Runner(loop_factory=loop_factory(arguments.loop)) as runner:
        sys.exit(runner.run(main(arguments)))
