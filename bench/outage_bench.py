"""A Feishu outage against the real product: what the bridge does while the message API is
down, and how soon every answer is delivered once it is back.

    python bench/outage_bench.py [--chats 20] [--messages 2] [--seconds 60]
                                 [--mode mixed|503|429|timeout] [--kill]
                                 [--loop uvloop|asyncio] [--sleep 7] [--give-up 3600]
                                 [--settle 5] [--trace] [--log N]

It starts the local Feishu emulator and `feishu-bridge run` (its own process, webhook mode,
the scripted ACP agent, BRIDGE_DELIVERY_GIVE_UP_SECONDS at its default unless `--give-up`
says otherwise; the probes follow it, bridge/config/budget.py), opens `--chats` chats and
warms each with one quick turn (so the agents' sessions are up and what is measured is the
outage). Then the emulator's message
API goes down for `--seconds` (`mixed`: 503, then 429 with its reset header, then calls
that time out, a third each; or one mode throughout), and each chat sends `--messages`
messages at once: the first `sleep` for `--sleep` seconds (past the 5 s first hint, so a
"正在处理" line is owed too) then answer, the others answer at once (`say answer <chat>-<n>`).
The API comes back by itself at the end of the schedule.

With `--kill` the bridge is SIGKILLed at the middle of the outage and started again on the
same data folder right after the API is back.

From the emulator's record of the bridge's calls it prints: (1) the calls made while the API
was down (total, per second, the busiest second; acks apart from posts), (2) the time from
the API's return to the first call and to the last answer delivered, (3) whether every answer
arrived exactly once, in order per chat, with no "正在处理" line (`presence.running_hint` or
`presence.heartbeat`, read through `bridge.i18n.Translator`) after its answer or after the
chat's last answer, and no "this turn cannot be recovered" line. Each failing chat's
transcript is printed; it exits 1 if any answer is missing, duplicated or out of order, or a
stale "working" line was shown. Acks (reactions) of messages that came during the outage are
best-effort (docs/troubleshooting.md): counted, not judged. `--trace` prints every call from
the outage on; `--log N` the last N characters of the bridge's log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spawned import BRIDGE, bridge_env, free_port, wait_healthy  # noqa: E402
from bridge.config.budget import BudgetSection  # noqa: E402
from bridge.i18n import Translator  # noqa: E402

ENCRYPT_KEY = "bench-encrypt-key"
TOKEN = "bench-verification-token"
T = Translator("zh_CN")
WORKING = (T("presence.running_hint"), T("presence.heartbeat", elapsed="\0").split("\0")[0])
LOST = T("presence.unrecoverable")
# The first seconds of an outage carry the calls already on their way when it began (the
# acks, and each post's own quick retries before the gate closes); after them, the probes.
STEADY = 5.0


def schedule(mode: str, seconds: float) -> list[tuple[str, float]]:
    if mode == "mixed":
        return [("503", seconds / 3), ("429", seconds / 3), ("timeout", seconds / 3)]
    return [(mode, seconds)]


def kind(call: Any) -> str:
    """ack (reactions), post (a message sent, replied, edited), other (token, cards)."""
    if call.path.endswith("/reactions") or "/reactions/" in call.path:
        return "ack"
    if call.path.startswith("/open-apis/im/v1/messages"):
        return "post"
    return "other"


@dataclass
class Chat:
    index: int
    chat_id: str
    sent: list[tuple[str, str]] = field(default_factory=list)  # (message id, answer due)


class Bridge:
    """`feishu-bridge run` as its own process, started again on the same data folder."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.port = int(env["BRIDGE_PORT"])
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> float:
        """Spawn; seconds to a healthy /healthz."""
        began = time.perf_counter()
        with open(self.log, "ab") as log:  # noqa: ASYNC230 - once per start
            self.process = subprocess.Popen(  # noqa: ASYNC220
                [str(BRIDGE), "run"], env=self.env, stdin=subprocess.DEVNULL, stderr=log
            )
        await wait_healthy(self.port, self.process)
        return time.perf_counter() - began

    def kill(self) -> None:
        """SIGKILL, as an OOM killer or a power cut would; then its agents, which it can no
        longer end (by their process ids, read before the kill)."""
        assert self.process is not None
        agents = _children(self.process.pid)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        for pid in agents:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


# --- the run -------------------------------------------------------------------------------


@dataclass
class Outcome:
    began: float  # wall clock when the API went down
    back: float  # wall clock when it was up again
    killed_at: float | None = None
    healthy_after: float | None = None  # the restarted bridge, seconds from spawn
    chats: list[Chat] = field(default_factory=list)
    calls: list[Any] = field(default_factory=list)
    messages: dict[str, list[Any]] = field(default_factory=dict)  # chat id -> bot messages
    acks: dict[str, int] = field(default_factory=dict)  # user message id -> reactions on it
    mid_status: dict[str, Any] = field(default_factory=dict)  # at the outage's middle
    status: dict[str, Any] = field(default_factory=dict)  # at the end


def answered(emu: Any, chats: list[Chat]) -> bool:
    due = {a for c in chats for _, a in c.sent}
    return due <= {m.text for m in emu.bot_messages()}


async def quiet(emu: Any, seconds: float, within: float) -> None:
    """Until the bridge made no call for `seconds` (a late duplicate or hint would show)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        calls = emu.calls()
        if not calls or time.time() - calls[-1].at >= seconds:
            return
        await asyncio.sleep(0.1)


async def run(args: argparse.Namespace) -> Outcome:
    from bridge.devtools.emulator import FeishuEmulator

    async with FeishuEmulator(encrypt_key=ENCRYPT_KEY, verification_token=TOKEN) as emu:
        with tempfile.TemporaryDirectory() as folder:
            env = bridge_env(
                emu,
                Path(folder),
                free_port(),
                FEISHU_ENCRYPT_KEY=ENCRYPT_KEY,
                SCRIPTED_AGENT_STATE_DIR=str(Path(folder, "agent-state")),  # a restart loads
                BRIDGE_ALLOW_ALL="true",
                BRIDGE_LOG_LEVEL="WARNING",
                BRIDGE_EVENT_LOOP=args.loop,
                BRIDGE_DELIVERY_GIVE_UP_SECONDS=str(args.give_up),
            )
            await asyncio.to_thread(Path(folder, "work").mkdir)
            bridge = Bridge(env, Path(folder, "bridge.log"))
            try:
                return await _outage(emu, bridge, env, args)
            finally:
                bridge.stop()
                if args.log:
                    log = await asyncio.to_thread(Path(folder, "bridge.log").read_text)
                    print(log[-args.log :])


async def _outage(
    emu: Any, bridge: Bridge, env: dict[str, str], args: argparse.Namespace
) -> Outcome:
    await bridge.start()
    emu.webhook_url = f"http://127.0.0.1:{bridge.port}/feishu/events"
    chats = [
        Chat(n, emu.open_chat("p2p", user_open_id=f"ou_outage_{n}")) for n in range(args.chats)
    ]
    for chat in chats:  # warm: the agent's session is up before the outage
        await emu.send_user_message(f"say warm {chat.index}", chat_id=chat.chat_id)
    warm = {f"warm {c.index}" for c in chats}
    await emu.wait_for(lambda: warm <= {m.text for m in emu.bot_messages()}, timeout=120)
    await quiet(emu, 1.0, within=30)

    began = time.time()
    emu.set_api_outage(schedule(args.mode, args.seconds))
    for n in range(args.messages):  # each chat's n-th message, the chats at once
        sends = []
        for chat in chats:
            answer = f"answer {chat.index}-{n}"
            script = (
                f"sleep {round(args.sleep * 1000)}\nsay {answer}" if n == 0 else f"say {answer}"
            )
            sends.append(emu.send_user_message(script, chat_id=chat.chat_id))
        for chat, delivered in zip(chats, await asyncio.gather(*sends), strict=True):
            chat.sent.append((delivered.message_id, f"answer {chat.index}-{n}"))
    outcome = Outcome(began, 0.0, chats=chats)
    ops = f"http://127.0.0.1:{env['BRIDGE_OPS_PORT']}/status"
    await asyncio.sleep(max(0.0, began + args.seconds / 2 - time.time()))
    outcome.mid_status = await feishu_api(ops)  # what an operator sees in the middle
    if args.kill:
        outcome.killed_at = time.time()
        bridge.kill()
    state = emu.outage.state()
    left = (state.remaining_seconds or 0.0) + sum(s.seconds or 0.0 for s in state.next_steps)
    await asyncio.sleep(max(0.0, left - 0.05))
    # The schedule runs on the emulator's clock and nothing signals its end: look closely.
    while emu.outage.state().mode.value != "up":  # noqa: ASYNC110
        await asyncio.sleep(0.002)
    outcome.back = time.time()
    if args.kill:
        outcome.healthy_after = await bridge.start()
    with contextlib.suppress(TimeoutError):  # judged below as missing
        await emu.wait_for(lambda: answered(emu, chats), timeout=args.seconds + 300)
    await quiet(emu, args.settle, within=120)
    outcome.calls = emu.calls()
    outcome.messages = {c.chat_id: emu.bot_messages(c.chat_id) for c in chats}
    outcome.acks = {mid: len(emu.reactions(mid)) for c in chats for mid, _ in c.sent}
    outcome.status = await feishu_api(ops)
    return outcome


async def feishu_api(url: str) -> dict[str, Any]:
    """`/status`'s feishu_api ({} if it did not answer)."""
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
            found = (await http.get(url)).json().get("feishu_api", {})
            return found if isinstance(found, dict) else {}
    return {}


# --- the verdict ---------------------------------------------------------------------------


def judge(chat: Chat, shown: list[Any]) -> list[str]:
    """What is wrong with what the chat's user saw (nothing: [])."""
    texts = [m.text or "" for m in shown]
    due = [a for _, a in chat.sent]
    got = [t for t in texts if t.startswith("answer ")]
    problems = []
    missing = [a for a in due if a not in got]
    doubled = [a for a, n in Counter(got).items() if n > 1]
    if missing:
        problems.append(f"missing {missing}")
    if doubled:
        problems.append(f"duplicated {doubled}")
    if not missing and list(dict.fromkeys(got)) != due:
        problems.append(f"out of order {got}")
    answer_at = {m.parent_id: i for i, m in enumerate(shown) if (m.text or "") in due}
    for i, m in enumerate(shown):
        if not (m.text or "").startswith(WORKING):
            continue
        own = answer_at.get(m.parent_id)
        if (own is not None and i > own) or (answer_at and i > max(answer_at.values())):
            problems.append(f"'{m.text}' after the answer")
    if LOST in texts:
        problems.append("told the turn was lost")
    return problems


def transcript(chat: Chat, shown: list[Any], began: float) -> list[str]:
    names = {mid: f"message {n}" for n, (mid, _) in enumerate(chat.sent)}
    return [
        f"      +{m.create_time_ms / 1000 - began:7.3f} to {names.get(m.parent_id, m.parent_id)}:"
        f" {m.text if m.text is not None else m.msg_type}"
        for m in shown
    ]


def busiest(calls: list[Any], began: float) -> int:
    return max(Counter(int(c.at - began) for c in calls).values(), default=0)


def report(o: Outcome, args: argparse.Namespace) -> bool:
    down = [c for c in o.calls if o.began <= c.at < o.back]
    seconds = o.back - o.began
    steps = ", ".join(f"{m} {s:g} s" for m, s in schedule(args.mode, args.seconds))
    window = BudgetSection(_env_file=None, bridge_delivery_give_up_seconds=args.give_up)
    first, longest = window.probe_seconds
    print(
        f"outage {seconds:.1f} s ({steps}), {args.chats} chats x {args.messages} messages,"
        f" probes {first:g}..{longest:g} s, {args.loop},"
        f" kill {'at +%.1f s' % (o.killed_at - o.began) if o.killed_at else 'no'}"
    )
    print(
        f"  calls while down   {'total':>6} {'per s':>6} {'busiest s':>9}"
        f" | from +{STEADY:g} s: {'total':>5} {'per s':>6} {'busiest s':>9}"
    )
    for name in ("ack", "post", "other", "all"):
        mine = [c for c in down if name == "all" or kind(c) == name]
        late = [c for c in mine if c.at >= o.began + STEADY]
        label = {"ack": "acks (reactions)", "post": "posts", "other": "other (token)"}
        print(
            f"  {label.get(name, name):18} {len(mine):6} {len(mine) / seconds:6.2f}"
            f" {busiest(mine, o.began):9} |{'':11}{len(late):5}"
            f" {len(late) / max(seconds - STEADY, 1e-9):6.2f} {busiest(late, o.began):9}"
        )
    after = [c for c in o.calls if c.at >= o.back]
    dues = {a for c in o.chats for _, a in c.sent}
    delivered = [
        c
        for c in after
        if c.ok
        and kind(c) == "post"
        and c.method == "POST"
        and ((c.json_content() or {}).get("text") in dues)
    ]
    first = f"+{after[0].at - o.back:.2f} s" if after else "none"
    last = f"+{max(c.at for c in delivered) - o.back:.2f} s" if delivered else "none"
    restart = f", restarted bridge healthy after {o.healthy_after:.2f} s" if o.healthy_after else ""
    print(f"  from the API's return: first call {first}, last answer {last}{restart}")
    bad = 0
    for chat in o.chats:
        problems = judge(chat, o.messages[chat.chat_id])
        if problems:
            bad += 1
            print(f"  chat {chat.index}: {'; '.join(problems)}")
            print("\n".join(transcript(chat, o.messages[chat.chat_id], o.began)))
    total = sum(len(c.sent) for c in o.chats)
    shown = sum(
        1 for c in o.chats for m in o.messages[c.chat_id] if (m.text or "").startswith("answer ")
    )
    once = sum(1 for n in o.acks.values() if n == 1)
    print(
        f"  answers shown {shown}/{total}; chats all right {len(o.chats) - bad}/{len(o.chats)};"
        f" messages acked once {once}/{total} (best-effort);"
        f" answers posted after the return {len(delivered)}"
    )
    print(f"  /status feishu_api at +{seconds / 2:.0f} s: {o.mid_status}; at the end: {o.status}")
    if args.trace:
        for c in o.calls:
            if c.at >= o.began:
                print(
                    f"    +{c.at - o.began:7.3f} {c.method:6} {c.path} {c.status} {c.fault or ''}"
                )
    return bad == 0


async def main(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    outcome = await run(args)
    ok = report(outcome, args)
    print(f"  ({time.perf_counter() - began:.0f} s)")
    return 0 if ok else 1


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--messages", type=int, default=2, help="per chat, during the outage")
    parser.add_argument("--seconds", type=float, default=60.0, help="the outage's length")
    parser.add_argument("--mode", choices=("mixed", "503", "429", "timeout"), default="mixed")
    parser.add_argument("--kill", action="store_true", help="SIGKILL the bridge mid-outage")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--sleep", type=float, default=7.0, help="the first message's silence")
    parser.add_argument(
        "--give-up", type=float, default=3600.0, help="BRIDGE_DELIVERY_GIVE_UP_SECONDS"
    )
    parser.add_argument("--settle", type=float, default=5.0, help="quiet seconds at the end")
    parser.add_argument("--trace", action="store_true", help="print every call from the outage on")
    parser.add_argument("--log", type=int, default=0, help="print the bridge log's last N chars")
    return parser.parse_args()


if __name__ == "__main__":
    from bridge.loops import loop_factory

    arguments = parse()
    with asyncio.Runner(loop_factory=loop_factory(arguments.loop)) as runner:
        sys.exit(runner.run(main(arguments)))
