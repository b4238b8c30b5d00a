"""Several bridge instances on one PostgreSQL (issue 12), side by side in one run: one
instance on SQLite (the default, the baseline), one on PostgreSQL, two on the same
PostgreSQL with the emulator spreading pushes at random over both webhooks, as a load
balancer would. Each instance is `feishu-bridge run` as its own process (webhook mode,
encrypted and signed events, the scripted agent), against the local Feishu emulator.

    python bench/cluster_bench.py [--n 600] [--rate 100] [--chats 30]     (under 1 min)
    python bench/cluster_bench.py --max [--from 50] [--p99 1000]          (2-4 min)

Each setup starts from scratch: a fresh emulator, a fresh database (LISTEN/NOTIFY channels
are database-wide, so a schema would not do), its instances. Messages are pushed at
`--rate` per second, round-robin over `--chats` private chats, after one warm-up message
per chat (agents start, pools warm, and with two instances each chat's lease goes to the
instance its first message landed on; a later message landing on the other one is handed
over through the journal and LISTEN/NOTIFY). The answer is the bridge's reply
`echo: <text>` from the scripted agent. For each setup it prints:

- msg/s: answered messages / wall time from the first push to the last answer;
- ack p50 / p99: the emulator's push -> the reaction POST; answer p99: push -> the answer;
- answered once / acked once: messages with exactly one answer / one reaction;
- in order: chats whose answers came in the order their messages were pushed (a message
  pushed while the one before it is still being taken may overtake it, as on Feishu; one
  pushed after the one before was taken, so journaled, may not: a note names any);
- chats run, handed over: how many chats each instance holds the lease of, and the pushes
  that landed on the instance not running their chat (from the database's leases);
- CPU ms per message, over the timed load: each bridge process's own user + system time
  from /proc (divided by all the messages, so two instances' figures add up), its agents'
  apart, the PostgreSQL server's (all its processes), and this process's (the emulator);
- RSS of each bridge after the load;
- below the table, how busy the whole machine was during each load and how much of it was
  not this bench (other work on a shared machine takes cores from the bridges).

`--max` ramps the rate instead, from `--from` per second, times `--step` each step, with
`--seconds` of load per step (each step from scratch too), and prints per setup the highest
rate sustained: every message answered and acked once, none out of order, and ack p99 and
answer p99 both under `--p99` ms (the answers keep pace, not only the acks).

Everything runs on 127.0.0.1. The emulator runs in this process, as in relay_bench.py: the
bridges are their own processes, so their CPU is theirs alone, and the times are the
emulator's own records (push, reaction, answer), free of this script's wake-up lag. The
PostgreSQL cluster is tests/pg.py's `PgServer` (imported as is: a throwaway cluster in a
temp folder on a free port, fsync off, run as the postgres user under root).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
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

from bench.spawned import (  # noqa: E402
    BRIDGE,
    CLK_TCK,
    bridge_env,
    cpu_s,
    free_port,
    rss_mib,
    wait_healthy,
)

ENCRYPT_KEY = "bench-encrypt-key"
TOKEN = "bench-verification-token"
SETUPS = (  # name, on PostgreSQL, instances
    ("sqlite, 1 instance", False, 1),
    ("postgres, 1 instance", True, 1),
    ("postgres, 2 instances", True, 2),
)


# --- processes -------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (all cores, from /proc/stat)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process, its children it has reaped and its live children: a
    difference of two readings counts the children that came and went between them."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = sum(int(f) for f in fields[11:15]) / CLK_TCK
    return own + sum(cpu_s(c) for c in children(pid))


@dataclass
class Instance:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def webhook(self) -> str:
        return f"http://127.0.0.1:{self.port}/feishu/events"


async def spawn(
    emu: Any, folder: Path, name: str, database: str | None, args: argparse.Namespace
) -> Instance:
    port = free_port()
    settings = {
        "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "BRIDGE_ALLOW_ALL": "true",
        "BRIDGE_MAX_AGENTS": "2",
        "BRIDGE_LOG_LEVEL": "WARNING",
        "BRIDGE_WORKDIR": str(folder / "work"),  # one folder, as a cluster's agents share
        "BRIDGE_INSTANCE_ID": name,
        "BRIDGE_LEASE_SECONDS": str(args.lease),
    }
    if database:
        settings["BRIDGE_DATABASE_URL"] = database
    env = bridge_env(emu, folder / name, port, **settings)
    env["SCRIPTED_AGENT_STATE_DIR"] = str(folder / "agent-state")  # sessions load anywhere
    log = folder / f"{name}.log"
    with log.open("wb") as out:  # the child keeps its own copy
        process = subprocess.Popen(  # noqa: ASYNC220 - once per instance, not on a hot path
            [str(BRIDGE), "run"], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    return Instance(name, process, port, log)


async def stop(instances: list[Instance]) -> None:
    for instance in instances:
        if instance.process.poll() is None:
            instance.process.terminate()
    for instance in instances:
        try:
            await asyncio.to_thread(instance.process.wait, 30)
        except subprocess.TimeoutExpired:
            instance.process.kill()
            await asyncio.to_thread(instance.process.wait)


# --- the load and what the emulator saw ------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    message_id: str
    chat_id: str
    text: str
    at: float  # when Feishu started pushing it (the emulator's wall clock)
    taken_at: float | None  # when the first push was answered 200, None if it was not
    url: str  # the webhook the first push went to


async def load(emu: Any, chats: list[tuple[str, str]], n: int, rate: float, tag: str) -> list[Sent]:
    """Push `n` messages at `rate`, round-robin over `chats` ((chat id, user) each)."""
    start = time.perf_counter()
    pushes = []
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        chat, user = chats[i % len(chats)]
        text = f"hello {tag}{i}."  # the full stop: "echo: hello 5." is not in "…50."
        send = emu.send_user_message(text, chat_id=chat, sender_open_id=user)
        pushes.append((text, asyncio.create_task(send)))
    out = []
    for text, push in pushes:
        d = await push
        first = d.first_attempt
        taken = first.at + first.latency_ms / 1000 if first.ok else None
        out.append(Sent(d.message_id, d.chat_id, text, first.at, taken, first.url))
    return out


@dataclass
class Seen:
    """The reactions and answers the bridges posted, per message id, read from the
    emulator's calls as they come (each call looked at once)."""

    emu: Any
    cursor: int = 0
    reactions: dict[str, list[float]] = field(default_factory=dict)
    answers: dict[str, list[tuple[int, float, str]]] = field(default_factory=dict)

    def update(self) -> None:
        calls = self.emu.calls("/open-apis/im/v1/messages/", method="POST")  # append-only
        for call in calls[self.cursor :]:
            message_id = call.path.split("/")[-2]
            if call.path.endswith("/reactions"):
                self.reactions.setdefault(message_id, []).append(call.at)
            elif call.path.endswith("/reply") and "echo: hello" in (body := json.dumps(call.body)):
                self.answers.setdefault(message_id, []).append((call.seq, call.at, body))
        self.cursor = len(calls)

    async def settle(self, sent: list[Sent], within: float) -> None:
        """Until every message in `sent` has its answer. Polled every 50 ms rather than on
        each of the emulator's changes: the times come from its records anyway, and reading
        its calls on every change would take this process's CPU from the bridges."""
        waiting = {s.message_id for s in sent}
        async with asyncio.timeout(within):
            while True:
                self.update()
                waiting -= self.answers.keys()
                if not waiting:
                    return
                await asyncio.sleep(0.05)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else math.nan


@dataclass(frozen=True)
class Result:
    rate: float
    n: int
    chats: int
    msgs_per_s: float
    ack50: float
    ack99: float
    answer99: float
    answered_once: int
    acked_once: int
    in_order: int
    ordered_pairs: int  # successive messages of a chat, the second pushed after the first
    # was taken (answered 200, so journaled): their answers must come in that order
    order_broken: list[str]  # of those, "chat: b answered before a"
    refused: int  # first pushes not answered 200 (Feishu redelivers them)
    handed_over: int | None
    held: list[int] | None  # chats each instance runs
    cpu: list[float]  # ms per message, each bridge process
    agents: float  # ms per message, all agents
    postgres: float | None  # ms per message, the PostgreSQL server
    rss: list[float]
    emulator: float  # ms per message, this process (the emulator and the load)
    busy: float  # cores the whole machine kept busy during the load
    ours: float  # of which this bench's processes

    @property
    def clean(self) -> bool:
        return (
            self.answered_once == self.n == self.acked_once
            and not self.order_broken
            and not self.refused
        )


def tally(seen: Seen, sent: list[Sent]) -> dict[str, Any]:
    """What the emulator recorded about `sent`."""
    answers = seen.answers
    acks = [
        (seen.reactions[s.message_id][0] - s.at) * 1000
        for s in sent
        if s.message_id in seen.reactions
    ]
    expected = {s.message_id: f"echo: {s.text}" for s in sent}
    once = sum(
        1
        for s in sent
        if len(answers.get(s.message_id, [])) == 1
        and expected[s.message_id] in answers[s.message_id][0][2]
    )
    answered_at = [answers[s.message_id][0][1] for s in sent if s.message_id in answers]
    wall = max(answered_at) - min(s.at for s in sent) if answered_at else math.nan
    by_chat: dict[str, list[Sent]] = {}
    for s in sent:
        by_chat.setdefault(s.chat_id, []).append(s)
    in_order, pairs, broken = 0, 0, []
    for chat, pushed in by_chat.items():
        first_answer = {
            s.message_id: answers[s.message_id][0][0] for s in pushed if s.message_id in answers
        }
        answered = sorted(first_answer, key=first_answer.__getitem__)
        if answered == [s.message_id for s in pushed if s.message_id in first_answer]:
            in_order += 1
        for a, b in itertools.pairwise(pushed):
            if a.taken_at is None or a.taken_at > b.at:
                continue  # pushed before the one before it was taken: no order is promised
            pairs += 1
            first, then = first_answer.get(a.message_id), first_answer.get(b.message_id)
            if first is not None and then is not None and then < first:
                broken.append(f"{chat}: {b.text!r} answered before {a.text!r}")
    return {
        "msgs_per_s": len(answered_at) / wall if wall > 0 else math.nan,
        "ack50": pct(acks, 0.5),
        "ack99": pct(acks, 0.99),
        "answer99": pct(
            [(answers[s.message_id][0][1] - s.at) * 1000 for s in sent if s.message_id in answers],
            0.99,
        ),
        "answered_once": once,
        "acked_once": sum(1 for s in sent if len(seen.reactions.get(s.message_id, [])) == 1),
        "in_order": in_order,
        "ordered_pairs": pairs,
        "order_broken": broken,
        "refused": sum(1 for s in sent if s.taken_at is None),
    }


def ownership(database: str, sent: list[Sent], instances: list[Instance]) -> tuple[int, list[int]]:
    """Pushes that landed on an instance other than the one holding their chat's lease, and
    how many chats each instance holds (from the database's leases)."""
    import psycopg

    with psycopg.connect(database) as conn:
        owners = dict(
            conn.execute(
                "SELECT DISTINCT m.chat_id, l.owner FROM messages m"
                " JOIN leases l USING (conversation_key)"
            ).fetchall()
        )
    name = {i.webhook: i.name for i in instances}
    chats = {s.chat_id for s in sent}
    held = Counter(owners.get(c) for c in chats)
    away = sum(1 for s in sent if name.get(s.url) != owners.get(s.chat_id))
    return away, [held[i.name] for i in instances]


# --- one run ---------------------------------------------------------------------------------


async def run(
    pg: Any, setup: tuple[str, bool, int], rate: float, n: int, args: argparse.Namespace
) -> Result:
    """One setup from scratch: a fresh emulator (its records grow with every call, and some
    of its look-ups scan them), a fresh database, its instances; warm-up, then `n` messages
    at `rate`; the instances are stopped at the end."""
    from bridge.devtools.emulator import FeishuEmulator

    label, on_postgres, count = setup
    database = await asyncio.to_thread(pg.create_database) if on_postgres else None
    async with FeishuEmulator(encrypt_key=ENCRYPT_KEY, verification_token=TOKEN) as emu:
        with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp:
            folder = Path(tmp)
            await asyncio.to_thread((folder / "work").mkdir)
            instances = [
                await spawn(emu, folder, f"i{k}", database, args) for k in range(1, count + 1)
            ]
            try:
                for instance in instances:
                    await wait_healthy(instance.port, instance.process)
                emu.spread_webhooks([i.webhook for i in instances], seed=args.seed)
                users = [f"ou_bench_{k}" for k in range(args.chats)]
                chats = [(emu.open_chat("p2p", user_open_id=u), u) for u in users]
                seen = Seen(emu)
                warm = await load(emu, chats, args.chats, rate, "w")  # agents start, pools warm
                await seen.settle(warm, args.timeout)
                return await measure(pg, database, instances, seen, chats, rate, n, args)
            except BaseException:
                for instance in instances:
                    tail = instance.log.read_text(errors="replace")[-2000:]
                    print(f"--- {label}, {instance.name}'s log ---\n{tail}", file=sys.stderr)
                raise
            finally:
                await stop(instances)


async def measure(
    pg: Any,
    database: str | None,
    instances: list[Instance],
    seen: Seen,
    chats: list[tuple[str, str]],
    rate: float,
    n: int,
    args: argparse.Namespace,
) -> Result:
    emu = seen.emu
    pids = [i.process.pid for i in instances]
    postmaster = int((pg.data / "postmaster.pid").read_text().split()[0]) if database else 0
    before = [cpu_s(p) for p in pids]
    agents_before = sum(cpu_s(c) for p in pids for c in children(p))
    pg_before = tree_cpu_s(postmaster) if database else 0.0
    own_before = time.process_time()
    busy_before, began = machine_busy_s(), time.monotonic()
    sent = await load(emu, chats, n, rate, "")
    try:
        await seen.settle(sent, args.timeout)
    except TimeoutError:  # a lost message: the table says so
        print(f"not every message was answered within {args.timeout:.0f} s", file=sys.stderr)
    used = [cpu_s(p) - b for p, b in zip(pids, before, strict=True)]
    agents = sum(cpu_s(c) for p in pids for c in children(p)) - agents_before
    pg_used = tree_cpu_s(postmaster) - pg_before if database else None
    own = time.process_time() - own_before
    busy, wall = machine_busy_s() - busy_before, time.monotonic() - began
    await asyncio.sleep(args.quiet)  # a doubled answer or ack would come now
    seen.update()
    handed, held = None, None
    if database and len(instances) > 1:
        handed, held = await asyncio.to_thread(ownership, database, sent, instances)
    return Result(
        rate=rate,
        n=n,
        chats=len(chats),
        handed_over=handed,
        held=held,
        cpu=[u * 1000 / n for u in used],
        agents=agents * 1000 / n,
        postgres=None if pg_used is None else pg_used * 1000 / n,
        rss=[rss_mib(p) for p in pids],
        emulator=own * 1000 / n,
        busy=busy / wall,
        ours=(sum(used) + agents + (pg_used or 0.0) + own) / wall,
        **tally(seen, sent),
    )


async def ramp(pg: Any, setup: tuple[str, bool, int], args: argparse.Namespace) -> list[Result]:
    """`--max`: runs at rising rates (each from scratch) until one is not sustained."""
    results: list[Result] = []
    rate = args.start
    while not results or sustained(results[-1], args.p99):
        results.append(
            await run(pg, setup, rate, max(args.chats, round(rate * args.seconds)), args)
        )
        rate *= args.step
    return results


def sustained(r: Result, p99: float) -> bool:
    """Every message answered and acked once, in order, and both the acks and the answers
    within `p99` ms for 99 % of them (the answers keep pace, not only the acks)."""
    return r.clean and r.ack99 < p99 and r.answer99 < p99


# --- the table -------------------------------------------------------------------------------

COLUMNS = (  # title, width
    ("setup", 22),
    ("rate", 5),
    ("msg/s", 6),
    ("ack p50", 8),
    ("ack p99", 8),
    ("answer p99", 10),
    ("answered once", 13),
    ("acked once", 10),
    ("in order", 8),
    ("chats run", 9),
    ("handed over", 11),
    ("bridge CPU ms/msg", 19),
    ("agents", 6),
    ("postgres", 8),
    ("emulator", 8),
    ("RSS MiB", 9),
)


def line(cells: list[str]) -> str:
    first, *rest = zip(cells, COLUMNS, strict=True)
    return f"{first[0]:<{first[1][1]}}" + "".join(f"  {c:>{w}}" for c, (_, w) in rest)


def row(label: str, r: Result) -> str:
    cpu = f"{r.cpu[0]:.2f}"
    if len(r.cpu) > 1:
        cpu = " + ".join(f"{c:.2f}" for c in r.cpu) + f" = {sum(r.cpu):.2f}"
    return line(
        [
            label,
            f"{r.rate:.0f}",
            f"{r.msgs_per_s:.1f}",
            f"{r.ack50:.1f} ms",
            f"{r.ack99:.0f} ms",
            f"{r.answer99:.0f} ms",
            f"{r.answered_once}/{r.n}",
            f"{r.acked_once}/{r.n}",
            f"{r.in_order}/{r.chats}",
            "-" if r.held is None else " + ".join(str(h) for h in r.held),
            "-" if r.handed_over is None else f"{r.handed_over}/{r.n}",
            cpu,
            f"{r.agents:.2f}",
            "-" if r.postgres is None else f"{r.postgres:.2f}",
            f"{r.emulator:.2f}",
            " + ".join(f"{m:.0f}" for m in r.rss),
        ]
    )


def notes(label: str, r: Result) -> list[str]:
    out = [
        f"{label} at {r.rate:.0f}/s: the machine busy {r.busy:.2f} cores during the load,"
        f" this bench's processes {r.ours:.2f}, the rest {max(0.0, r.busy - r.ours):.2f}"
    ]
    if r.in_order < r.chats or r.order_broken:
        out.append(
            f"{label}: {len(r.order_broken)} out of order among {r.ordered_pairs} successive"
            " messages of a chat pushed after the one before was taken (the others were pushed"
            " while the one before was still being taken: no order is promised)"
        )
    if r.refused:
        out.append(f"{label}: {r.refused} first pushes not answered 200 (redelivered)")
    for broken in r.order_broken[:5]:
        out.append(f"{label}: out of order: {broken}")
    if len(r.order_broken) > 5:
        out.append(f"{label}: … {len(r.order_broken) - 5} more out of order")
    return out


async def main(args: argparse.Namespace) -> None:
    from tests.pg import PgServer, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed: bash scripts/install-postgres.sh")
    pg = PgServer(bin_dir)
    await asyncio.to_thread(pg.start)
    load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    what = (
        f"from {args.start:.0f}/s, ×{args.step} a step of {args.seconds:.0f} s,"
        if args.max
        else f"{args.n} messages at {args.rate:.0f}/s"
    )
    print(
        f"{what} over {args.chats} chats; PostgreSQL {bin_dir.parent.name} (fsync off);"
        f" {os.cpu_count()} cores, load average {load_avg} before",
        flush=True,
    )
    out: list[tuple[str, list[Result]]] = []
    try:
        for setup in SETUPS:
            if args.max:
                out.append((setup[0], await ramp(pg, setup, args)))
            else:
                out.append((setup[0], [await run(pg, setup, args.rate, args.n, args)]))
    finally:
        await asyncio.to_thread(pg.stop)
    print(line([title for title, _ in COLUMNS]))
    for label, results in out:
        for r in results:
            print(row(label, r))
    for label, results in out:
        for r in results:
            for note in notes(label, r):
                print(note)
    if args.max:
        for label, results in out:
            good = [r for r in results if sustained(r, args.p99)]
            best = f"{good[-1].rate:.0f}/s" if good else f"below {args.start:.0f}/s"
            limit = f"ack and answer p99 < {args.p99:.0f} ms"
            print(f"{label}: highest rate sustained with {limit}: {best}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=600, help="messages per setup")
    parser.add_argument("--rate", type=float, default=100.0, help="messages per second")
    parser.add_argument("--chats", type=int, default=30)
    parser.add_argument("--lease", type=float, default=15.0, help="BRIDGE_LEASE_SECONDS")
    parser.add_argument("--seed", type=int, default=12, help="of the spread over webhooks")
    parser.add_argument("--timeout", type=float, default=120.0, help="s to wait for answers")
    parser.add_argument("--quiet", type=float, default=1.0, help="s to wait for late doubles")
    parser.add_argument("--max", action="store_true", help="ramp the rate: the highest sustained")
    parser.add_argument("--from", dest="start", type=float, default=50.0, help="--max: first rate")
    parser.add_argument("--p99", type=float, default=1000.0, help="--max: p99 limit, ms")
    parser.add_argument("--step", type=float, default=1.25, help="--max: rate factor per step")
    parser.add_argument("--seconds", type=float, default=5.0, help="--max: load per step, s")
    return parser.parse_args()


if __name__ == "__main__":
    from bridge.loops import loop_factory

    with asyncio.Runner(loop_factory=loop_factory("uvloop")) as runner:
        runner.run(main(parse()))
