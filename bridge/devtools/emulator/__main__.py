"""`python -m bridge.devtools.emulator`: run the emulator by hand, with its chat page.

    python -m bridge.devtools.emulator --port 8900 --webhook-url http://127.0.0.1:8080/feishu/events

then point the bridge's Feishu domain at the printed URL and open it in a browser. Several
apps (bots), each `--app` key=value pairs (`apps.parse_app_spec`), the first one the
default:

    python -m bridge.devtools.emulator \
        --app 'id=cli_claude,secret=s1,name=Claude,webhook=http://127.0.0.1:8080/hook/a' \
        --app 'id=cli_codex,secret=s2,name=Codex,encrypt_key=k2,token=t2'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from bridge.devtools.emulator.apps import AppSpec, parse_app_spec
from bridge.devtools.emulator.emulator import FeishuEmulator


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bridge.devtools.emulator")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    parser.add_argument("--webhook-url", default=None, help="the bridge's webhook URL")
    parser.add_argument("--app-id", default="cli_emulator00000001")
    parser.add_argument("--app-secret", default="emulator-app-secret")
    parser.add_argument("--encrypt-key", default="")
    parser.add_argument("--verification-token", default="emulator-verification-token")
    parser.add_argument("--bot-name", default="Presence Bot")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument(
        "--scenario", action="append", default=[], help="a chip on the chat page (repeatable)"
    )
    parser.add_argument(
        "--app",
        action="append",
        default=[],
        type=_app,
        help="one of several apps: id=…,secret=…,name=…,webhook=…,encrypt_key=…,token=…,"
        "group=all|mentioned (repeatable; instead of --app-id and the other app flags)",
    )
    return parser


def _app(text: str) -> AppSpec:
    try:
        return parse_app_spec(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def _run(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # not on Windows
            loop.add_signal_handler(sig, stop.set)
    single = {
        "app_id": args.app_id,
        "app_secret": args.app_secret,
        "encrypt_key": args.encrypt_key,
        "verification_token": args.verification_token,
        "webhook_url": args.webhook_url,
        "bot_name": args.bot_name,
    }
    try:  # with --app, the single app's flags must be left alone (the emulator says which)
        emulator = FeishuEmulator(
            time_scale=args.time_scale,
            scenarios=args.scenario,
            port=args.port,
            apps=args.app,
            **single,
        )
    except ValueError as exc:
        raise SystemExit(f"python -m bridge.devtools.emulator: {exc}") from None
    async with emulator as emu:
        print(f"Feishu emulator on {emu.url}  (chat page: {emu.url}/)", flush=True)
        for app in emu.apps.values():
            hook = app.webhook_url or "-"
            print(f"  app_id={app.app_id} bot={app.bot_name!r} webhook_url={hook}", flush=True)
        await stop.wait()


def main() -> None:
    asyncio.run(_run(_parser().parse_args()))


if __name__ == "__main__":
    main()
