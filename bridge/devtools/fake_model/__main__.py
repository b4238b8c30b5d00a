"""Runs an agent with the scripted model beside it:

    unshare -rn python -m bridge.devtools.fake_model [--port N] [--env K=V …] -- agent …

Brings loopback up (a new network namespace starts with it down), serves the model on
127.0.0.1, then runs the agent with stdin/stdout passed through (the ACP channel) and `{url}`
in its arguments and `--env` values replaced by the model's address. Signals are passed on;
the wrapper ends with the agent's exit status. Nothing is printed on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

from aiohttp import web

from bridge.devtools.fake_model.server import build_app

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """`ip link set lo up`, without needing iproute2; a no-op where it is up already."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[:18])[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def serve(port: int, record: Path | None) -> int:
    """Starts the model server on a thread of its own; returns the port it listens on."""
    ready: list[int] = []
    started = threading.Event()

    async def main() -> None:
        runner = web.AppRunner(build_app(record), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        ready.append(int(runner.addresses[0][1]))  # the bound port when asked for port 0
        started.set()
        await asyncio.Event().wait()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    if not started.wait(30):
        raise SystemExit("fake-model: the model server did not start")
    return ready[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bridge.devtools.fake_model")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--env", action="append", default=[], metavar="K=V")
    parser.add_argument("--record", type=Path, default=None)
    parser.add_argument("agent", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    agent = args.agent[1:] if args.agent[:1] == ["--"] else args.agent
    if not agent:
        parser.error("no agent command after --")
    with contextlib.suppress(OSError):  # not our namespace to change: loopback is up already
        loopback_up()
    url = f"http://127.0.0.1:{serve(args.port, args.record)}"
    env = dict(os.environ, FAKE_MODEL_URL=url)
    for pair in args.env:
        key, _, value = pair.partition("=")
        env[key] = value.replace("{url}", url)
    child = subprocess.Popen([part.replace("{url}", url) for part in agent], env=env)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
