"""Calls per second of `FeishuClient.send_text` vs lark-oapi's own async path.

Both talk to the local Feishu emulator, in the same run, with the same N, sequentially
and with bounded concurrency. The emulator runs in a child process: lark-oapi fetches its
tenant token with blocking `requests`, which would freeze an emulator sharing its loop, and
a server thread would share the GIL with the clients and blur the figures.

    python bench/feishu_client_bench.py [--n 300] [--concurrency 20]

Beside calls/s it prints, per call, the CPU of this process (the client under test, alone
in it while it is measured) and of the emulator's. The emulator shares the machine's cores,
so calls/s also moves with the server and with anything else running; the client's own CPU
per call does not, and is what issue 18's target is judged on: for FeishuClient, concurrent
calls cost no more CPU each than sequential ones (so, with a core to spare, they run at
least as fast).
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
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lark_oapi as lark  # noqa: E402
from lark_oapi.api.im.v1 import (  # noqa: E402
    CreateMessageRequest,
    CreateMessageRequestBody,
)

from bridge.clock import LoopClock  # noqa: E402
from bridge.feishu.client import FeishuClient  # noqa: E402

APP_ID = "cli_bench0000000001"
APP_SECRET = "bench-app-secret"

Send = Callable[[str], Awaitable[None]]


EMULATOR_SCRIPT = """
import asyncio, json, sys, time
from bridge.devtools.emulator.emulator import FeishuEmulator

def answer_cpu_questions():
    for _ in sys.stdin:  # each line asks for this process's CPU seconds; EOF stops it
        print(time.process_time(), flush=True)

async def main():
    async with FeishuEmulator(app_id=sys.argv[1], app_secret=sys.argv[2]) as emu:
        print(json.dumps({"url": emu.url, "chat_id": emu.group_chat_id}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, answer_cpu_questions)

asyncio.run(main())
"""


class EmulatorProcess:
    """The emulator in a child process, as a remote Feishu would be: the clients under
    test do not share an event loop or a GIL with the server. `cpu_seconds()` asks it for
    its own CPU time over stdin; it stops when stdin closes."""

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

    def cpu_seconds(self) -> float:
        assert self._proc is not None
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write("\n")
        self._proc.stdin.flush()
        return float(self._proc.stdout.readline())

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


@dataclass(frozen=True)
class Figures:
    calls_per_s: float
    client_ms: float  # CPU of this process per call: the client under test
    emulator_ms: float  # CPU of the emulator's process per call

    def __str__(self) -> str:
        return f"{self.calls_per_s:>8.0f}/s {self.client_ms:5.2f} {self.emulator_ms:5.2f}"


async def measure(
    send: Send, label: str, n: int, concurrency: int, emulator: EmulatorProcess
) -> Figures:
    """`n` sends, `concurrency` at a time. CPU time is read per process, so the client's
    cost is not blurred by the emulator's, and it is steadier than wall time on a busy
    machine."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await send(f"bench-{label}-c{concurrency}-{i}")

    server_cpu = emulator.cpu_seconds()
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    server_cpu = emulator.cpu_seconds() - server_cpu
    return Figures(n / wall, cpu * 1000 / n, server_cpu * 1000 / n)


async def run(n: int, concurrency: int) -> None:
    with EmulatorProcess() as emu:
        ours = FeishuClient(APP_ID, APP_SECRET, emu.url, clock=LoopClock().now)
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
            print(f"{'':16}{'FeishuClient':^26}{'lark-oapi':^26}")
            columns = f"{'calls/s':>10} {'client':>5} {'emul.':>5}"
            print(f"{'mode':<16}{columns}{columns}{'ratio':>8}")
            ours_by_mode: list[Figures] = []
            for width in (1, concurrency):
                a = await measure(send_ours, "ours", n, width, emu)
                b = await measure(send_lark, "lark", n, width, emu)
                ours_by_mode.append(a)
                mode = "sequential" if width == 1 else f"concurrency {width}"
                print(f"{mode:<16}{a}{b}{a.calls_per_s / b.calls_per_s:>7.1f}x")
            print("client, emul. = CPU ms per call of this process and of the emulator's")
            sequential, concurrent = ours_by_mode
            print(
                f"FeishuClient, concurrency {concurrency} / sequential: client CPU per call"
                f" {concurrent.client_ms / sequential.client_ms:.2f}x (the target: at most"
                f" 1), calls/s {concurrent.calls_per_s / sequential.calls_per_s:.2f}x"
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
