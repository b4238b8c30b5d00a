"""Generated hostile bodies against a running bridge (emulator, real aiohttp server, SQLite,
the scripted agent), over loopback:

    python bench/fuzz_webhook.py [--n 10000]     (about a minute per 10,000)

Two passes of N bodies each, drawn by hypothesis (tests/unit/test_hostile_input.py
`raw_bodies`: bad JSON, random JSON, events with one field of any type, nesting thousands
deep, lone surrogates, huge fields): unsigned with a wrong verification token (nothing may
start a turn), and signed with the right one (the parser sees every body). Prints the status
counts, the 5xx count (must be 0), whether the bridge is still healthy, and the bot messages
sent (the turns answered).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.stack import running_stack  # noqa: E402
from tests.unit.test_hostile_input import raw_bodies  # noqa: E402
from tests.unit.test_webhook import signed_headers  # noqa: E402


def serve(ready: threading.Event, state: dict[str, Any]) -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with running_stack(Path(tmp)) as stack:
                state["stack"] = stack
                state["loop"] = asyncio.get_running_loop()
                state["done"] = done = asyncio.Event()
                ready.set()
                await done.wait()

    asyncio.run(main())


def run_pass(url: str, token: str, key: str | None, n: int) -> collections.Counter[int]:
    statuses: collections.Counter[int] = collections.Counter()
    with httpx.Client(timeout=10) as client:

        @settings(
            max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(body=raw_bodies(token))
        def send(body: bytes) -> None:
            headers = signed_headers(body, key) if key else {"Content-Type": "application/json"}
            response = client.post(url, content=body, headers=headers)
            statuses[response.status_code] += 1

        send()
    return statuses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    n = parser.parse_args().n
    logging.disable(logging.WARNING)  # tens of thousands of refusal lines
    ready, state = threading.Event(), {}
    thread = threading.Thread(target=serve, args=(ready, state), daemon=True)
    thread.start()
    ready.wait(60)
    stack = state["stack"]
    url = f"{stack.feishu_url}/feishu/events"
    emu = stack.emu
    passes = [
        ("unsigned, wrong token", "not-the-token", None),
        ("signed, right token", emu.verification_token, emu.encrypt_key or None),
    ]
    for name, token, key in passes:
        statuses = run_pass(url, token, key, n)
        fives = sum(c for s, c in statuses.items() if s >= 500)
        counts = dict(sorted(statuses.items()))
        print(f"{name}: {sum(statuses.values())} bodies, statuses {counts}, 5xx {fives}")
    health = httpx.get(f"{stack.feishu_url}/healthz").status_code
    replies = len(stack.emu.bot_messages())
    print(f"healthz after: {health}; bot messages sent: {replies}")
    state["loop"].call_soon_threadsafe(state["done"].set)
    thread.join(30)


if __name__ == "__main__":
    main()
