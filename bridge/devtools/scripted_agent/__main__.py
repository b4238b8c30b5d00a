"""`python -m bridge.devtools.scripted_agent`: serve one scripted agent on stdio."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path

from acp.agent.router import build_agent_router
from acp.connection import Connection
from acp.stdio import stdio_streams

from bridge.devtools.scripted_agent.agent import ScriptedAgent
from bridge.devtools.scripted_agent.language import QUIRKS
from bridge.devtools.scripted_agent.sessions import SessionStore


async def serve(agent: ScriptedAgent) -> None:
    reader, writer = await stdio_streams(limit=50 * 1024 * 1024)
    router = build_agent_router(agent, use_unstable_protocol=True)  # type: ignore[arg-type]
    conn = Connection(router, writer, reader, listening=False)
    agent.conn = conn
    try:
        await conn.main_loop()
    finally:
        await conn.close()


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.devtools.scripted_agent",
        description="A scripted ACP agent on stdio (demo and tests).",
    )
    parser.add_argument(
        "--quirk",
        action="append",
        default=[],
        choices=sorted(QUIRKS),
        help="play a misbehaviour of a real agent (repeatable): "
        + "; ".join(f"{name}: {what}" for name, what in QUIRKS.items()),
    )
    parser.add_argument(
        "--no-load", action="store_true", help="do not offer session/load (nor session/resume)"
    )
    parser.add_argument("--no-resume", action="store_true", help="do not offer session/resume")
    parser.add_argument("--no-list", action="store_true", help="do not offer session/list")
    parser.add_argument("--name", default="scripted-agent", help="its name (agentInfo, whoami)")
    parser.add_argument("--version", default="1.0", help="its version (agentInfo)")
    parser.add_argument(
        "--no-images", action="store_true", help="do not accept images as prompt content"
    )
    parser.add_argument("--audio", action="store_true", help="accept audio as prompt content")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    arguments = _arguments(argv)
    exit_code = os.environ.get("SCRIPTED_AGENT_EXIT_ON_START")
    if exit_code:
        sys.stderr.write("scripted-agent: configured to fail at start\n")
        sys.stderr.flush()
        sys.exit(int(exit_code))
    scenario_path = os.environ.get("SCRIPTED_AGENT_SCENARIO")
    load = not arguments.no_load and os.environ.get(
        "SCRIPTED_AGENT_LOAD_SESSION", "1"
    ).lower() not in {"0", "false", "no", "off"}
    agent = ScriptedAgent(
        SessionStore(os.environ.get("SCRIPTED_AGENT_STATE_DIR")),
        load_session=load,
        scenario=Path(scenario_path).read_text() if scenario_path else None,
        quirks=frozenset(arguments.quirk),
        resume_session=load and not arguments.no_resume,  # no load: no way back at all
        list_sessions=not arguments.no_list,
        name=arguments.name,
        version=arguments.version,
        images=not arguments.no_images,
        audio=arguments.audio,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(agent))


if __name__ == "__main__":
    main()
