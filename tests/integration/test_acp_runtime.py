"""AcpRuntime against the scripted agent: a real subprocess speaking real ACP over stdio."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from tenacity import RetryCallState, wait_none
from tenacity.wait import wait_base

from bridge.clock import LoopClock
from bridge.config import Settings
from bridge.runtime.acp.client import client_capabilities
from bridge.runtime.acp.runtime import AcpRuntime, SessionLost
from bridge.runtime.events import (
    MessageChunk,
    PermissionKind,
    PermissionRequested,
    PlanUpdated,
    PromptSent,
    QuestionAsked,
    QuestionKind,
    RuntimeExited,
    RuntimeFailed,
    StopReason,
    ThoughtChunk,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
    TurnEvent,
)
from bridge.runtime.port import RuntimeUnavailable

REPO = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, "-m", "bridge.devtools.scripted_agent"]
TERMINAL = (TurnEnded, RuntimeFailed, RuntimeExited)
E = TypeVar("E", bound=TurnEvent)


class Recorder:
    """A turn sink that keeps every event with its arrival time and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[TurnEvent] = []
        self.times: list[float] = []
        self._changed = asyncio.Event()

    def __call__(self, event: TurnEvent) -> None:
        self.events.append(event)
        self.times.append(time.monotonic())
        self._changed.set()

    async def wait_for(self, kind: type[E], within: float = 10.0) -> E:
        async with asyncio.timeout(within):
            while True:
                for event in self.events:
                    if isinstance(event, kind):
                        return event
                self._changed.clear()
                await self._changed.wait()

    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, MessageChunk))

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events]

    def terminal(self) -> TurnEvent:
        """The one terminal event, last; fails when there is none or more than one."""
        terminals = [e for e in self.events if isinstance(e, TERMINAL)]
        assert len(terminals) == 1, self.kinds()
        assert self.events[-1] is terminals[0], self.kinds()
        assert isinstance(self.events[0], PromptSent), self.kinds()
        return terminals[0]


class CountingWait(wait_base):
    """A restart backoff that never sleeps and counts how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, retry_state: RetryCallState) -> float:
        self.calls += 1
        return 0.0


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Waits for state the runtime keeps but announces to nobody (idle session updates)."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - no event exists for these; poll in ms steps
            await asyncio.sleep(0.005)


def agent_env(state_dir: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(REPO), "SCRIPTED_AGENT_STATE_DIR": str(state_dir)}


# Starting the scripted agent costs about a second (importing the SDK's schema), so tests that
# neither crash nor close the agent share one runtime per module; each opens its own session.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runtime(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AcpRuntime]:
    folder = tmp_path_factory.mktemp("shared-runtime")
    rt = AcpRuntime(
        AGENT, folder, clock=LoopClock(), env=agent_env(folder / "state"), restart_wait=wait_none()
    )
    await rt.start()
    yield rt
    await rt.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def asking_runtime(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AcpRuntime]:
    """A runtime that declares elicitation (the shared one does not)."""
    folder = tmp_path_factory.mktemp("asking-runtime")
    rt = AcpRuntime(
        AGENT,
        folder,
        clock=LoopClock(),
        env=agent_env(folder / "state"),
        elicitation=True,
        restart_wait=wait_none(),
    )
    yield rt
    await rt.close()


@pytest_asyncio.fixture(loop_scope="module")
async def make_runtime(tmp_path: Path) -> AsyncIterator[Callable[..., AcpRuntime]]:
    """Runtimes of a test's own, for tests that crash, kill or close their agent."""
    made: list[AcpRuntime] = []

    def make(*, env: dict[str, str] | None = None, **options: Any) -> AcpRuntime:
        options.setdefault("restart_wait", wait_none())
        options.setdefault("argv", AGENT)
        environment = {**agent_env(tmp_path / "agent-state"), **(env or {})}
        runtime = AcpRuntime(workdir=tmp_path, clock=LoopClock(), env=environment, **options)
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        await runtime.close()


async def run_turn(rt: AcpRuntime, session_id: str, text: str) -> Recorder:
    recorder = Recorder()
    await asyncio.wait_for(rt.prompt(session_id, text, recorder), 15)
    recorder.terminal()
    return recorder


# --- turns ------------------------------------------------------------------------------------


async def test_scripted_turn_is_normalized_in_order(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    script = "think planning\nsay hello\ntool Read README.md\nplan inspect | fix | test"
    rec = await run_turn(runtime, session.session_id, script)

    assert rec.kinds() == [
        "PromptSent",
        "ThoughtChunk",
        "MessageChunk",
        "ToolCallStarted",
        "ToolCallUpdated",  # in_progress then completed, merged as they came together
        "PlanUpdated",
        "UsageReported",
        "TurnEnded",
    ]
    thought, message, started, updated, plan = rec.events[1:6]
    assert thought == ThoughtChunk(session.session_id, "planning")
    assert message == MessageChunk(session.session_id, "hello")
    assert isinstance(started, ToolCallStarted)
    assert (started.title, started.kind, started.status) == ("Read README.md", "execute", "pending")
    assert isinstance(updated, ToolCallUpdated)
    assert updated.status == "completed"
    assert isinstance(plan, PlanUpdated)
    assert [(e.content, e.status) for e in plan.entries] == [
        ("inspect", "in_progress"),
        ("fix", "pending"),
        ("test", "pending"),
    ]
    assert rec.terminal() == TurnEnded(session.session_id, StopReason.END_TURN)


async def test_unrecognised_text_gets_an_echo(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    rec = await run_turn(runtime, session.session_id, "hello bot")
    assert rec.text() == "echo: hello bot"


@pytest.mark.parametrize("reason", list(StopReason))
async def test_every_stop_reason(runtime: AcpRuntime, reason: StopReason) -> None:
    session = await runtime.open_session("chat-1")
    rec = await run_turn(runtime, session.session_id, f"say partial\nstop {reason.value}")
    assert rec.terminal() == TurnEnded(session.session_id, reason)


async def test_turn_with_no_visible_text(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    rec = await run_turn(runtime, session.session_id, "silent")
    assert rec.kinds() == ["PromptSent", "UsageReported", "TurnEnded"]


async def test_error_response_fails_the_turn_and_the_process_lives(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    rec = await run_turn(runtime, session.session_id, "say trying\nerror disk is full")
    failed = rec.terminal()
    assert isinstance(failed, RuntimeFailed)
    # The code and short message are kept; the details (agent text) never are.
    assert failed.reason == "agent error -32603: Internal error"
    assert "disk is full" not in failed.reason

    again = await run_turn(runtime, session.session_id, "say still here")
    assert again.text() == "still here"


async def test_silence_then_answer(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    rec = await run_turn(runtime, session.session_id, "sleep 150\nsay awake")
    assert rec.kinds() == ["PromptSent", "MessageChunk", "UsageReported", "TurnEnded"]
    assert rec.times[1] - rec.times[0] >= 0.1  # nothing at all arrived during the silence


async def test_burst_of_chunks_keeps_arrival_order(runtime: AcpRuntime) -> None:
    # Pitfall: the SDK runs each notification in its own task; order holds only because the
    # runtime records an update before its first await.
    session = await runtime.open_session("chat-1")
    rec = await run_turn(runtime, session.session_id, "stream 400 0\ntool Mid\nstream 100 0")
    # Runs of chunks arrive merged (issue 33), the text and its place around the tool exact.
    tool_at = rec.kinds().index("ToolCallStarted")
    before = "".join(e.text for e in rec.events[:tool_at] if isinstance(e, MessageChunk))
    after = "".join(e.text for e in rec.events[tool_at:] if isinstance(e, MessageChunk))
    assert before == "".join(f"c{i} " for i in range(400))
    assert after == "".join(f"c{i} " for i in range(100))
    assert rec.kinds()[tool_at + 1] == "ToolCallUpdated"
    assert rec.kinds().count("MessageChunk") < 100


async def test_a_prompt_while_a_turn_runs_waits_for_its_end(runtime: AcpRuntime) -> None:
    """Never two turns on one session at once: a stopped round's prompt may still be on
    its way to a slow agent when the next round's comes (seed 49495)."""
    session = await runtime.open_session("chat-1")
    rec, second = Recorder(), Recorder()
    task = asyncio.create_task(runtime.prompt(session.session_id, "say go\nhang", rec))
    await rec.wait_for(MessageChunk)
    waiting = asyncio.create_task(runtime.prompt(session.session_id, "say two", second))
    await asyncio.sleep(0)  # let it reach the session: it must wait there
    assert second.events == []
    await runtime.cancel(session.session_id)
    await task
    await waiting
    assert [e.text for e in second.events if isinstance(e, MessageChunk)] == ["two"]
    assert isinstance(rec.events[-1], TurnEnded)


async def test_scenario_file_runs_for_plain_prompts(
    make_runtime: Callable[..., AcpRuntime], tmp_path: Path
) -> None:
    scenario = tmp_path / "scenario.txt"
    scenario.write_text("say from the scenario\nstop refusal\n")
    rt = make_runtime(env={"SCRIPTED_AGENT_SCENARIO": str(scenario)})
    session = await rt.open_session("chat-1")
    rec = await run_turn(rt, session.session_id, "anything at all")
    assert rec.text() == "from the scenario"
    assert rec.terminal() == TurnEnded(session.session_id, StopReason.REFUSAL)


# --- permissions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option_id", "reply"),
    [
        ("allow-once", "done"),
        ("allow-always", "done"),
        ("reject-once", "not done"),
        ("reject-always", "not done"),
    ],
)
async def test_permission_answer_continues_the_turn(
    runtime: AcpRuntime, option_id: str, reply: str
) -> None:
    session = await runtime.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(runtime.prompt(session.session_id, "permission rm -rf build", rec))
    asked = await rec.wait_for(PermissionRequested)

    assert asked.title == "rm -rf build"
    assert asked.detail == "rm -rf build"
    assert asked.tool_call_id
    assert [(o.option_id, o.kind) for o in asked.options] == [
        ("allow-once", PermissionKind.ALLOW_ONCE),
        ("allow-always", PermissionKind.ALLOW_ALWAYS),
        ("reject-once", PermissionKind.REJECT_ONCE),
        ("reject-always", PermissionKind.REJECT_ALWAYS),
    ]
    assert runtime.pending_request_ids() == [asked.request_id]
    await runtime.answer_permission(asked.request_id, option_id)
    await asyncio.wait_for(task, 10)

    assert rec.text() == reply
    assert rec.terminal() == TurnEnded(session.session_id, StopReason.END_TURN)
    assert runtime.pending_request_ids() == []


async def test_permission_answered_none_is_cancelled(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(runtime.prompt(session.session_id, "permission deploy", rec))
    asked = await rec.wait_for(PermissionRequested)
    await runtime.answer_permission(asked.request_id, None)
    await asyncio.wait_for(task, 10)
    assert rec.terminal() == TurnEnded(session.session_id, StopReason.CANCELLED)


async def test_permission_answer_validation(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(runtime.prompt(session.session_id, "permission deploy", rec))
    asked = await rec.wait_for(PermissionRequested)
    with pytest.raises(ValueError, match="not offered"):
        await runtime.answer_permission(asked.request_id, "sudo-everything")
    with pytest.raises(ValueError, match="answer_permission"):
        await runtime.answer_question(asked.request_id, {"answer": "yes"})
    await runtime.answer_permission(asked.request_id, "allow-once")
    await asyncio.wait_for(task, 10)
    # A second click on the same card, or one for a request that never existed: ignored.
    await runtime.answer_permission(asked.request_id, "allow-once")
    await runtime.answer_permission("no-such-request", None)
    assert rec.text() == "done"


async def test_cancel_answers_pending_permission_cancelled(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(runtime.prompt(session.session_id, "permission deploy", rec))
    await rec.wait_for(PermissionRequested)
    await runtime.cancel(session.session_id)
    await asyncio.wait_for(task, 10)
    assert rec.terminal() == TurnEnded(session.session_id, StopReason.CANCELLED)
    assert runtime.pending_request_ids() == []


async def test_cancel_a_hanging_turn(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(runtime.prompt(session.session_id, "say working\nhang", rec))
    await rec.wait_for(MessageChunk)
    await runtime.cancel(session.session_id)
    await asyncio.wait_for(task, 10)
    assert rec.terminal() == TurnEnded(session.session_id, StopReason.CANCELLED)
    await runtime.cancel(session.session_id)  # nothing runs any more: a no-op


# --- questions --------------------------------------------------------------------------------


async def ask(rt: AcpRuntime, answers: dict[str, str] | None, key: str | None = None) -> Recorder:
    session = await rt.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(rt.prompt(session.session_id, "ask Which color? red|blue", rec))
    question = await rec.wait_for(QuestionAsked)
    assert question.text == "Which color?"
    assert [o.value for o in question.options] == ["red", "blue"]
    if key is not None:
        assert question.answer_key == key
    await rt.answer_question(question.request_id, answers)
    await asyncio.wait_for(task, 10)
    assert rec.terminal() == TurnEnded(session.session_id, StopReason.END_TURN)
    return rec


async def test_elicitation_question_answered(asking_runtime: AcpRuntime) -> None:
    rec = await ask(asking_runtime, {"choice": "blue"}, key="choice")
    question = next(e for e in rec.events if isinstance(e, QuestionAsked))
    assert question.kind is QuestionKind.ELICITATION
    assert [o.label for o in question.options] == ["Red", "Blue"]
    assert rec.text() == "answer: blue"


async def test_elicitation_question_declined(asking_runtime: AcpRuntime) -> None:
    rec = await ask(asking_runtime, None)
    assert rec.text() == "no answer"


async def test_qwen_question_when_elicitation_is_not_declared(runtime: AcpRuntime) -> None:
    rec = await ask(runtime, {"0": "red"}, key="0")
    question = next(e for e in rec.events if isinstance(e, QuestionAsked))
    assert question.kind is QuestionKind.QWEN
    assert not any(isinstance(e, PermissionRequested) for e in rec.events)
    assert rec.text() == "answer: red"


async def test_qwen_question_declined(runtime: AcpRuntime) -> None:
    rec = await ask(runtime, None)
    assert rec.text() == "no answer"


@pytest.mark.parametrize("elicitation", [True, False])
async def test_cancel_resolves_a_pending_question(
    runtime: AcpRuntime, asking_runtime: AcpRuntime, elicitation: bool
) -> None:
    rt = asking_runtime if elicitation else runtime
    session = await rt.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(rt.prompt(session.session_id, "ask Proceed? yes|no", rec))
    await rec.wait_for(QuestionAsked)
    await rt.cancel(session.session_id)
    await asyncio.wait_for(task, 10)
    assert rec.terminal() == TurnEnded(session.session_id, StopReason.CANCELLED)
    assert rt.pending_request_ids() == []


# --- SDK pitfalls -----------------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_stderr_flood_does_not_hang_the_turn(
    make_runtime: Callable[..., AcpRuntime],
) -> None:
    # Pitfall: an unread stderr pipe fills at 64 KB and blocks the agent mid-write.
    runtime = make_runtime(max_agents=1)
    session = await runtime.open_session("chat-1")
    rec = await run_turn(runtime, session.session_id, "stderr 300\nsay survived")
    assert rec.text() == "survived"
    assert "stderr_tail" not in runtime.snapshot()["agents"][0]  # may echo the prompt
    tail = runtime.running_processes()[0].stderr
    assert "stderr filler" in tail.tail()[-1]
    assert tail.total_bytes > 300 * 1000
    assert len(tail.lines) <= 200  # bounded
    assert all(len(line) <= 500 for line in tail.lines)


async def test_unknown_update_kind_is_logged_and_dropped(
    runtime: AcpRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    session = await runtime.open_session("chat-1")
    before = runtime.unknown_updates
    with caplog.at_level(logging.WARNING, logger="bridge.runtime"):
        rec = await run_turn(runtime, session.session_id, "unknown galaxy_brain\nsay after")
    assert rec.kinds() == ["PromptSent", "MessageChunk", "UsageReported", "TurnEnded"]
    assert runtime.unknown_updates == before + 1
    assert any("galaxy_brain" in r.getMessage() for r in caplog.records)
    # The SDK's own "Unhandled error" traceback (with the payload) is not produced.
    assert not any("Unhandled error" in r.getMessage() for r in caplog.records)


async def test_idle_updates_are_kept_not_emitted(runtime: AcpRuntime) -> None:
    session = await runtime.open_session("chat-1")
    info = runtime.session_info(session.session_id)
    assert info is not None
    # The agent announces its commands right after session/new, outside any turn.
    await eventually(lambda: "stream" in info.available_commands)

    # A turn slower than the idle delay: the burst still comes after the turn's result.
    rec = await run_turn(runtime, session.session_id, "idle 10\nsleep 40\nsay hi")
    # After the turn: a mode change, a title, commands again and a stray message chunk.
    await eventually(lambda: info.mode_id == "code" and info.title == "Scripted")
    await eventually(lambda: info.idle_updates >= 1)
    assert rec.kinds() == ["PromptSent", "MessageChunk", "UsageReported", "TurnEnded"]
    assert rec.text() == "hi"


# --- process death, restart, reload -----------------------------------------------------------


async def test_crash_mid_turn_then_restart_and_reload(
    make_runtime: Callable[..., AcpRuntime],
) -> None:
    runtime = make_runtime(max_agents=1)
    await runtime.start()
    session = await runtime.open_session("chat-1")
    first_pid = runtime.running_processes()[0].pid
    rec = await run_turn(runtime, session.session_id, "say before\ncrash 7")
    assert rec.kinds() == ["PromptSent", "MessageChunk", "RuntimeExited"]
    assert rec.terminal() == RuntimeExited(session.session_id, returncode=7, restarting=True)
    assert runtime.running_processes() == []  # recorded dead: nothing pretends to run

    handle = await runtime.open_session("chat-1", resume_session_id=session.session_id)
    assert handle.session_id == session.session_id
    assert handle.loaded is True
    assert runtime.running_processes()[0].pid != first_pid
    # The history replayed by session/load never reaches a turn.
    again = await run_turn(runtime, session.session_id, "history")
    assert again.kinds() == ["PromptSent", "MessageChunk", "UsageReported", "TurnEnded"]
    assert again.text() == "history: 2 prompts"


async def test_crash_with_a_pending_permission(make_runtime: Callable[..., AcpRuntime]) -> None:
    runtime = make_runtime(max_agents=1)
    await runtime.start()
    # Pitfall: the SDK leaves a waiting permission request dangling when the process dies.
    session = await runtime.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(
        runtime.prompt(session.session_id, "crash-after 300 9\npermission deploy", rec)
    )
    asked = await rec.wait_for(PermissionRequested)
    await asyncio.wait_for(task, 10)
    assert rec.terminal() == RuntimeExited(session.session_id, returncode=9, restarting=True)
    assert runtime.pending_request_ids() == []
    await runtime.answer_permission(asked.request_id, "allow-once")  # too late: ignored


async def test_killed_agent_reports_the_signal(make_runtime: Callable[..., AcpRuntime]) -> None:
    runtime = make_runtime(max_agents=1)
    await runtime.start()
    session = await runtime.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(runtime.prompt(session.session_id, "say go\nhang", rec))
    await rec.wait_for(MessageChunk)
    runtime.running_processes()[0].process.kill()
    await asyncio.wait_for(task, 10)
    exited = rec.terminal()
    assert isinstance(exited, RuntimeExited)
    assert exited.signal == 9
    assert exited.returncode is None


async def test_idle_session_gets_no_event_and_reloads_on_next_prompt(
    make_runtime: Callable[..., AcpRuntime],
) -> None:
    rt = make_runtime(max_agents=1)
    busy = await rt.open_session("chat-busy")
    idle = await rt.open_session("chat-idle")
    warm = await run_turn(rt, idle.session_id, "say warm up")
    crash = await run_turn(rt, busy.session_id, "crash 4")
    assert isinstance(crash.terminal(), RuntimeExited)
    # The idle session's last turn is over: its sink hears nothing of the death.
    assert warm.kinds() == ["PromptSent", "MessageChunk", "UsageReported", "TurnEnded"]

    rec = await run_turn(rt, idle.session_id, "history")
    assert rec.text() == "history: 2 prompts"  # reloaded transparently on the new process


async def test_without_load_session_the_old_session_is_lost(
    make_runtime: Callable[..., AcpRuntime],
) -> None:
    rt = make_runtime(env={"SCRIPTED_AGENT_LOAD_SESSION": "0"})
    session = await rt.open_session("chat-1")
    await run_turn(rt, session.session_id, "crash 5")

    with pytest.raises(SessionLost):
        await rt.prompt(session.session_id, "say hi", Recorder())
    handle = await rt.open_session("chat-1", resume_session_id=session.session_id)
    assert handle.loaded is False
    assert handle.session_id != session.session_id
    rec = await run_turn(rt, handle.session_id, "say fresh")
    assert rec.text() == "fresh"


async def test_a_new_runtime_reloads_a_session_from_the_previous_one(
    make_runtime: Callable[..., AcpRuntime],
) -> None:
    first = make_runtime()
    session = await first.open_session("chat-1")
    await run_turn(first, session.session_id, "say one")
    await first.close()

    second = make_runtime()  # e.g. the bridge restarted; the agent keeps its state dir
    handle = await second.open_session("chat-1", resume_session_id=session.session_id)
    assert handle == type(handle)(session.session_id, loaded=True)
    rec = await run_turn(second, session.session_id, "history")
    assert rec.text() == "history: 2 prompts"


async def test_two_opens_of_one_conversation_at_once_load_its_session_once(
    make_runtime: Callable[..., AcpRuntime], caplog: pytest.LogCaptureFixture
) -> None:
    """A turn ended while its session was loading leaves that open running when the next
    turn opens the same session: the second waits for the first and finds it loaded. Two
    loads would replay the history twice, the second time into the turn begun meanwhile
    (simulator seed 12624: the replay shown as the answer, the answer lost)."""
    first = make_runtime()
    session = await first.open_session("chat-1")
    await run_turn(first, session.session_id, "say one")
    await first.close()

    second = make_runtime()
    caplog.set_level(logging.INFO, logger="bridge.runtime.acp")
    handles = await asyncio.gather(
        *(second.open_session("chat-1", resume_session_id=session.session_id) for _ in "ab")
    )
    assert handles == [type(handles[0])(session.session_id, loaded=True)] * 2
    loads = [r for r in caplog.records if r.getMessage().startswith("loaded session")]
    assert len(loads) == 1
    rec = await run_turn(second, session.session_id, "history")
    assert rec.text() == "history: 2 prompts"


async def test_resume_of_an_unknown_session_opens_a_new_one(runtime: AcpRuntime) -> None:
    handle = await runtime.open_session("chat-1", resume_session_id="sess-never-existed")
    assert handle.loaded is False
    assert handle.session_id != "sess-never-existed"


# --- start failures and the process limit -----------------------------------------------------


async def test_bad_command_is_runtime_unavailable(make_runtime: Callable[..., AcpRuntime]) -> None:
    rt = make_runtime(argv=["/nonexistent/agent-binary", "--acp"])
    with pytest.raises(RuntimeUnavailable, match="cannot run the agent command `agent-binary`"):
        await rt.start()
    with pytest.raises(RuntimeUnavailable):
        await rt.open_session("chat-1")
    assert rt.running_processes() == []


async def test_agent_failing_at_start_is_retried_with_bounded_backoff(
    make_runtime: Callable[..., AcpRuntime], caplog: pytest.LogCaptureFixture
) -> None:
    wait = CountingWait()
    rt = make_runtime(
        env={"SCRIPTED_AGENT_EXIT_ON_START": "2"}, restart_attempts=3, restart_wait=wait
    )
    with (
        caplog.at_level(logging.WARNING, logger="bridge.runtime"),
        pytest.raises(RuntimeUnavailable, match="did not start after 3 attempts") as raised,
    ):
        await rt.start()
    assert "code 2" in raised.value.reason
    failures = [r for r in caplog.records if "failed to start" in r.getMessage()]
    assert len(failures) == 3  # bounded: three attempts, then a clear error
    assert wait.calls >= 2  # the injected backoff was used between attempts
    assert all("configured to fail at start" in r.getMessage() for r in failures)
    assert not raised.value.limit_reached


async def test_sessions_spread_over_max_agents(make_runtime: Callable[..., AcpRuntime]) -> None:
    rt = make_runtime(max_agents=2)
    sessions = [await rt.open_session(f"chat-{i}") for i in range(3)]
    processes = rt.running_processes()
    assert len(processes) == 2
    assert sorted(len(p.sessions) for p in processes) == [1, 2]

    # One process serves two sessions at once; each turn sees only its own updates.
    shared = next(p for p in processes if len(p.sessions) == 2)
    a, b = sorted(shared.sessions)
    rec_a, rec_b = Recorder(), Recorder()
    await asyncio.gather(
        rt.prompt(a, "stream 20 1\nsay A", rec_a), rt.prompt(b, "stream 20 1\nsay B", rec_b)
    )
    assert rec_a.text().endswith("A")
    assert rec_b.text().endswith("B")
    assert all(e.session_id == a for e in rec_a.events)
    assert all(e.session_id == b for e in rec_b.events)
    assert len({s.session_id for s in sessions}) == 3


async def test_sessions_opened_at_once_spread_over_max_agents(
    make_runtime: Callable[..., AcpRuntime],
) -> None:
    # Twenty chats' first messages at the same moment: each open counts on its process
    # from the moment it is placed, so they do not all see the first process as empty.
    rt = make_runtime(max_agents=2)
    await rt.start()
    opened = await asyncio.gather(*(rt.open_session(f"chat-{i}") for i in range(20)))
    assert len({handle.session_id for handle in opened}) == 20
    assert sorted(len(p.sessions) for p in rt.running_processes()) == [10, 10]


async def test_a_full_pool_refuses_opens_made_at_the_same_moment(
    make_runtime: Callable[..., AcpRuntime],
) -> None:
    rt = make_runtime(max_agents=1, sessions_per_agent=2)
    await rt.start()
    opens = (rt.open_session(f"chat-{i}") for i in range(5))
    results = await asyncio.wait_for(asyncio.gather(*opens, return_exceptions=True), 10)
    refused = [r for r in results if isinstance(r, RuntimeUnavailable)]
    assert len(refused) == 3
    assert all(r.limit_reached for r in refused)
    assert [len(p.sessions) for p in rt.running_processes()] == [2]


async def test_full_pool_is_a_clear_error_not_a_hang(
    make_runtime: Callable[..., AcpRuntime],
) -> None:
    rt = make_runtime(max_agents=1, sessions_per_agent=1)
    await rt.open_session("chat-1")
    with pytest.raises(RuntimeUnavailable) as raised:
        await asyncio.wait_for(rt.open_session("chat-2"), 5)
    assert raised.value.limit_reached is True
    # /new in the same conversation replaces its session, so it is not blocked by itself.
    replacement = await rt.open_session("chat-1")
    assert replacement.loaded is False


async def test_close_ends_running_turns(make_runtime: Callable[..., AcpRuntime]) -> None:
    rt = make_runtime()
    session = await rt.open_session("chat-1")
    rec = Recorder()
    task = asyncio.create_task(rt.prompt(session.session_id, "say go\nhang", rec))
    await rec.wait_for(MessageChunk)
    await rt.close()
    await asyncio.wait_for(task, 10)
    assert rec.terminal() == RuntimeExited(session.session_id, restarting=False)
    with pytest.raises(RuntimeUnavailable):
        await rt.open_session("chat-2")


async def test_declared_capabilities_are_honest() -> None:
    plain = client_capabilities(elicitation=False)
    assert plain.fs is not None
    assert (plain.fs.read_text_file, plain.fs.write_text_file, plain.terminal) == (
        False,
        False,
        False,
    )
    assert plain.elicitation is None
    asking = client_capabilities(elicitation=True)
    assert asking.elicitation is not None
    assert asking.elicitation.form is not None


async def test_built_from_settings(tmp_path: Path) -> None:
    settings = Settings(
        bridge_agent_command=f"{sys.executable} -m bridge.devtools.scripted_agent",
        bridge_workdir=tmp_path,
        bridge_max_agents=3,
        bridge_elicitation=True,
    )
    rt = AcpRuntime.from_settings(settings, clock=LoopClock(), env=agent_env(tmp_path / "state"))
    try:
        assert len(rt.snapshot()["agents"]) == 3
        session = await rt.open_session("chat-1")
        rec = Recorder()
        task = asyncio.create_task(rt.prompt(session.session_id, "ask Sure? yes|no", rec))
        asked = await rec.wait_for(QuestionAsked)
        assert asked.kind is QuestionKind.ELICITATION  # bridge_elicitation was declared
        await rt.answer_question(asked.request_id, {"choice": "yes"})
        await asyncio.wait_for(task, 10)
        assert rec.text() == "answer: yes"
    finally:
        await rt.close()


# An agent that writes COUNT chunks, each flushed into the pipe, then dies unanswered.
_DIES_AFTER_WRITING = r"""
import json, os, sys
os.close(2)  # its stderr ends at once: the exit is not held back by the stderr's tail
def out(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        out({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": 1}})
    elif method == "session/new":
        out({"jsonrpc": "2.0", "id": ident, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        for index in range(COUNT):
            text = {"type": "text", "text": f"c{index} "}
            update = {"sessionUpdate": "agent_message_chunk", "content": text}
            params = {"sessionId": "s1", "update": update}
            out({"jsonrpc": "2.0", "method": "session/update", "params": params})
        os._exit(7)
"""


async def test_what_an_agent_wrote_before_it_crashed_reaches_the_turn(
    make_runtime: Callable[..., AcpRuntime], tmp_path: Path
) -> None:
    script = tmp_path / "dies.py"
    script.write_text(_DIES_AFTER_WRITING.replace("COUNT", "2000"))
    runtime = make_runtime(max_agents=1, argv=[sys.executable, str(script)])
    await runtime.start()
    session = await runtime.open_session("chat-1")
    rec = await run_turn(runtime, session.session_id, "go")
    assert rec.terminal() == RuntimeExited(session.session_id, returncode=7, restarting=True)
    assert rec.text() == "".join(f"c{i} " for i in range(2000))
