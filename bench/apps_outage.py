"""One app's Feishu API down for a minute, with the bridge serving several apps (issue 44):
are the other apps' answers delayed, and does the down app lose or repeat any?

    python bench/apps_outage.py [--apps 3] [--chats 10] [--seconds 60] [--every 3]
                                [--mode mixed|503|429|timeout|up] [--give-up 3600]

It starts the local Feishu emulator and two twin `feishu-bridge run` processes, X and Y,
each serving `--apps` apps of the emulator from its own config file (BRIDGE_CONFIG_FILE),
each app by webhook on its own path, one project with the scripted ACP agent; every app
has `--chats` private chats, warmed with one quick turn. Then three windows of `--seconds`
each, in which every chat's user sends a message every `--every` seconds (the chats
staggered), each answered at once:

1. calm: every app's API up;
2. X's second app's message API down for the whole window (`mixed`: 503, then 429 with its
   reset header, then calls that time out, a third each; or one mode throughout); it comes
   back by itself at the window's end, and the bench waits for its answers;
3. the same for Y's second app.

The twins run at the same time on the same machine, so the bridge without the outage is
the run without it, under the same load from the rest of the machine (on a busy machine two
windows one after the other differ by far more than 10 % by chance: `--mode up` shows it).
It prints, per window and bridge, the latency of the answers (from the user's message to the
bot's answer, as the emulator stamped them: p50, p95, max) of the apps that stay up and of
the down app; for each outage, the up apps' p95 in the bridge with the outage against the
same apps of its twin (the issue asks for within 10 %); and whether the down app's answers
all arrived exactly once, in order per chat, and how long after its API's return the last
one came. Exits 1 if an answer is missing, doubled or out of order, or the p95 of both
outage windows together is more than `--within` (10 %) above the twin's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.outage_bench import schedule  # noqa: E402
from bench.spawned import (  # noqa: E402
    BRIDGE,
    apps_config,
    bridge_env,
    cpu_s,
    free_port,
    loop_lag,
    wait_healthy,
)
from bridge.config.budget import BudgetSection  # noqa: E402

TWINS = ("X", "Y")


@dataclass
class Sent:
    app: str
    chat: str
    message_id: str
    answer: str  # the answer due
    at: float  # wall clock


@dataclass
class Window:
    name: str
    down: str | None  # the app_id whose API is down
    began: float = 0.0
    ended: float = 0.0
    back: float = 0.0  # when the down app's API was up again
    sent: list[Sent] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # each twin's CPU seconds
    lags: list[float] = field(default_factory=list)  # the bench's own loop, meanwhile


@dataclass
class Twin:
    name: str
    apps: list[str]  # app_ids
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


def app_name(n: int) -> str:
    return chr(ord("a") + n)


def start(emu: Any, twin: Twin, folder: Path, args: argparse.Namespace) -> None:
    keys = {f"SECRET_{n}": f"{a}-secret" for n, a in enumerate(twin.apps)}
    keys |= {f"TOKEN_{n}": f"{a}-t" for n, a in enumerate(twin.apps)}
    twin.port = free_port()
    env = bridge_env(emu, folder, twin.port, BRIDGE_LOG_LEVEL="WARNING", **keys)
    for key in [k for k in env if k.startswith("FEISHU_")]:
        del env[key]  # the apps are the file's
    env["BRIDGE_CONFIG_FILE"] = str(
        apps_config(folder, emu.url, twin.apps, [app_name(n) for n in range(len(twin.apps))])
    )
    env["BRIDGE_DELIVERY_GIVE_UP_SECONDS"] = str(args.give_up)
    with open(folder / "bridge.log", "ab") as log:
        twin.process = subprocess.Popen(
            [str(BRIDGE), "run"], env=env, stdin=subprocess.DEVNULL, stderr=log
        )
    for n, app in enumerate(twin.apps):
        emu.set_webhook_url(f"http://127.0.0.1:{twin.port}/feishu/events/{app_name(n)}", app)


def stop(twin: Twin) -> None:
    if twin.process is None or twin.process.poll() is not None:
        return
    twin.process.terminate()
    try:
        twin.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        twin.process.kill()


async def talk(
    emu: Any, chats: list[tuple[str, str, str]], window: Window, twins: list[Twin], args: Any
) -> None:
    """Each chat's user writes every `--every` seconds for the window, the chats staggered."""
    rng = random.Random(window.name)
    offsets = [rng.uniform(0, args.every) for _ in chats]
    window.began = time.time()
    cpu = {t.name: cpu_s(t.pid) for t in twins}
    lagging = asyncio.create_task(loop_lag(window.lags))
    count = int(args.seconds / args.every)

    async def one(n: int, app: str, user: str, chat: str) -> None:
        for i in range(count):
            due = window.began + offsets[n] + i * args.every
            await asyncio.sleep(max(0.0, due - time.time()))
            text = f"{window.name}-{n}-{i}"
            message = await emu.send_user_message(text, app_id=app, sender_open_id=user)
            window.sent.append(Sent(app, chat, message.message_id, f"echo: {text}", time.time()))

    await asyncio.gather(*(one(n, *c) for n, c in enumerate(chats)))
    window.ended = time.time()
    window.cpu = {t.name: cpu_s(t.pid) - cpu[t.name] for t in twins}
    lagging.cancel()


def answered(emu: Any, sent: list[Sent]) -> bool:
    chats = {(s.app, s.chat) for s in sent}
    shown = {m.parent_id for app, chat in chats for m in emu.bot_messages(chat, app_id=app)}
    return all(s.message_id in shown for s in sent)


def latencies(emu: Any, sent: list[Sent]) -> list[float]:
    """Seconds from each message to its answer (the emulator's stamps), sorted."""
    found = []
    for s in sent:
        asked = emu.message(s.message_id).create_time_ms
        for m in emu.bot_messages(s.chat, app_id=s.app):
            if m.parent_id == s.message_id and m.text == s.answer:
                found.append((m.create_time_ms - asked) / 1000)
                break
    return sorted(found)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(len(values) * q))]


def judge(emu: Any, sent: list[Sent]) -> list[str]:
    """What is wrong with an app's answers: each once, in order per chat."""
    problems = []
    for app, chat in dict.fromkeys((s.app, s.chat) for s in sent):
        due = [s.answer for s in sent if s.chat == chat]
        got = [m.text for m in emu.bot_messages(chat, app_id=app) if m.text in due]
        missing = [a for a in due if a not in got]
        doubled = [a for a, n in Counter(got).items() if n > 1]
        if missing:
            problems.append(f"{chat}: missing {missing}")
        if doubled:
            problems.append(f"{chat}: doubled {doubled}")
        if not missing and not doubled and got != due:
            problems.append(f"{chat}: out of order {got}")
    return problems


async def run(args: argparse.Namespace) -> int:
    from bridge.devtools.emulator import FeishuEmulator
    from bridge.devtools.emulator.apps import AppSpec

    twins = [
        Twin(name, [f"cli_{name.lower()}_{app_name(n)}" for n in range(args.apps)])
        for name in TWINS
    ]
    specs = [
        AppSpec(a, f"{a}-secret", bot_name=a, verification_token=f"{a}-t")
        for twin in twins
        for a in twin.apps
    ]
    async with FeishuEmulator(apps=specs) as emu:
        with tempfile.TemporaryDirectory() as folder:
            try:
                for twin in twins:
                    await asyncio.to_thread(start, emu, twin, Path(folder, twin.name), args)
                for twin in twins:
                    assert twin.process is not None
                    await wait_healthy(twin.port, twin.process)
                windows = await measure(emu, twins, args)
                return report(emu, twins, windows, args)
            finally:
                for twin in twins:
                    stop(twin)
                if args.log:
                    for twin in twins:
                        log = await asyncio.to_thread(
                            Path(folder, twin.name, "bridge.log").read_text
                        )
                        print(f"--- {twin.name}'s log\n{log[-args.log :]}")


async def measure(emu: Any, twins: list[Twin], args: argparse.Namespace) -> list[Window]:
    chats = []
    for twin in twins:
        for app in twin.apps:
            for n in range(args.chats):
                user = f"ou_bench_{n:03d}"
                chats.append((app, user, emu.p2p_chat(app, user)))
    warm = Window("warm", None)
    for app, user, chat in chats:
        message = await emu.send_user_message("warm", app_id=app, sender_open_id=user)
        warm.sent.append(Sent(app, chat, message.message_id, "echo: warm", time.time()))
    await emu.wait_for(lambda: answered(emu, warm.sent), timeout=300)

    windows = [Window("calm", None)] + [Window(f"{t.name}-down", t.apps[1]) for t in twins]
    for window in windows:
        if window.down is not None:
            emu.set_api_outage(schedule(args.mode, args.seconds), apps=[window.down])
        await talk(emu, chats, window, twins, args)
        # The schedule runs on the emulator's clock and nothing signals its end: look closely.
        while emu.outage.state().mode.value != "up":  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        window.back = time.time()
        with contextlib.suppress(TimeoutError):  # judged below as missing
            await emu.wait_for(lambda w=window: answered(emu, w.sent), timeout=args.seconds + 300)
    return windows


def up_apps(twin: Twin) -> list[str]:
    """The apps compared: all but the second (the one that goes down in its window)."""
    return [a for a in twin.apps if a != twin.apps[1]]


def report(emu: Any, twins: list[Twin], windows: list[Window], args: argparse.Namespace) -> int:
    first, longest = BudgetSection(
        _env_file=None, bridge_delivery_give_up_seconds=args.give_up
    ).probe_seconds
    steps = ", ".join(f"{m} {s:g} s" for m, s in schedule(args.mode, args.seconds))
    print(
        f"twin bridges X and Y, {args.apps} apps each x {args.chats} chats, a message every"
        f" {args.every:g} s per chat, windows of {args.seconds:g} s; in its window the second"
        f" app of X, then of Y, is down ({steps}); probes {first:g}..{longest:g} s"
    )
    print(
        f"  {'window':8} {'bridge':6} {'apps':10} {'sent':>5} {'answered':>8}"
        f" {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}  bridge CPU"
    )
    for window in windows:
        for twin in twins:
            groups = [
                ("up", up_apps(twin)),
                ("down" if window.down in twin.apps else "2nd", [twin.apps[1]]),
            ]
            for label, apps in groups:
                mine = [s for s in window.sent if s.app in apps]
                got = latencies(emu, mine)
                cpu = f"{window.cpu[twin.name]:.1f} s" if label == "up" else ""
                print(
                    f"  {window.name:8} {twin.name:6} {label:10} {len(mine):5} {len(got):8}"
                    f" {pct(got, 0.5) * 1000:7.0f} {pct(got, 0.95) * 1000:7.0f}"
                    f" {(got[-1] if got else float('nan')) * 1000:7.0f}  {cpu}"
                )
    ok = True
    pooled: dict[str, list[float]] = {"with": [], "without": []}
    for window in windows:
        lags = sorted(window.lags)
        lag = f"the bench's own loop late p95 {pct(lags, 0.95) * 1000:.0f} ms"
        if window.down is None:
            x, y = (latencies(emu, [s for s in window.sent if s.app in up_apps(t)]) for t in twins)
            grew = pct(x, 0.95) / pct(y, 0.95) - 1
            print(f"  calm: X's up apps' p95 against Y's {grew:+.1%} (chance, nothing down); {lag}")
            continue
        hit = next(t for t in twins if window.down in t.apps)
        twin = next(t for t in twins if t is not hit)
        mine = latencies(emu, [s for s in window.sent if s.app in up_apps(hit)])
        theirs = latencies(emu, [s for s in window.sent if s.app in up_apps(twin)])
        pooled["with"] += mine
        pooled["without"] += theirs
        grew = pct(mine, 0.95) / pct(theirs, 0.95) - 1
        print(
            f"  {window.name}: {hit.name}'s up apps' p95 {pct(mine, 0.95) * 1000:.0f} ms with"
            f" its app down, {twin.name}'s {pct(theirs, 0.95) * 1000:.0f} ms ({grew:+.1%}); {lag}"
        )
        if len(schedule(args.mode, args.seconds)) > 1:  # in each step of the outage
            parts, begin = [], window.began
            for mode, seconds in schedule(args.mode, args.seconds):
                part = [s for s in window.sent if begin <= s.at < begin + seconds]
                a = latencies(emu, [s for s in part if s.app in up_apps(hit)])
                b = latencies(emu, [s for s in part if s.app in up_apps(twin)])
                parts.append(f"{mode} {pct(a, 0.95) * 1000:.0f}/{pct(b, 0.95) * 1000:.0f} ms")
                begin += seconds
            print(f"    p95 by the outage's step, with/without: {', '.join(parts)}")
        theirs_sent = [s for s in window.sent if s.app == window.down]
        problems = judge(emu, theirs_sent)
        due = {s.message_id: s.answer for s in theirs_sent}
        posted = [
            m.create_time_ms / 1000
            for chat in {s.chat for s in theirs_sent}
            for m in emu.bot_messages(chat, app_id=window.down)
            if due.get(m.parent_id or "") == m.text
        ]
        early = sum(1 for t in posted if t < window.back)
        last = f"+{max(posted) - window.back:.2f} s" if posted else "none"
        print(
            f"    the down app: {len(theirs_sent)} messages, {len(posted)} answers; once each,"
            f" in order: {'yes' if not problems else 'NO'}; posted while down {early};"
            f" the last {last} after its API's return"
        )
        for problem in problems[:10]:
            print(f"      {problem}")
        ok = ok and not problems
    everyone = [s for w in windows for s in w.sent if s.app != w.down]
    problems = judge(emu, everyone)
    for problem in problems[:10]:
        print(f"    up app: {problem}")
    with_, without = sorted(pooled["with"]), sorted(pooled["without"])
    grew = pct(with_, 0.95) / pct(without, 0.95) - 1
    within = grew <= args.within
    print(
        f"  both outages: the up apps' p95 {pct(with_, 0.95) * 1000:.0f} ms beside the down"
        f" app, {pct(without, 0.95) * 1000:.0f} ms in the twin ({grew:+.1%}); within"
        f" {args.within:.0%}: {'yes' if within else 'NO'}; the up apps' answers once each,"
        f" in order: {'yes' if not problems else 'NO'}"
    )
    return 0 if ok and within and not problems else 1


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--apps", type=int, default=3, help="per bridge")
    parser.add_argument("--chats", type=int, default=10, help="per app")
    parser.add_argument("--seconds", type=float, default=60.0, help="each window's length")
    parser.add_argument(
        "--every", type=float, default=3.0, help="seconds between a user's messages"
    )
    parser.add_argument(
        "--mode",
        choices=("mixed", "503", "429", "timeout", "up"),
        default="mixed",
        help="up: nothing goes down (a control run)",
    )
    parser.add_argument(
        "--give-up", type=float, default=3600.0, help="BRIDGE_DELIVERY_GIVE_UP_SECONDS"
    )
    parser.add_argument("--within", type=float, default=0.10, help="the p95's allowed growth")
    parser.add_argument("--log", type=int, default=0, help="print the bridges' logs' last N chars")
    args = parser.parse_args()
    if args.apps < 2:
        parser.error("--apps is at least 2 (one down, the others measured)")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(run(parse())))
