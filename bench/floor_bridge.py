"""The floor: the least a bridge built of this project's required parts can do per message,
and nothing else. `relay_bench.py` runs it beside the bridge and the bare relays (row
"floor") to show what the irreducible work costs before any of the bridge's own features.

    python bench/floor_bridge.py PORT DOMAIN APP_ID SECRET ENCRYPT_KEY TOKEN AGENT_COMMAND LOOP

Per message: verify the signature, decrypt, check the token, parse; journal the message in
SQLite through aiosqlite (committed before the 200, the durability the bridge keeps); answer
200; add the ack reaction with httpx (over the bridge's aiohttp transport, the cheapest way
this project's calls go); send the text to the chat's ACP session (agent-client-protocol's
client connection, one agent process, a session per chat opened at its first message, one
turn at a time per chat); reply with the agent's text (httpx); mark the message done
(aiosqlite). No presence, no status card, no queue, no timeline, no recovery, no metrics:
what a bridge cannot do without, with the parts the standards name.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _Collector:
    """The ACP client side: gathers each session's answer text; grants nothing."""

    def __init__(self) -> None:
        self.text: dict[str, list[str]] = {}

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", "") == "agent_message_chunk":
            self.text.setdefault(session_id, []).append(getattr(update.content, "text", ""))

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def on_connect(self, conn: Any) -> None:
        pass


async def serve_floor(argv: list[str]) -> None:
    import aiosqlite
    import httpx
    from acp import spawn_agent_process, text_block
    from aiohttp import web

    from bench.bare_server import auth_headers, opened_event, serve_events
    from bridge.feishu.http import AiohttpTransport

    port, domain, app_id, secret, encrypt_key, token, agent = argv
    folder = Path(tempfile.mkdtemp(prefix="floor-"))
    db = await aiosqlite.connect(folder / "floor.db", isolation_level=None)
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = NORMAL")
    await db.execute(
        "CREATE TABLE messages (message_id TEXT PRIMARY KEY, chat_id TEXT, text TEXT, state TEXT)"
    )
    http = httpx.AsyncClient(base_url=domain, timeout=10, transport=AiohttpTransport(16))
    headers = await auth_headers(domain, app_id, secret)
    collector = _Collector()
    command = shlex.split(agent)
    async with spawn_agent_process(collector, command[0], *command[1:]) as (conn, _process):
        await conn.initialize(protocol_version=1)
        sessions: dict[str, str] = {}
        locks: dict[str, asyncio.Lock] = {}
        tasks: set[asyncio.Task[None]] = set()

        async def turn(chat_id: str, message_id: str, text: str) -> None:
            await http.post(
                f"/open-apis/im/v1/messages/{message_id}/reactions",
                json={"reaction_type": {"emoji_type": "OnIt"}},
                headers=headers,
            )
            async with locks.setdefault(chat_id, asyncio.Lock()):
                if chat_id not in sessions:
                    sessions[chat_id] = (await conn.new_session(cwd=str(folder))).session_id
                session = sessions[chat_id]
                collector.text[session] = []
                await conn.prompt(session_id=session, prompt=[text_block(text)])
                answer = "".join(collector.text.pop(session, []))
            await http.post(
                f"/open-apis/im/v1/messages/{message_id}/reply",
                json={"msg_type": "text", "content": json.dumps({"text": answer})},
                headers=headers,
            )
            await db.execute(
                "UPDATE messages SET state = 'done' WHERE message_id = ?", (message_id,)
            )

        async def handle(request: web.Request) -> web.Response:
            event = opened_event(request.headers, await request.read(), encrypt_key, token)
            message = event["event"]["message"]
            text = json.loads(message["content"]).get("text", "")
            cursor = await db.execute(
                "INSERT INTO messages VALUES (?, ?, ?, 'queued') ON CONFLICT DO NOTHING",
                (message["message_id"], message["chat_id"], text),
            )
            if cursor.rowcount == 1:
                task = asyncio.create_task(turn(message["chat_id"], message["message_id"], text))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            return web.json_response({})

        await serve_events(int(port), handle)


if __name__ == "__main__":
    from bridge.loops import loop_factory

    *arguments, loop = sys.argv[1:]  # LOOP: uvloop or asyncio, as the bench's --loop
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        runner.run(serve_floor(arguments))
