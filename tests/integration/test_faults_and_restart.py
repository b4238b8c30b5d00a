"""Issue 7, 10, 11, 12: runtime faults, stalls, one terminal per turn, redelivery and restart.

The whole product on loopback (emulator + bridge in webhook mode + the scripted ACP agent as
a real subprocess). Every assertion is on what the emulator recorded — the chat as the user
sees it, the API calls in order — and on the bridge's journal.

Texts are compared with the rendered catalog (`Translator("zh_CN")`), never re-typed.

Timing: a scripted agent process takes about a second to start here (importing `acp.schema`
alone is ~1.2 s), so tests start it once, up front (`_warm`), and let short timers
(first hint, heartbeat, stale window) fall inside the windows they exercise.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from bridge.devtools.emulator.records import ApiCall, ChatMessage, DeliveredEvent
from bridge.i18n import Translator
from bridge.service import BridgeService, build_service
from bridge.store.port import ApprovalStatus, MessageState, TurnOutcome
from tests.integration.stack import FAST_TUNING, Stack, running_stack, unhurried_client

T = Translator("zh_CN")

RECOVERING = T("presence.recovering")
UNRECOVERABLE = T("presence.unrecoverable")
CONTEXT_LOST = T("presence.unrecoverable_context_lost")
UNAVAILABLE = T("presence.runtime_unavailable")
STOPPED = T("presence.stopped")
WAITING_APPROVAL = T("presence.waiting_approval")
RESUMED = T("recovery.resumed")
RUNNING = "正在处理"  # the running hint and the heartbeat both start with it
RESEND = "请重发上一条消息"

MESSAGES = "/open-apis/im/v1/messages/"


# -- helpers ---------------------------------------------------------------------------------


async def _warm(stack: Stack) -> None:
    """Start the agent process now, so a turn's timers do not race the agent's start-up."""
    await stack.demo.service.runtime.start()


def _posts(stack: Stack) -> list[ApiCall]:
    """Successful message posts (replies and sends), in order."""
    return [
        c
        for c in stack.emu.calls(path_prefix=MESSAGES, method="POST")
        if c.ok and "/reactions" not in c.path
    ]


def _assert_no_duplicate_posts(stack: Stack) -> None:
    """Hard rule 4, below the emulator's uuid dedup: each idempotency key posted once."""
    uuids = Counter(c.body.get("uuid") for c in _posts(stack))
    assert all(uuids), "every post carries a uuid"
    assert [u for u, n in uuids.items() if n > 1] == []
    lines = [(m.parent_id, m.text) for m in stack.bot() if m.msg_type == "text"]
    assert [line for line, n in Counter(lines).items() if n > 1] == []


def _replies_to(stack: Stack, message_id: str) -> list[str]:
    """What the bot posted in reply to one user message, as the user sees it."""
    return [
        t
        for m, t in zip(stack.bot(), stack.texts(), strict=True)
        if m.parent_id == message_id or m.root_id == message_id
    ]


def _after(texts: list[str], line: str) -> list[str]:
    return texts[texts.index(line) + 1 :]


def _card_message(stack: Stack) -> ChatMessage:
    cards = [m for m in stack.bot() if m.msg_type == "interactive"]
    assert len(cards) == 1, stack.texts()
    return stack.emu.message(cards[0].message_id)


def _card_texts(card: dict[str, Any]) -> str:
    return json.dumps(card, ensure_ascii=False)


def _buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        action["value"]
        for element in card.get("elements", [])
        if element.get("tag") == "action"
        for action in element.get("actions", [])
    ]


async def _turn_outcome(stack: Stack, message_id: str) -> TurnOutcome | None:
    turn = await stack.demo.service.store.turn(message_id)
    assert turn is not None, f"no turn journaled for {message_id}"
    return turn.outcome


async def _say_and_wait(stack: Stack, text: str, predicate: Any) -> DeliveredEvent:
    sent = await stack.say(text)
    await stack.wait_text(predicate)
    return sent


async def _crash_and_restart(stack: Stack) -> BridgeService:
    """The bridge dies mid-turn and comes back on the same data dir and the same emulator.

    The first service is stopped with no drain at all (its turn tasks are cancelled, nothing
    it decided afterwards can be posted: the performers are refused), which is what a crash
    leaves behind in the journal. The second one is built exactly as the demo builds it."""
    old = stack.demo.service
    old.drain_seconds = 0.0
    await old.stop()
    settings = old.settings
    env = {"SCRIPTED_AGENT_STATE_DIR": str(settings.store.bridge_data_dir / "agent-state")}
    client = unhurried_client(stack.emu)
    new = build_service(settings, feishu=client, runtime_env=env, tuning=FAST_TUNING)
    await new.start()
    stack.demo.service = new  # `running_stack` stops this one at the end
    stack.emu.webhook_url = f"http://127.0.0.1:{new.port}/feishu/events"
    return new


# -- 7. runtime faults -----------------------------------------------------------------------


async def test_crash_mid_turn_recovers_reloads_and_asks_to_resend(tmp_path: Any) -> None:
    # Short hint and heartbeat: a wrong "still working" line would fire while the agent
    # restarts (about a second here), which is the window this test watches.
    settings = {"bridge_first_hint_seconds": 0.3, "bridge_heartbeat_seconds": 0.3}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        await _warm(stack)
        first = await _say_and_wait(stack, "hello", lambda t: t == "echo: hello")
        await stack.settled()

        crash = await _say_and_wait(stack, "crash", lambda t: RESEND in t)
        await stack.settled()

        assert _replies_to(stack, crash.message_id) == [RECOVERING, UNRECOVERABLE]
        assert not [t for t in _after(stack.texts(), RECOVERING) if RUNNING in t]
        assert await _turn_outcome(stack, crash.message_id) is TurnOutcome.INTERRUPTED

        # The agent was restarted and the session reloaded: it has seen all three prompts.
        after = await _say_and_wait(stack, "history", lambda t: t.startswith("history:"))
        await stack.settled()
        assert _replies_to(stack, after.message_id) == ["history: 3 prompts"]
        assert await _turn_outcome(stack, after.message_id) is TurnOutcome.COMPLETED
        assert stack.texts() == ["echo: hello", RECOVERING, UNRECOVERABLE, "history: 3 prompts"]
        for sent in (first, crash, after):
            assert stack.reactions(sent.message_id) == ["OnIt"]
        _assert_no_duplicate_posts(stack)


async def test_crash_without_session_load_says_the_context_is_lost(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRIPTED_AGENT_LOAD_SESSION", "0")  # the agent inherits the env
    async with running_stack(tmp_path / "bridge") as stack:
        await _warm(stack)
        crash = await _say_and_wait(stack, "tool Build\ncrash", lambda t: RESEND in t)
        await stack.settled()
        assert _replies_to(stack, crash.message_id) == [
            T("progress.tool", title="Build"),
            RECOVERING,
            CONTEXT_LOST,
        ]
        assert await _turn_outcome(stack, crash.message_id) is TurnOutcome.INTERRUPTED

        # A fresh session on the restarted agent: it has seen only this prompt.
        after = await _say_and_wait(stack, "history", lambda t: t.startswith("history:"))
        await stack.settled()
        assert _replies_to(stack, after.message_id) == ["history: 1 prompts"]
        _assert_no_duplicate_posts(stack)


async def test_crash_while_waiting_for_approval_closes_the_card(tmp_path: Any) -> None:
    settings = {"bridge_heartbeat_seconds": 0.2, "bridge_approval_timeout_seconds": 1.2}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        await _warm(stack)
        sent = await _say_and_wait(
            stack, "crash-after 150\npermission Delete build/", lambda t: RESEND in t
        )
        await stack.settled()

        assert _replies_to(stack, sent.message_id) == [
            f"[card] {T('card.approval.header')}",
            WAITING_APPROVAL,
            RECOVERING,
            UNRECOVERABLE,
        ]
        card = _card_message(stack)
        assert card.updated, "the card was closed, not left with live buttons"
        assert _buttons(card.data) == []
        assert T("card.approval.cancelled") in _card_texts(card.data)
        patches = [c for c in stack.emu.calls(path_prefix=MESSAGES, method="PATCH") if c.ok]
        assert [c.path for c in patches] == [f"{MESSAGES}{card.message_id}"]
        assert await _turn_outcome(stack, sent.message_id) is TurnOutcome.INTERRUPTED
        _assert_no_duplicate_posts(stack)


async def test_crash_with_a_queued_message_runs_it_after_the_fault_line(tmp_path: Any) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await _warm(stack)
        crash = await stack.say("think planning\ncrash-after 300\nhang")
        await _wait_state(stack, _prompt_sent)
        queued_line = T("presence.queued", position=1)
        queued = await _say_and_wait(stack, "history", lambda t: t == queued_line)

        await stack.wait_text(lambda t: t.startswith("history:"))
        await stack.settled()
        assert stack.texts() == [queued_line, RECOVERING, UNRECOVERABLE, "history: 2 prompts"]
        assert _replies_to(stack, crash.message_id) == [RECOVERING, UNRECOVERABLE]
        assert await _turn_outcome(stack, crash.message_id) is TurnOutcome.INTERRUPTED
        assert await _turn_outcome(stack, queued.message_id) is TurnOutcome.COMPLETED
        _assert_no_duplicate_posts(stack)


async def test_agent_that_cannot_be_restarted_ends_the_turn_with_the_resend_line(
    tmp_path: Any,
) -> None:
    # The agent starts once; after the crash its install is "broken" (the marker exists),
    # so every restart attempt exits before `initialize`.
    marker = tmp_path / "broken"
    agent = shlex.join([sys.executable, "-m", "bridge.devtools.scripted_agent"])
    command = shlex.join(["sh", "-c", f"[ -e {shlex.quote(str(marker))} ] && exit 7; exec {agent}"])
    settings = {"bridge_first_hint_seconds": 0.2, "bridge_heartbeat_seconds": 0.2}
    async with running_stack(
        tmp_path / "bridge", settings=settings, agent_command=command
    ) as stack:
        await _warm(stack)
        marker.touch()
        sent = await _say_and_wait(stack, "crash", lambda t: t == UNRECOVERABLE)
        await stack.settled()
        # Recovering for as long as the restart attempts take, and not a word of "working".
        assert stack.texts() == [RECOVERING, UNRECOVERABLE]
        assert await _turn_outcome(stack, sent.message_id) is TurnOutcome.FAILED
        assert stack.demo.service.runtime.running_processes() == []
        _assert_no_duplicate_posts(stack)


async def test_missing_agent_program_gets_a_fault_line_and_never_a_running_hint(
    tmp_path: Any,
) -> None:
    settings = {"bridge_first_hint_seconds": 0.05, "bridge_heartbeat_seconds": 0.05}
    missing = str(tmp_path / "no-such-agent")
    async with running_stack(
        tmp_path / "bridge", settings=settings, agent_command=missing
    ) as stack:
        sent = await _say_and_wait(stack, "hello", lambda t: t == UNAVAILABLE)
        await stack.settled()
        assert stack.texts() == [UNAVAILABLE]
        assert stack.reactions(sent.message_id) == ["OnIt"]
        assert await _turn_outcome(stack, sent.message_id) is TurnOutcome.FAILED

        # Every message is told the same, once; the bridge itself stays up.
        again = await stack.say("again")
        await stack.wait_texts(2)
        await stack.settled()
        assert _replies_to(stack, again.message_id) == [UNAVAILABLE]
        assert not [t for t in stack.texts() if RUNNING in t]
        _assert_no_duplicate_posts(stack)


async def test_agent_that_exits_at_start_gets_a_fault_line_and_never_a_running_hint(
    tmp_path: Any,
) -> None:
    # What SCRIPTED_AGENT_EXIT_ON_START simulates (a broken install: the program runs and
    # exits before `initialize`), without paying the scripted agent's import three times.
    broken = shlex.join(
        [sys.executable, "-c", "import sys; sys.stderr.write('broken install\\n'); sys.exit(7)"]
    )
    settings = {"bridge_first_hint_seconds": 0.05, "bridge_heartbeat_seconds": 0.05}
    async with running_stack(tmp_path / "bridge", settings=settings, agent_command=broken) as stack:
        sent = await _say_and_wait(stack, "hello", lambda t: t == UNAVAILABLE)
        await stack.settled()
        assert stack.texts() == [UNAVAILABLE]
        assert stack.reactions(sent.message_id) == ["OnIt"]
        assert await _turn_outcome(stack, sent.message_id) is TurnOutcome.FAILED
        _assert_no_duplicate_posts(stack)


# -- 10. stall detection ---------------------------------------------------------------------


async def test_stall_is_reported_once_with_the_last_activity_and_stop_ends_it(
    tmp_path: Any,
) -> None:
    async with running_stack(tmp_path / "bridge", settings={"bridge_stale_seconds": 0.3}) as stack:
        await _warm(stack)
        # "silent for N s" floors the time since the tool's last update (0 s at a 0.3 s window,
        # more only if the loop is badly late).
        lines = {
            T("presence.stale", silent=T("time.seconds", n=n), activity="Run tests")
            for n in range(3)
        }
        sent = await _say_and_wait(stack, "tool Run tests\nhang", lambda t: t in lines)
        stale = stack.texts()[-1]
        await stack.demo.service.engine.wait_idle()
        assert stack.texts() == [T("progress.tool", title="Run tests"), stale]

        # Graded, never a silent kill: the turn is still open and the agent still on it.
        assert (await stack.runtime_state())["state"] == "stale"
        assert await _turn_outcome(stack, sent.message_id) is None
        assert stack.demo.service.runtime.running_processes()

        stop = await _say_and_wait(stack, "/stop", lambda t: t == STOPPED)
        await stack.settled()
        assert stack.texts() == [T("progress.tool", title="Run tests"), stale, STOPPED]
        assert _replies_to(stack, sent.message_id)[-1] == STOPPED
        assert stack.reactions(stop.message_id) == ["OnIt"]
        assert await _turn_outcome(stack, sent.message_id) is TurnOutcome.CANCELLED
        _assert_no_duplicate_posts(stack)


# -- 11. one terminal per turn ---------------------------------------------------------------


async def test_stop_during_hang_posts_one_stopped_line_and_records_one_outcome(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    sent = await stack.say("think planning\nhang")
    await _wait_state(stack, _prompt_sent)  # a thought chunk shows no text

    await stack.say("/stop")
    await stack.wait_texts(1)  # the stopped line, once the agent confirmed the cancel
    await stack.say("/stop")  # a second stop finds nothing running
    await stack.wait_texts(2)
    await stack.settled()

    assert stack.texts() == [STOPPED, T("command.stop_idle")]
    assert _replies_to(stack, sent.message_id) == [STOPPED]
    turn = await stack.demo.service.store.turn(sent.message_id)
    assert turn is not None
    assert turn.outcome is TurnOutcome.CANCELLED
    await stack.demo.service.engine.executor.traces.flush()  # timelines are written behind
    trace = await stack.demo.service.store.trace_for(sent.message_id)
    assert [e.kind for e in trace].count("terminal") == 1
    # The agent's own `cancelled` answer is what ended the round.
    assert [e.detail for e in trace if e.kind == "terminal"] == [
        "cancelled user_stop: stopped by user (agent said cancelled)"
    ]
    _assert_no_duplicate_posts(stack)


async def test_stray_updates_after_the_turn_post_nothing(stack: Stack) -> None:
    await _say_and_wait(stack, "idle 20\nsay all done", lambda t: t == "all done")
    await stack.settled()
    runtime = stack.demo.service.runtime
    session_id = (await stack.runtime_state())["session_id"]
    assert isinstance(session_id, str)

    # The burst (mode, commands, title, a stray "late" chunk) lands after the turn ended.
    await _poll(lambda: (runtime.session_info(session_id) or _NO_INFO).idle_updates >= 1)
    info = runtime.session_info(session_id)
    assert info is not None
    assert info.title == "Scripted"
    await stack.settled()
    assert stack.texts() == ["all done"]
    assert not [t for t in stack.texts() if "late" in t]

    # And the conversation is not left thinking a turn runs: the next message is a new turn.
    await _say_and_wait(stack, "hello", lambda t: t == "echo: hello")
    await stack.settled()
    assert stack.texts() == ["all done", "echo: hello"]
    _assert_no_duplicate_posts(stack)


# -- 12. redelivery and restart --------------------------------------------------------------


async def test_redelivery_mid_turn_starts_no_second_turn(stack: Stack) -> None:
    sent = await stack.say("hang")
    # Journaled before it was acknowledged: the 200 means the bridge has it on disk.
    assert sent.first_attempt is not None
    assert sent.first_attempt.status == 200
    journaled = await stack.demo.service.store.message(sent.message_id)
    assert journaled is not None
    assert journaled.text == "hang"
    await _wait_state(stack, _prompt_sent)

    again = await stack.emu.redeliver(sent.event_id)
    assert again.status == 200
    await stack.demo.service.engine.wait_idle()
    assert stack.texts() == []  # no second turn, and no "queued" line for a duplicate
    assert (await stack.runtime_state())["queue_length"] == 0
    assert stack.reactions(sent.message_id) == ["OnIt"]
    assert len(await stack.demo.service.store.running_turns()) == 1

    await stack.say("/stop")
    await stack.wait_text(lambda t: t == STOPPED)
    await stack.settled()
    assert stack.texts() == [STOPPED]
    _assert_no_duplicate_posts(stack)


async def test_bridge_restart_mid_turn_tells_the_user_expires_the_card_and_runs_the_queue(
    tmp_path: Any,
) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await _warm(stack)
        first = await _say_and_wait(
            stack, "permission Delete build/", lambda t: t == WAITING_APPROVAL
        )
        queued_line = T("presence.queued_approval", position=1)
        second = await _say_and_wait(stack, "history", lambda t: t == queued_line)
        await stack.demo.service.engine.wait_idle()
        card = _card_message(stack)
        before = stack.texts()
        assert before == [f"[card] {T('card.approval.header')}", WAITING_APPROVAL, queued_line]

        service = await _crash_and_restart(stack)

        await stack.wait_text(lambda t: t.startswith("history:"))
        await stack.settled()

        # The cut turn's user is told once; the queued message runs, with a notice, on a
        # session reloaded by the new agent (it has seen both prompts).
        assert stack.texts() == [*before, UNRECOVERABLE, RESUMED, "history: 2 prompts"]
        assert _replies_to(stack, first.message_id) == [*before[:2], UNRECOVERABLE]
        assert _replies_to(stack, second.message_id) == [
            queued_line,
            RESUMED,
            "history: 2 prompts",
        ]

        # The open approval card is PATCHed to an expired card, and says so.
        patches = [c for c in stack.emu.calls(path_prefix=MESSAGES, method="PATCH") if c.ok]
        assert [c.path for c in patches] == [f"{MESSAGES}{card.message_id}"]
        expired = stack.emu.message(card.message_id)
        assert expired.updated
        assert _buttons(expired.data) == []
        assert T("card.approval.expired_restart") in _card_texts(expired.data)

        store = service.store
        assert await _turn_outcome(stack, first.message_id) is TurnOutcome.INTERRUPTED
        assert await _turn_outcome(stack, second.message_id) is TurnOutcome.COMPLETED
        assert await store.running_turns() == []
        assert await store.open_approvals() == []
        approvals = [await store.approval(r["request_id"]) for r in _buttons(card.data)[:1]]
        assert approvals[0] is not None
        assert approvals[0].status is ApprovalStatus.EXPIRED
        for sent in (first, second):
            message = await store.message(sent.message_id)
            assert message is not None
            assert message.state is MessageState.DONE
            assert stack.reactions(sent.message_id) == ["OnIt"]  # no second ack after restart

        # A click on the old card is answered, and changes nothing.
        click = await stack.emu.click_card(card.message_id, _buttons(card.data)[0])
        assert click.ok
        assert click.toast is not None
        assert click.toast.content == T("card.already_handled")

        # Feishu redelivers the first message to the new process: nothing happens.
        again = await stack.emu.redeliver(first.event_id)
        assert again.status == 200
        await stack.settled()
        assert stack.texts() == [*before, UNRECOVERABLE, RESUMED, "history: 2 prompts"]
        _assert_no_duplicate_posts(stack)


async def test_restart_notice_never_says_starting_now_for_a_message_still_queued(
    tmp_path: Any,
) -> None:
    """Two messages queued behind a cut turn: each notice must be true when it is shown.
    The one that runs first may be told "starting now"; the one behind it is still waiting
    then, so it is either told so or gets its "starting now" when it does start."""
    async with running_stack(tmp_path / "bridge") as stack:
        await _warm(stack)
        await _say_and_wait(stack, "permission Delete build/", lambda t: t == WAITING_APPROVAL)
        second = await _say_and_wait(
            stack, "history", lambda t: t == T("presence.queued_approval", position=1)
        )
        third = await _say_and_wait(
            stack, "echo third", lambda t: t == T("presence.queued_approval", position=2)
        )
        await stack.demo.service.engine.wait_idle()
        await _crash_and_restart(stack)

        await stack.wait_text(lambda t: t == "echo: third")
        await stack.settled()
        texts = stack.texts()
        assert _replies_to(stack, second.message_id)[-2:] == [RESUMED, "history: 2 prompts"]
        assert _replies_to(stack, third.message_id)[-1] == "echo: third"
        if RESUMED in _replies_to(stack, third.message_id):
            shown_at = [
                i
                for i, (m, t) in enumerate(zip(stack.bot(), texts, strict=True))
                if t == RESUMED and m.parent_id == third.message_id
            ]
            assert shown_at[0] > texts.index("history: 2 prompts"), (
                f"the third message was told it starts now while the second still ran: {texts}"
            )
        _assert_no_duplicate_posts(stack)


async def test_expired_card_after_restart_reads_like_any_expired_card(tmp_path: Any) -> None:
    """A demanding user reading the flipped card must still see *what* had been asked, on a
    card styled as closed (grey, like a timed-out one), not a success-green one."""
    async with running_stack(tmp_path / "bridge") as stack:
        await _warm(stack)
        await _say_and_wait(stack, "permission Delete build/", lambda t: t == WAITING_APPROVAL)
        await stack.demo.service.engine.wait_idle()
        card = _card_message(stack)
        await _crash_and_restart(stack)
        await stack.wait_text(lambda t: t == UNRECOVERABLE)
        await stack.settled()

        expired = stack.emu.message(card.message_id).data
        shown = _card_texts(expired)
        problems = []
        if T("card.approval.expired_restart") not in shown:
            problems.append("does not say it expired with the restart")
        if T("card.approval.asks", title="Delete build/") not in shown:
            problems.append("no longer names what was asked")
        if "****" in shown:
            problems.append("shows an empty bold title `****`")
        if expired["header"]["template"] != "grey":
            problems.append(f"header is {expired['header']['template']!r}, not grey")
        assert problems == [], f"{problems}: {shown}"


# -- waiting helpers -------------------------------------------------------------------------


class _NoInfo:
    idle_updates = 0


_NO_INFO = _NoInfo()


def _prompt_sent(stack: Stack) -> bool:
    """The current turn's prompt reached the agent (its session is known)."""
    actor = stack.demo.service.engine.conversations.get(stack.chat)
    turn = actor.conv.turn if actor is not None else None
    return turn is not None and turn.session_id is not None


async def _wait_state(stack: Stack, predicate: Callable[[Stack], bool]) -> None:
    """Until `predicate(stack)` holds, re-checked on every runtime-state snapshot the bridge
    publishes (the feed behind `GET /events`; every input an actor takes publishes one)."""
    projection = stack.demo.service.projection
    sub = projection.subscribe()
    try:
        async with asyncio.timeout(10):
            while not predicate(stack):
                await sub.queue.get()
    finally:
        projection.unsubscribe(sub)


async def _poll(predicate: Callable[[], bool]) -> None:
    """For what the runtime absorbs without telling anyone (session updates outside a turn):
    no snapshot, no chat change, so re-checked every 5 ms."""
    async with asyncio.timeout(10):
        while not predicate():  # noqa: ASYNC110 - nothing to await: no event is raised
            await asyncio.sleep(0.005)


async def test_a_restarted_bridge_starts_with_the_minute_its_predecessor_spent(
    tmp_path: Any,
) -> None:
    """Feishu's minute outlives the process: the bridge records what its call budget spent,
    and the next one on the same data folder starts with it (not with a whole minute to
    spend, nor with none: it cannot know, and a first start has spent nothing)."""
    async with running_stack(tmp_path / "bridge") as stack:
        await _warm(stack)
        for n in range(3):
            await _say_and_wait(stack, f"sent {n}", lambda t, n=n: t == f"echo: sent {n}")
        await stack.settled()
        sends = len(_posts(stack))
        assert sends >= 3
        data = stack.demo.service.settings.store.bridge_data_dir
        service = await _crash_and_restart(stack)
        record = json.loads((data / "call-budget.json").read_text(encoding="utf-8"))
        assert record["closed"] is True  # its stop was clean: nothing unseen after it
        assert sum(count for _, count in record["apis"]["send"]) == sends
        assert len(service.engine.budget.spent()["send"]) == sends
