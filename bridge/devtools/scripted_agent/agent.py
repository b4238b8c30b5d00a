"""The agent side of ACP: the methods the router calls, and the script a prompt runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

from acp.connection import Connection
from acp.exceptions import RequestError
from acp.meta import CLIENT_METHODS, PROTOCOL_VERSION
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionListCapabilities,
    SessionResumeCapabilities,
    TextContentBlock,
)

from bridge.devtools.scripted_agent import realistic
from bridge.devtools.scripted_agent.language import (
    PERMISSION_OPTIONS,
    SCENARIOS,
    STOP_REASONS,
)
from bridge.devtools.scripted_agent.session_methods import SessionMethods
from bridge.devtools.scripted_agent.sessions import Cancelled, Session, SessionStore
from bridge.devtools.scripted_agent.wire import (
    exit_soon,
    flood_stderr,
    message_chunk,
    plan_entries,
    probe,
    received,
    text_block,
)


class ScriptedAgent(SessionMethods):
    """The agent side; the router calls these methods with the request fields as kwargs."""

    def __init__(
        self,
        store: SessionStore,
        *,
        load_session: bool,
        scenario: str | None,
        resume_session: bool = True,
        list_sessions: bool = True,
        name: str = "scripted-agent",
        version: str = "1.0",
        images: bool = True,
        audio: bool = False,
        quirks: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        self.quirks = quirks
        # cancel-tail: per session, the run whose result answers the next prompt (None: an
        # empty end_turn). Process memory, so a session/load here does not clear it.
        self.behind: dict[str, asyncio.Future[str] | None] = {}
        # Work a line asked for once the turn's result is out (`idle`), per session.
        self.after_turn: dict[str, list[tuple[float, Callable[[], Awaitable[None]]]]] = {}
        self.load_enabled = load_session
        self.resume_enabled = resume_session
        self.name = name
        self.version = version
        self.images = images
        self.audio = audio
        self.list_enabled = list_sessions
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
            agent_capabilities=AgentCapabilities(
                load_session=self.load_enabled,
                prompt_capabilities=PromptCapabilities(image=self.images, audio=self.audio),
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities() if self.list_enabled else None,
                    resume=SessionResumeCapabilities() if self.resume_enabled else None,
                ),
            ),
            agent_info=Implementation(name=self.name, version=self.version),
        )

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        session = self.store.load(session_id)
        if session is None:
            raise RequestError.invalid_params({"details": f"unknown session {session_id}"})
        text = "".join(b.text for b in prompt if isinstance(b, TextContentBlock)).strip()
        run = asyncio.ensure_future(self._answer(session, text, received(prompt)))
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
            self._later(
                0.02, self._update(session_id, message_chunk(f"late update after {reason}"))
            )
        # Queued by `idle`: started now, so that even a slow turn sends its result first.
        for delay, work in self.after_turn.pop(session_id, []):
            self._later(delay, work())
        return PromptResponse(stop_reason=reason)  # type: ignore[arg-type]

    async def _answer(self, session: Session, text: str, got: list[str] | None = None) -> str:
        session.cancelled = asyncio.Event()
        session.replies = []
        session.history.append({"role": "user", "text": text})
        self.store.save(session)
        if got:  # what came besides the text, said first (tests assert on what arrived)
            await self._say(session, "received: " + "; ".join(got) + "\n")
        try:
            reason = await self._run(session, text)
        except Cancelled:
            reason = "cancelled"
        if session.replies:
            session.history.append({"role": "agent", "text": "".join(session.replies)})
        await self._after_prompt(session, text)
        self.store.save(session)
        if reason == "cancelled" and "cancel-end-turn" in self.quirks:
            return "end_turn"
        return reason

    async def cancel(self, session_id: str, **_: Any) -> None:
        session = self.store.load(session_id)
        if session is not None and "ignore-cancel" not in self.quirks:
            session.cancelled.set()

    # --- the script ---------------------------------------------------------------------------

    async def _run(self, session: Session, text: str) -> str:
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

    async def _command(self, session: Session, word: str, rest: str, line: str) -> str | None:
        sid = session.session_id
        args = rest.split()
        if word == "say":
            await self._say(session, rest)
        elif word == "echo":
            await self._say(session, f"echo: {rest}")
        elif word == "link":  # an answer that links a file (ACP resource_link)
            target = PurePosixPath(session.cwd, rest)  # as the agent names it: no resolving
            link = {"type": "resource_link", "uri": target.as_uri(), "name": target.name}
            await self._update(sid, {"sessionUpdate": "agent_message_chunk", "content": link})
        elif word == "edit":  # a tool call that reports a diff: edit PATH OLD => NEW
            await self._edit(session, rest)
        elif word == "unpaired":  # text a lenient encoder sends: a lone surrogate escape
            await self._say(session, f"{rest} \ud800 end")
        elif word == "md":
            await self._say(session, rest.replace("\\n", "\n"))
        elif word == "think":
            await self._update(
                sid, {"sessionUpdate": "agent_thought_chunk", "content": text_block(rest)}
            )
        elif word == "stream":
            count, delay = int(args[0]), int(args[1]) if len(args) > 1 else 0
            for index in range(count):
                await self._say(session, f"c{index} ")
                if delay:
                    await self._pause(session, delay)
        elif word == "realistic":  # a coding agent's streaming turn (realistic.py)
            tool = partial(self._tool, session)
            await realistic.play(rest, partial(self._update, sid), tool, session.cancelled)
        elif word == "tool":
            await self._tool(session, rest or "tool")
        elif word == "plan":
            entries = [part.strip() for part in rest.split("|") if part.strip()]
            await self._update(sid, {"sessionUpdate": "plan", "entries": plan_entries(entries)})
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
            self._later(int(args[0]) / 1000, exit_soon(code))
        elif word == "error":
            raise RequestError.internal_error({"details": rest or "scripted failure"})
        elif word == "stop":
            return rest if rest in STOP_REASONS else "end_turn"
        elif word == "silent":
            pass
        elif word == "stderr":
            flood_stderr(int(args[0]) if args else 100)
        elif word == "huge":
            await self._say(session, "x" * (1024 * (int(args[0]) if args else 1024)))
        elif word == "unknown":
            kind = rest or "scripted_mystery"
            await self._update(sid, {"sessionUpdate": kind, "payload": {"x": 1}})
        elif word == "idle":  # MS after the turn's result is sent, not after this line
            after = (int(args[0]) if args else 20) / 1000
            self.after_turn.setdefault(sid, []).append((after, lambda: self._idle_burst(sid)))
        elif word == "probe":
            await self._say(session, f"probe: {json.dumps(probe(json.loads(rest)))}")
        elif word == "mode":
            await self._say(session, f"mode: {session.mode}")
        elif word == "model":
            await self._say(session, f"model: {session.model}")
        elif word == "cwd":
            await self._say(session, f"cwd: {session.cwd} (process: {os.getcwd()})")
        elif word == "rename":  # kept in its own store only (session/list), told to no one
            session.title = rest
            await self._say(session, f"renamed: {rest}")
        elif word == "whoami":
            title = session.title or "-"
            await self._say(session, f"{self.name}: resumed={session.resumed} title={title}")
        elif word == "history":
            prompts = sum(1 for entry in session.history if entry["role"] == "user")
            await self._say(session, f"history: {prompts} prompts")
        else:
            await self._say(session, f"echo: {line}")
        return None

    async def _tool(self, session: Session, title: str) -> None:
        self.tool_counter += 1
        tool_id = f"tool-{self.tool_counter}"
        sid = session.session_id
        start = {"sessionUpdate": "tool_call", "toolCallId": tool_id, "title": title}
        await self._update(sid, {**start, "kind": "execute", "status": "pending"})
        for status in ("in_progress", "completed"):
            await self._update(
                sid, {"sessionUpdate": "tool_call_update", "toolCallId": tool_id, "status": status}
            )

    async def _edit(self, session: Session, rest: str) -> None:
        path, _, change = rest.partition(" ")
        old, _, new = change.partition(" => ")
        self.tool_counter += 1
        diff = {
            "type": "diff",
            "path": str(Path(session.cwd, path)),
            "oldText": old.replace("\\n", "\n") or None,
            "newText": new.replace("\\n", "\n"),
        }
        call = {"sessionUpdate": "tool_call", "toolCallId": f"tool-{self.tool_counter}"}
        await self._update(
            session.session_id,
            {
                **call,
                "title": f"Edit {path}",
                "kind": "edit",
                "status": "completed",
                "content": [diff],
            },
        )

    async def _permission(self, session: Session, title: str) -> str | None:
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

    async def _ask(self, session: Session, rest: str) -> str | None:
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
        self, session: Session, question: str, options: list[str]
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
            raise Cancelled
        content = answer.get("content") or {}
        return str(content.get("choice")) if action == "accept" else None

    async def _ask_qwen(self, session: Session, question: str, options: list[str]) -> str | None:
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
            raise Cancelled
        if outcome.get("optionId") != "proceed_once":
            return None
        answers = answer.get("answers") or {}
        return str(answers.get("0")) if "0" in answers else None

    # --- helpers ------------------------------------------------------------------------------

    async def _say(self, session: Session, text: str) -> None:
        session.replies.append(text)
        update = {"sessionUpdate": "agent_message_chunk", "content": text_block(text)}
        await self._update(session.session_id, update)

    async def _pause(self, session: Session, millis: int) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.cancelled.wait(), millis / 1000)
            raise Cancelled

    async def _update(self, session_id: str, update: dict[str, Any]) -> None:
        assert self.conn is not None
        params = {"sessionId": session_id, "update": update}
        await self.conn.send_notification(CLIENT_METHODS["session_update"], params)

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        # Raw, not the typed helper: the typed response model drops qwen's `answers` field.
        assert self.conn is not None
        result = await self.conn.send_request(method, params)
        return result if isinstance(result, dict) else {}

    def _later(self, delay: float, work: Any) -> None:
        async def run() -> None:
            await asyncio.sleep(delay)
            with contextlib.suppress(ConnectionError):
                await work

        task = asyncio.get_running_loop().create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
