"""The bridge against a bare relay, side by side in one run, both as their own processes,
against the local Feishu emulator (webhook mode, encrypted and signed events).

    python bench/relay_bench.py [--n 300] [--rate 50] [--chats 20]

The bare relay does what every Feishu bot must and nothing else: verify the signature,
decrypt, check the token, parse, answer 200, and add one reaction over a kept-alive session.
The bridge does the simplest whole turn: the ack reaction, the agent's one-line answer (the
scripted agent, its CPU counted apart), the reply.

Messages are pushed at `--rate` per second, round-robin over `--chats` private chats. For
each process it prints its own CPU (user + system, from /proc) per message, the ack latency
(the emulator's push → reaction POST) p50 / p99, and the bridge's figures ÷ the relay's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spawned import BRIDGE, bridge_env, cpu_s, free_port, wait_healthy  # noqa: E402

ENCRYPT_KEY = "bench-encrypt-key"
TOKEN = "bench-verification-token"


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(c) for c in text]
    return found


# --- the bare relay (runs as `relay_bench.py --serve PORT DOMAIN APP_ID SECRET`) -------------


async def serve_relay(port: int, domain: str, app_id: str, secret: str) -> None:
    import httpx
    from aiohttp import web

    from bridge.feishu import crypto

    http = httpx.AsyncClient(base_url=domain, timeout=10)
    token = (
        await http.post(
            "/open-apis/auth/v3/tenant_access_token/internal",
            json={"app_id": app_id, "app_secret": secret},
        )
    ).json()["tenant_access_token"]
    headers = {"Authorization": f"Bearer {token}"}
    tasks: set[asyncio.Task[None]] = set()

    async def react(message_id: str) -> None:
        await http.post(
            f"/open-apis/im/v1/messages/{message_id}/reactions",
            json={"reaction_type": {"emoji_type": "OnIt"}},
            headers=headers,
        )

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        crypto.verify_signature(request.headers, body, ENCRYPT_KEY)
        outer = json.loads(body)
        event = json.loads(crypto.decrypt_payload(outer["encrypt"], ENCRYPT_KEY))
        crypto.verify_token(event["header"]["token"], TOKEN)
        task = asyncio.create_task(react(event["event"]["message"]["message_id"]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/feishu/events", handle)
    app.router.add_get("/healthz", lambda request: web.json_response({"ok": True}))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


# --- the load ------------------------------------------------------------------------------


# `--progress`: a turn whose agent reports ten tool calls before its one-line answer.
PROGRESS_TURN = "\n".join(f"tool step {i}" for i in range(10)) + "\nsay done"


async def load(
    emu: object, chats: list[str], n: int, rate: float, users: list[str], text: str = ""
) -> list[tuple[str, float]]:
    """Push `n` messages at `rate`; (message id, when Feishu started pushing it) each."""
    start = time.perf_counter()
    pushes = []
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        chat, user = chats[i % len(chats)], users[i % len(users)]
        send = emu.send_user_message(text or f"hello {i}", chat_id=chat, sender_open_id=user)  # type: ignore[attr-defined]
        pushes.append(asyncio.create_task(send))
    out = []
    for push in pushes:
        delivered = await push
        out.append((delivered.message_id, delivered.first_attempt.at))
    return out


def ack_ms(emu: object, sent: list[tuple[str, float]]) -> list[float]:
    reacted: dict[str, float] = {}
    for call in emu.calls("/open-apis/im/v1/messages/", method="POST"):  # type: ignore[attr-defined]
        if call.path.endswith("/reactions"):
            reacted.setdefault(call.path.split("/")[-2], call.at)
    return [(reacted[m] - at) * 1000 for m, at in sent if m in reacted]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def measure(
    name: str,
    process: subprocess.Popen[bytes],
    emu: object,
    args: argparse.Namespace,
    wait_replies: bool,
) -> dict[str, float]:
    users = [f"ou_bench_{i}" for i in range(args.chats)]
    chats = [emu.open_chat("p2p", user_open_id=u) for u in users]  # type: ignore[attr-defined]
    warm = await load(emu, chats, args.chats, args.rate, users)  # agents start, pools warm
    await _settle(emu, warm, wait_replies)
    spy = None
    if name == "bridge" and args.profile:
        spy = subprocess.Popen(  # noqa: ASYNC220 - started once, not on a hot path
            [
                "py-spy",
                "record",
                "--pid",
                str(process.pid),
                "-f",
                "raw",
                "-o",
                args.profile,
                "-r",
                "200",
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await asyncio.sleep(1.0)
    before = cpu_s(process.pid)
    agents_before = sum(cpu_s(p) for p in children(process.pid))
    text = PROGRESS_TURN if args.progress and wait_replies else ""
    sent = await load(emu, chats, args.n, args.rate, users, text)
    await _settle(emu, sent, wait_replies)
    used = cpu_s(process.pid) - before
    agents = sum(cpu_s(p) for p in children(process.pid)) - agents_before
    if spy is not None:
        spy.send_signal(2)  # SIGINT: py-spy writes its file
        spy.wait(timeout=30)
    acks = ack_ms(emu, sent)
    result = {
        "cpu": used * 1000 / args.n,
        "agents": agents * 1000 / args.n,
        "ack50": pct(acks, 0.5),
        "ack99": pct(acks, 0.99),
        "acked": len(acks),
    }
    print(
        f"{name:7} CPU {result['cpu']:.2f} ms/message (agents apart: {result['agents']:.2f}),"
        f" ack p50 {result['ack50']:.1f} ms, p99 {result['ack99']:.1f} ms,"
        f" {result['acked']}/{args.n} acked"
    )
    return result


async def _settle(emu: object, sent: list[tuple[str, float]], wait_replies: bool) -> None:
    def done() -> bool:
        calls = emu.calls("/open-apis/im/v1/messages/", method="POST")  # type: ignore[attr-defined]
        kind = "/reply" if wait_replies else "/reactions"
        seen = {c.path.split("/")[-2] for c in calls if c.path.endswith(kind)}
        return all(m in seen for m, _ in sent)

    await emu.wait_for(done, timeout=120)  # type: ignore[attr-defined]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument(
        "--profile", metavar="FILE", help="py-spy record the bridge during its load (raw)"
    )
    parser.add_argument(
        "--progress", action="store_true", help="the bridge's turn: ten tool calls, then the answer"
    )
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        port, domain, app_id, secret = args.serve
        await serve_relay(int(port), domain, app_id, secret)
        return

    from bridge.devtools.emulator import FeishuEmulator

    print(f"{args.n} messages at {args.rate:.0f}/s over {args.chats} chats, each process alone")
    results = {}
    async with FeishuEmulator(encrypt_key=ENCRYPT_KEY, verification_token=TOKEN) as emu:
        with tempfile.TemporaryDirectory() as folder:
            port = free_port()
            env = bridge_env(
                emu,
                Path(folder),
                port,
                FEISHU_ENCRYPT_KEY=ENCRYPT_KEY,
                BRIDGE_ALLOW_ALL="true",
                BRIDGE_MAX_AGENTS="2",
                BRIDGE_LOG_LEVEL="WARNING",
            )
            await asyncio.to_thread(Path(folder, "work").mkdir)
            bridge = subprocess.Popen(  # noqa: ASYNC220 - started once, not on a hot path
                [str(BRIDGE), "run"], env=env, cwd=folder
            )
            try:
                await wait_healthy(port, bridge)
                emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
                results["bridge"] = await measure("bridge", bridge, emu, args, wait_replies=True)
            finally:
                bridge.terminate()
                bridge.wait(timeout=20)
        port = free_port()
        relay = subprocess.Popen(  # noqa: ASYNC220 - started once, not on a hot path
            [sys.executable, __file__, "--serve", str(port), emu.url, emu.app_id, emu.app_secret]
        )
        try:
            await wait_healthy(port, relay)
            emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
            results["relay"] = await measure("relay", relay, emu, args, wait_replies=False)
        finally:
            relay.terminate()
            relay.wait(timeout=20)
    b, r = results["bridge"], results["relay"]
    print(
        f"bridge / relay: CPU {b['cpu'] / r['cpu']:.1f}×, ack p50 {b['ack50'] / r['ack50']:.1f}×,"
        f" p99 {b['ack99'] / r['ack99']:.1f}×"
    )


if __name__ == "__main__":
    asyncio.run(main())
