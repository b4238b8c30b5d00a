"""A scripted ACP agent: a real subprocess speaking real ACP over stdio, for the demo and tests.

Run it as ``python -m bridge.devtools.scripted_agent``. It is built on the same SDK as the
bridge (the low-level `Connection` and the agent router), so what a test sees is what a real
agent would send on the wire.

Command language
----------------
The prompt is a script when its first word is a command below; each line is one command
(delays in milliseconds). Any other prompt gets ``echo: <text>``; an unknown line inside a
script is echoed too. Example::

    think planning
    tool Read README.md
    stream 5 20
    permission Delete build/
    stop max_tokens

See `SCENARIOS` for every command. A permission answered allow → reply "done", reject →
"not done", cancelled → the turn ends with stop reason ``cancelled``. A question is an
``elicitation/create`` form when the client declared elicitation, else qwen's form (a
``session/request_permission`` with ``_meta.qwenInteractionKind = "user_question"``,
answered by a top-level ``answers`` map); an answer replies "answer: <value>", a declined
question replies "no answer", a cancelled one ends the turn ``cancelled``.

Environment
-----------
``SCRIPTED_AGENT_STATE_DIR``   folder for session histories (one JSON file per session), so
                               a restarted agent can ``session/load`` a session of the
                               previous process; without it sessions live in memory.
``SCRIPTED_AGENT_LOAD_SESSION`` ``0`` turns the ``loadSession`` capability off (on by default).
``SCRIPTED_AGENT_SCENARIO``    path of a script file run for every prompt that is not a script.
``SCRIPTED_AGENT_EXIT_ON_START`` exit with this code at once (a broken agent install).

Quirks
------
``--quirk NAME`` (repeatable) plays a misbehaviour seen in real agents (docs/agents.md,
"Known agent quirks"); ``--no-load`` turns ``loadSession`` off. See `QUIRKS`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp.agent.router import build_agent_router
from acp.connection import Connection
from acp.exceptions import RequestError
from acp.meta import CLIENT_METHODS, PROTOCOL_VERSION
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    TextContentBlock,
)
from acp.stdio import stdio_streams

SCENARIOS: dict[str, str] = {
    "say": "say TEXT — reply with TEXT",
    "think": "think TEXT — a thought chunk",
    "stream": "stream N [DELAY_MS] — N message chunks `c0 c1 …`, DELAY_MS apart",
    "tool": "tool TITLE — a tool call: pending → in_progress → completed",
    "plan": "plan A | B | C — a plan; the first entry in progress",
    "permission": "permission TITLE — ask approval; allow → 'done', reject → 'not done'",
    "ask": "ask QUESTION? a|b — a question (elicitation, or qwen's form)",
    "hang": "hang — wait until cancelled",
    "sleep": "sleep MS — silence for MS, then go on (stall tests)",
    "crash": "crash [CODE] — exit the process at once (os._exit)",
    "crash-after": "crash-after MS [CODE] — exit MS from now, whatever runs then",
    "error": "error [MESSAGE] — answer the prompt with a JSON-RPC error",
    "stop": "stop REASON — end now with end_turn|max_tokens|max_turn_requests|refusal|cancelled",
    "silent": "silent — do nothing (a turn with no visible text)",
    "stderr": "stderr KB — write KB kilobytes to stderr",
    "huge": "huge KB — one message chunk of KB kilobytes (a single stdout line that size)",
    "unknown": "unknown [KIND] — send a session/update of an unknown kind",
    "idle": "idle [MS] — MS after the turn: mode, commands, title and a stray chunk",
    "history": "history — reply with how many prompts this session has seen",
    "echo": "echo TEXT — reply 'echo: TEXT'",
    "probe": 'probe {"read": [P], "write": [P], "run": [[ARGV]], "env": [PREFIX]} — reply'
    " `probe: JSON`, what each route gave (sandbox tests)",
}

QUIRKS: dict[str, str] = {
    "cancel-tail": "after a cancelled prompt, every later prompt is answered by the result of"
    " the one before it (the first by an immediate empty end_turn); survives session/load on"
    " this process, not a new process (claude-agent-acp 0.23.1)",
    "cancel-end-turn": "a cancelled prompt is answered end_turn, not cancelled",
    "ignore-cancel": "session/cancel is ignored; the prompt runs on",
    "no-result": "the answer streams whole, then session/prompt is never answered",
    "late-updates": "20 ms after each result, one more message chunk",
}

STOP_REASONS = ("end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled")
PERMISSION_OPTIONS = [
    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject-always", "name": "Always reject", "kind": "reject_always"},
]


class _Cancelled(Exception):
    """The client cancelled the turn."""


@dataclass
class _Session:
    session_id: str
    cwd: str
    history: list[dict[str, str]] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    replies: list[str] = field(default_factory=list)


class _Store:
    """Session histories, on disk when a state dir is configured."""

    def __init__(self, folder: str | None) -> None:
        self.folder = Path(folder) if folder else None
        self.memory: dict[str, _Session] = {}

    def save(self, session: _Session) -> None:
        self.memory[session.session_id] = session
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / f"{session.session_id}.json"
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps({"cwd": session.cwd, "history": session.history}))
        temporary.replace(target)

    def load(self, session_id: str) -> _Session | None:
        if session_id in self.memory:
            return self.memory[session_id]
        if self.folder is None or "/" in session_id:
            return None
        path = self.folder / f"{session_id}.json"
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        session = _Session(session_id, data.get("cwd", ""), list(data.get("history", [])))
        self.memory[session_id] = session
        return session


class ScriptedAgent:
    """The agent side; the router calls these methods with the request fields as kwargs."""

    def __init__(
        self,
        store: _Store,
        *,
        load_session: bool,
        scenario: str | None,
        quirks: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        self.quirks = quirks
        # cancel-tail: per session, the run whose result answers the next prompt (None: an
        # empty end_turn). Process memory, so a session/load here does not clear it.
        self.behind: dict[str, asyncio.Future[str] | None] = {}
        self.load_enabled = load_session
        self.scenario = scenario
        self.elicitation = False
        self.conn: Connection | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.tool_counter = 0

    # --- ACP methods --------------------------------------------------------------------------

    async def initialize(
        self, protocol_version: int, client_capabilities: ClientCapabilities | None = None, **_: Any
    ) -> InitializeResponse:
        elicitation = client_capabilities.elicitation if client_capabilities else None
        self.elicitation = elicitation is not None and elicitation.form is not None
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=self.load_enabled),
            agent_info=Implementation(name="scripted-agent", version="1.0"),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        session = _Session(f"sess-{uuid.uuid4().hex[:12]}", cwd)
        self.store.save(session)
        # Real agents announce their slash commands right after session/new: an idle update.
        self._later(0.005, self._announce_commands(session.session_id))
        return NewSessionResponse(session_id=session.session_id)

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        if not self.load_enabled:
            raise RequestError.method_not_found("session/load")
        session = self.store.load(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})
        for entry in session.history:  # the spec: replay the conversation, then answer
            kind = "user_message_chunk" if entry["role"] == "user" else "agent_message_chunk"
            await self._update(session_id, {"sessionUpdate": kind, "content": _text(entry["text"])})
        return LoadSessionResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        session = self.store.load(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})
        text = "".join(b.text for b in prompt if isinstance(b, TextContentBlock)).strip()
        run = asyncio.ensure_future(self._answer(session, text))
        if session_id in self.behind:  # cancel-tail: answer with the previous run's result
            previous = self.behind[session_id]
            self.behind[session_id] = run
            reason = "end_turn" if previous is None else await previous
        else:
            reason = await run
            if reason == "cancelled" and "cancel-tail" in self.quirks:
                self.behind[session_id] = None
        if "no-result" in self.quirks and reason != "cancelled":
            await session.cancelled.wait()  # the answer streamed; its result never comes
            reason = "cancelled"
        if "late-updates" in self.quirks:
            self._later(0.02, self._update(session_id, _chunk(f"late update after {reason}")))
        return PromptResponse(stop_reason=reason)  # type: ignore[arg-type]

    async def _answer(self, session: _Session, text: str) -> str:
        session.cancelled = asyncio.Event()
        session.replies = []
        session.history.append({"role": "user", "text": text})
        self.store.save(session)
        try:
            reason = await self._run(session, text)
        except _Cancelled:
            reason = "cancelled"
        if session.replies:
            session.history.append({"role": "agent", "text": "".join(session.replies)})
            self.store.save(session)
        if reason == "cancelled" and "cancel-end-turn" in self.quirks:
            return "end_turn"
        return reason

    async def cancel(self, session_id: str, **_: Any) -> None:
        session = self.store.load(session_id)
        if session is not None and "ignore-cancel" not in self.quirks:
            session.cancelled.set()

    # --- the script ---------------------------------------------------------------------------

    async def _run(self, session: _Session, text: str) -> str:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if not lines or lines[0].split()[0] not in SCENARIOS:
            if self.scenario is None:
                await self._say(session, f"echo: {text}")
                return "end_turn"
            lines = [line.strip() for line in self.scenario.splitlines() if line.strip()]
        for line in lines:
            if session.cancelled.is_set():
                return "cancelled"
            word, _, rest = line.partition(" ")
            reason = await self._command(session, word, rest.strip(), line)
            if reason is not None:
                return reason
        return "end_turn"

    async def _command(self, session: _Session, word: str, rest: str, line: str) -> str | None:
        sid = session.session_id
        args = rest.split()
        if word == "say":
            await self._say(session, rest)
        elif word == "echo":
            await self._say(session, f"echo: {rest}")
        elif word == "think":
            await self._update(
                sid, {"sessionUpdate": "agent_thought_chunk", "content": _text(rest)}
            )
        elif word == "stream":
            count, delay = int(args[0]), int(args[1]) if len(args) > 1 else 0
            for index in range(count):
                await self._say(session, f"c{index} ")
                if delay:
                    await self._pause(session, delay)
        elif word == "tool":
            await self._tool(session, rest or "tool")
        elif word == "plan":
            entries = [part.strip() for part in rest.split("|") if part.strip()]
            await self._update(sid, {"sessionUpdate": "plan", "entries": _plan(entries)})
        elif word == "permission":
            return await self._permission(session, rest or "Run a command")
        elif word == "ask":
            return await self._ask(session, rest)
        elif word == "hang":
            await session.cancelled.wait()
            return "cancelled"
        elif word == "sleep":
            await self._pause(session, int(args[0]) if args else 100)
        elif word == "crash":
            os._exit(int(args[0]) if args else 3)
        elif word == "crash-after":
            code = int(args[1]) if len(args) > 1 else 3
            self._later(int(args[0]) / 1000, _exit_soon(code))
        elif word == "error":
            raise RequestError.internal_error({"details": rest or "scripted failure"})
        elif word == "stop":
            return rest if rest in STOP_REASONS else "end_turn"
        elif word == "silent":
            pass
        elif word == "stderr":
            _flood_stderr(int(args[0]) if args else 100)
        elif word == "huge":
            await self._say(session, "x" * (1024 * (int(args[0]) if args else 1024)))
        elif word == "unknown":
            kind = rest or "scripted_mystery"
            await self._update(sid, {"sessionUpdate": kind, "payload": {"x": 1}})
        elif word == "idle":
            self._later((int(args[0]) if args else 20) / 1000, self._idle_burst(sid))
        elif word == "probe":
            await self._say(session, f"probe: {json.dumps(_probe(json.loads(rest)))}")
        elif word == "history":
            prompts = sum(1 for entry in session.history if entry["role"] == "user")
            await self._say(session, f"history: {prompts} prompts")
        else:
            await self._say(session, f"echo: {line}")
        return None

    async def _tool(self, session: _Session, title: str) -> None:
        self.tool_counter += 1
        tool_id = f"tool-{self.tool_counter}"
        sid = session.session_id
        start = {"sessionUpdate": "tool_call", "toolCallId": tool_id, "title": title}
        await self._update(sid, {**start, "kind": "execute", "status": "pending"})
        for status in ("in_progress", "completed"):
            await self._update(
                sid, {"sessionUpdate": "tool_call_update", "toolCallId": tool_id, "status": status}
            )

    async def _permission(self, session: _Session, title: str) -> str | None:
        self.tool_counter += 1
        tool_call = {
            "toolCallId": f"tool-{self.tool_counter}",
            "title": title,
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": title},
        }
        answer = await self._request(
            CLIENT_METHODS["session_request_permission"],
            {"sessionId": session.session_id, "toolCall": tool_call, "options": PERMISSION_OPTIONS},
        )
        outcome = answer.get("outcome") or {}
        if outcome.get("outcome") != "selected":
            return "cancelled"
        allowed = str(outcome.get("optionId", "")).startswith("allow")
        await self._say(session, "done" if allowed else "not done")
        return None

    async def _ask(self, session: _Session, rest: str) -> str | None:
        question, _, choices = rest.partition("?")
        question = f"{question.strip()}?"
        options = [c.strip() for c in choices.split("|") if c.strip()]
        if self.elicitation:
            value = await self._ask_elicitation(session, question, options)
        else:
            value = await self._ask_qwen(session, question, options)
        await self._say(session, "no answer" if value is None else f"answer: {value}")
        return None

    async def _ask_elicitation(
        self, session: _Session, question: str, options: list[str]
    ) -> str | None:
        prop: dict[str, Any] = {"type": "string", "title": question}
        if options:
            prop["oneOf"] = [{"const": o, "title": o.title()} for o in options]
        answer = await self._request(
            CLIENT_METHODS["elicitation_create"],
            {
                "sessionId": session.session_id,
                "mode": "form",
                "message": question,
                "requestedSchema": {
                    "type": "object",
                    "properties": {"choice": prop},
                    "required": ["choice"],
                },
            },
        )
        action = answer.get("action")
        if action == "cancel":
            raise _Cancelled
        content = answer.get("content") or {}
        return str(content.get("choice")) if action == "accept" else None

    async def _ask_qwen(self, session: _Session, question: str, options: list[str]) -> str | None:
        self.tool_counter += 1
        questions = [
            {
                "question": question,
                "header": "Question",
                "options": [{"label": o, "description": ""} for o in options],
                "multiSelect": False,
            }
        ]
        answer = await self._request(
            CLIENT_METHODS["session_request_permission"],
            {
                "sessionId": session.session_id,
                "toolCall": {
                    "toolCallId": f"tool-{self.tool_counter}",
                    "title": "Ask user 1 question",
                    "kind": "think",
                    "status": "pending",
                    "rawInput": {"questions": questions},
                    "_meta": {
                        "toolName": "ask_user_question",
                        "qwenInteractionKind": "user_question",
                        "qwenQuestions": questions,
                    },
                },
                "options": [
                    {"optionId": "proceed_once", "name": "Submit", "kind": "allow_once"},
                    {"optionId": "cancel", "name": "Cancel", "kind": "reject_once"},
                ],
            },
        )
        outcome = answer.get("outcome") or {}
        if outcome.get("outcome") != "selected":
            raise _Cancelled
        if outcome.get("optionId") != "proceed_once":
            return None
        answers = answer.get("answers") or {}
        return str(answers.get("0")) if "0" in answers else None

    # --- helpers ------------------------------------------------------------------------------

    async def _say(self, session: _Session, text: str) -> None:
        session.replies.append(text)
        update = {"sessionUpdate": "agent_message_chunk", "content": _text(text)}
        await self._update(session.session_id, update)

    async def _pause(self, session: _Session, millis: int) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.cancelled.wait(), millis / 1000)
            raise _Cancelled

    async def _update(self, session_id: str, update: dict[str, Any]) -> None:
        assert self.conn is not None
        params = {"sessionId": session_id, "update": update}
        await self.conn.send_notification(CLIENT_METHODS["session_update"], params)

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        # Raw, not the typed helper: the typed response model drops qwen's `answers` field.
        assert self.conn is not None
        result = await self.conn.send_request(method, params)
        return result if isinstance(result, dict) else {}

    async def _announce_commands(self, session_id: str) -> None:
        commands = [{"name": name, "description": text} for name, text in SCENARIOS.items()]
        await self._update(
            session_id,
            {"sessionUpdate": "available_commands_update", "availableCommands": commands},
        )

    async def _idle_burst(self, session_id: str) -> None:
        await self._announce_commands(session_id)
        await self._update(
            session_id, {"sessionUpdate": "current_mode_update", "currentModeId": "code"}
        )
        await self._update(
            session_id, {"sessionUpdate": "session_info_update", "title": "Scripted"}
        )
        await self._update(
            session_id, {"sessionUpdate": "agent_message_chunk", "content": _text("late")}
        )

    def _later(self, delay: float, work: Any) -> None:
        async def run() -> None:
            await asyncio.sleep(delay)
            with contextlib.suppress(ConnectionError):
                await work

        task = asyncio.get_running_loop().create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": _text(text)}


def _plan(entries: list[str]) -> list[dict[str, str]]:
    return [
        {"content": entry, "priority": "medium", "status": "in_progress" if i == 0 else "pending"}
        for i, entry in enumerate(entries)
    ]


def _probe(routes: dict[str, list[Any]]) -> dict[str, Any]:
    """Try each route the way an agent's shell would; report `ok` (a read also gives the
    sha256 of what it read) or the error's name."""
    import hashlib
    import subprocess

    def attempt(action: Any) -> str:
        try:
            return str(action())
        except (OSError, subprocess.SubprocessError) as exc:
            return type(exc).__name__

    def read(path: str) -> str:
        return "ok:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()

    def write(path: str) -> str:
        Path(path).write_text("written by the scripted agent\n")
        return "ok"

    def run(argv: list[str]) -> str:
        done = subprocess.run(argv, capture_output=True, timeout=10, check=False)
        return "ok" if done.returncode == 0 else f"exit {done.returncode}"

    prefixes = tuple(routes.get("env", []))
    return {
        "read": {p: attempt(lambda p=p: read(p)) for p in routes.get("read", [])},
        "write": {p: attempt(lambda p=p: write(p)) for p in routes.get("write", [])},
        "run": {" ".join(a): attempt(lambda a=a: run(a)) for a in routes.get("run", [])},
        "env": sorted(name for name in os.environ if prefixes and name.startswith(prefixes)),
    }


async def _exit_soon(code: int) -> None:
    os._exit(code)


def _flood_stderr(kilobytes: int) -> None:
    # A blocking write, like a chatty real agent: it stalls if nobody reads the pipe.
    line = "scripted-agent stderr filler " + "x" * 994 + "\n"
    for _ in range(kilobytes):
        sys.stderr.write(line)
    sys.stderr.flush()


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
    parser.add_argument("--no-load", action="store_true", help="do not offer session/load")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    arguments = _arguments(argv)
    exit_code = os.environ.get("SCRIPTED_AGENT_EXIT_ON_START")
    if exit_code:
        sys.stderr.write("scripted-agent: configured to fail at start\n")
        sys.stderr.flush()
        sys.exit(int(exit_code))
    scenario_path = os.environ.get("SCRIPTED_AGENT_SCENARIO")
    agent = ScriptedAgent(
        _Store(os.environ.get("SCRIPTED_AGENT_STATE_DIR")),
        load_session=not arguments.no_load
        and os.environ.get("SCRIPTED_AGENT_LOAD_SESSION", "1").lower()
        not in {"0", "false", "no", "off"},
        scenario=Path(scenario_path).read_text() if scenario_path else None,
        quirks=frozenset(arguments.quirk),
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(agent))


if __name__ == "__main__":
    main()
