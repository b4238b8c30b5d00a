"""Calls per second of `FeishuClient.send_text` vs lark-oapi's own async path.

Both talk to the local Feishu emulator, in the same run, with the same N, sequentially
and with bounded concurrency. The emulator runs in a child process: lark-oapi fetches its
tenant token with blocking `requests`, which would freeze an emulator sharing its loop, and
a server thread would share the GIL with the clients and blur the figures.

    python bench/feishu_client_bench.py [--n 300] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lark_oapi as lark  # noqa: E402
from lark_oapi.api.im.v1 import (  # noqa: E402
    CreateMessageRequest,
    CreateMessageRequestBody,
)

from bridge.feishu.client import FeishuClient  # noqa: E402

APP_ID = "cli_bench0000000001"
APP_SECRET = "bench-app-secret"

Send = Callable[[str], Awaitable[None]]


EMULATOR_SCRIPT = """
import asyncio, json, sys
from bridge.devtools.emulator.emulator import FeishuEmulator

async def main():
    async with FeishuEmulator(app_id=sys.argv[1], app_secret=sys.argv[2]) as emu:
        print(json.dumps({"url": emu.url, "chat_id": emu.group_chat_id}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


class EmulatorProcess:
    """The emulator in a child process, as a remote Feishu would be: the clients under
    test do not share an event loop or a GIL with the server. Stops when stdin closes."""

    def __init__(self) -> None:
        self.url = ""
        self.chat_id = ""
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> EmulatorProcess:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", EMULATOR_SCRIPT, APP_ID, APP_SECRET],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self.__exit__(None, None, None)
            raise RuntimeError("the emulator did not start")
        info = json.loads(line)
        self.url, self.chat_id = info["url"], info["chat_id"]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is None:
            return
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


async def measure(send: Send, label: str, n: int, concurrency: int) -> tuple[float, float]:
    """(calls per second, client CPU ms per call) of `n` sends, `concurrency` at a time.
    CPU time counts this process only, so it is the client's cost, not the emulator's,
    and is steadier than wall time on a busy machine."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await send(f"bench-{label}-c{concurrency}-{i}")

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return n / wall, cpu * 1000 / n


async def run(n: int, concurrency: int) -> None:
    with EmulatorProcess() as emu:
        ours = FeishuClient(APP_ID, APP_SECRET, emu.url)
        theirs = (
            lark.Client.builder()
            .app_id(APP_ID)
            .app_secret(APP_SECRET)
            .domain(emu.url)
            .log_level(lark.LogLevel.ERROR)
            .build()
        )

        async def send_ours(uuid: str) -> None:
            await ours.send_text(emu.chat_id, "bench message", uuid=uuid)

        async def send_lark(uuid: str) -> None:
            body = (
                CreateMessageRequestBody.builder()
                .receive_id(emu.chat_id)
                .msg_type("text")
                .content(json.dumps({"text": "bench message"}))
                .uuid(uuid)
                .build()
            )
            request = (
                CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
            )
            response = await theirs.im.v1.message.acreate(request)
            if not response.success():
                raise RuntimeError(f"lark-oapi send failed: {response.code} {response.msg}")

        try:
            # Warm-up (token fetch, first connection) is not measured.
            await send_ours("bench-warm-ours")
            await send_lark("bench-warm-lark")
            print(f"N={n} per mode and client, emulator at {emu.url}")
            header = f"{'mode':<16}{'FeishuClient':>22}{'lark-oapi':>22}{'ratio':>8}"
            print(header)
            for width in (1, concurrency):
                a, a_cpu = await measure(send_ours, "ours", n, width)
                b, b_cpu = await measure(send_lark, "lark", n, width)
                mode = "sequential" if width == 1 else f"concurrency {width}"
                print(
                    f"{mode:<16}{a:>8.0f}/s ({a_cpu:4.1f} ms cpu)"
                    f"{b:>8.0f}/s ({b_cpu:4.1f} ms cpu){a / b:>7.1f}x"
                )
        finally:
            await ours.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=300, help="calls per mode and client")
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(args.n, args.concurrency))


if __name__ == "__main__":
    main()
