"""What the user sees while a turn runs and when it ends, end to end (the behaviours that
read the same in both presence styles run in both).

Bridge in webhook mode + emulator + the scripted ACP agent as a real subprocess; every
assertion is on the chat as the emulator recorded it (texts, order, count, reactions).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bridge.feishu.text import MESSAGE_BYTES, encoded_size
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack

t = Translator("zh_CN")
HINT = t("presence.running_hint")


@pytest.fixture(params=["messages", "card"])
async def styled(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stack]:
    """For the behaviours that must read the same in both presence styles: fast turns (no
    card in card style), ends, queueing, commands, splitting."""
    settings = {"bridge_presence_style": request.param}
    async with running_stack(tmp_path / "bridge", settings=settings) as running:
        yield running


def user_messages(stack: Stack) -> list[str]:
    return [m.message_id for m in stack.emu.messages(stack.chat, sender_type="user")]


# 1. ack ---------------------------------------------------------------------------------------


async def test_exactly_one_ack_before_any_text_and_no_received_text(stack: Stack) -> None:
    sent = await stack.say("tool Read README.md\nsay summary")
    await stack.wait_text(lambda x: x == "summary")
    await stack.settled()
    assert stack.reactions(sent.message_id) == ["OnIt"]
    posts = [c for c in stack.emu.calls(path_prefix="/open-apis/im/v1/messages/", method="POST")]
    assert posts[0].path.endswith("/reactions")
    assert all(not c.path.endswith("/reactions") for c in posts[1:])
    assert t("presence.received") not in stack.texts()


async def test_received_text_is_posted_after_the_reaction_when_turned_on(tmp_path: Path) -> None:
    async with running_stack(tmp_path, settings={"bridge_received_text": True}) as stack:
        sent = await stack.say("hello")
        await stack.wait_text(lambda x: x == "echo: hello")
        await stack.settled()
        assert stack.texts() == [t("presence.received"), "echo: hello"]
        assert stack.reactions(sent.message_id) == ["OnIt"]


# 2. the early running hint --------------------------------------------------------------------


async def test_slow_turn_gets_exactly_one_early_hint(tmp_path: Path) -> None:
    settings = {"bridge_first_hint_seconds": 0.15, "bridge_heartbeat_seconds": 30.0}
    async with running_stack(tmp_path, settings=settings) as stack:
        await stack.say("sleep 700\nsay done")
        await stack.wait_text(lambda x: x == "done")
        await stack.settled()
        assert stack.texts() == [HINT, "done"]


async def test_turn_answering_before_the_delay_gets_no_hint(tmp_path: Path) -> None:
    async with running_stack(tmp_path, settings={"bridge_first_hint_seconds": 2.0}) as stack:
        await stack.say("hello")
        await stack.wait_text(lambda x: x == "echo: hello")
        await stack.settled()
        assert stack.texts() == ["echo: hello"]


# 3. real progress and heartbeats --------------------------------------------------------------


async def test_real_progress_is_relayed_and_no_generic_hint_is_needed(tmp_path: Path) -> None:
    settings = {"bridge_first_hint_seconds": 0.5}  # progress lines unspaced (FAST_TUNING)
    async with running_stack(tmp_path, settings=settings) as stack:
        await stack.say("say Let me look.\ntool Read README.md\nsay It is a bridge.")
        await stack.wait_text(lambda x: x == "It is a bridge.")
        await stack.settled()
        assert stack.texts() == [
            "Let me look.",  # commentary before the tool call
            t("progress.tool", title="Read README.md"),
            "It is a bridge.",  # the final reply is the end signal
        ]


async def test_progress_is_throttled(tmp_path: Path) -> None:
    async with running_stack(tmp_path, tuning={"progress_interval_seconds": 5.0}) as stack:
        script = "\n".join(f"tool Step {i}" for i in range(6)) + "\nsay finished"
        await stack.say(script)
        await stack.wait_text(lambda x: x == "finished")
        await stack.settled()
        tool_lines = [x for x in stack.texts() if x.startswith(t("progress.tool", title=""))]
        assert len(tool_lines) == 1  # six tool titles inside one interval: one line
        assert stack.texts()[-1] == "finished"


async def test_long_silent_turn_gets_periodic_heartbeats_saying_how_long(tmp_path: Path) -> None:
    settings = {"bridge_first_hint_seconds": 0.1, "bridge_heartbeat_seconds": 0.25}
    async with running_stack(tmp_path, settings=settings) as stack:
        await stack.say("sleep 1100\nsay done")
        await stack.wait_text(lambda x: x == "done")
        await stack.settled()
        texts = stack.texts()
        assert texts[0] == HINT
        assert texts[-1] == "done"
        beats = texts[1:-1]
        assert 2 <= len(beats) <= 4
        for beat in beats:
            assert "正在处理" in beat
            assert "已运行" in beat


async def test_progress_postpones_the_heartbeat(tmp_path: Path) -> None:
    # Eight steps 250 ms apart outlast two heartbeat intervals; each step's line is silence
    # broken well inside one. The first step comes at once, well inside the hint delay (a
    # slow machine may take a few hundred ms to start the agent).
    settings = {
        "bridge_first_hint_seconds": 1.0,
        "bridge_heartbeat_seconds": 0.9,
    }
    async with running_stack(tmp_path, settings=settings) as stack:
        steps = "\n".join(f"tool Step {i}\nsleep 250" for i in range(8))
        await stack.say(f"{steps}\nsay done")
        await stack.wait_text(lambda x: x == "done")
        await stack.settled()
        assert not [x for x in stack.texts() if "已运行" in x]
        assert HINT not in stack.texts()


# 8. endings -----------------------------------------------------------------------------------


async def test_final_reply_is_the_end_signal_with_no_extra_line(styled: Stack) -> None:
    await styled.say("say All done.")
    await styled.wait_text(lambda x: x == "All done.")
    await styled.settled()
    assert styled.texts() == ["All done."]


async def test_turn_with_nothing_visible_gets_the_ended_line_once(styled: Stack) -> None:
    await styled.say("silent")
    await styled.wait_text(lambda x: x == t("presence.ended_empty"))
    await styled.settled()
    assert styled.texts() == [t("presence.ended_empty")]


async def test_non_final_stop_reasons_get_their_own_line(styled: Stack) -> None:
    for reason in ("max_tokens", "max_turn_requests", "refusal"):
        await styled.say(f"stop {reason}")
        await styled.wait_text(lambda x, r=reason: x == t(f"presence.{r}"))
        await styled.settled()
    assert styled.texts() == [
        t("presence.max_tokens"),
        t("presence.max_turn_requests"),
        t("presence.refusal"),
    ]


async def test_unsupported_message_type_gets_a_polite_reply_and_no_turn(
    styled: Stack,
) -> None:
    sent = await styled.say(
        "", message_type="sticker", content={"file_key": "file_v2_0123456789abcdef"}
    )
    await styled.wait_text(lambda x: x == t("message.unsupported"))
    await styled.settled()
    assert styled.texts() == [t("message.unsupported")]
    assert styled.reactions(sent.message_id) == ["OnIt"]
    state = await styled.runtime_state()
    assert (state["state"], state["turn_id"]) == ("idle", None)


# 9. queue and commands ------------------------------------------------------------------------


async def test_message_during_a_turn_is_queued_then_runs_and_stop_cancels(
    styled: Stack,
) -> None:
    first = await styled.say("hang")
    await styled.emu.wait_for(lambda: styled.reactions(first.message_id) == ["OnIt"])
    second = await styled.say("hello")
    await styled.wait_text(lambda x: x == t("presence.queued", position=1))
    assert styled.reactions(second.message_id) == ["OnIt"]

    await styled.say("/stop")
    await styled.wait_text(lambda x: x == "echo: hello")
    await styled.settled()
    assert styled.texts() == [
        t("presence.queued", position=1),
        t("presence.stopped"),
        "echo: hello",
    ]
    for message_id in user_messages(styled):
        assert styled.reactions(message_id) == ["OnIt"]


async def test_help_status_new_and_unknown_commands(styled: Stack) -> None:
    await styled.say("/help")
    await styled.wait_texts(1)
    await styled.say("/status")
    await styled.wait_texts(2)
    await styled.say("/frobnicate now")
    await styled.wait_texts(3)
    await styled.say("/new")
    await styled.wait_texts(4)
    await styled.settled()
    texts = styled.texts()
    assert [texts[0], texts[2], texts[3]] == [
        t("command.help"),
        t("command.unknown", command="/frobnicate"),
        t("command.new_session"),
    ]
    assert texts[1].splitlines()[0] == t("status.idle")
    # None of them reached the agent: no turn was ever started.
    assert await styled.demo.service.store.running_turns() == []


async def test_status_during_a_turn_shows_state_elapsed_and_queue(stack: Stack) -> None:
    await stack.say("tool Run tests\nhang")
    await stack.wait_text(lambda x: x == t("progress.tool", title="Run tests"))
    await stack.say("next please")
    await stack.wait_text(lambda x: x == t("presence.queued", position=1))
    await stack.say("/status")
    status = await stack.wait_text(lambda x: x.startswith("正在处理：已运行"))
    assert "Run tests" in status
    assert "排队 1 条" in status

    async with httpx.AsyncClient(trust_env=False) as http:
        url = f"{stack.ops_url}/runtime-states"
        first = (await http.get(url)).json()
        conv = first["conversations"][stack.chat]
        assert conv["state"] == "streaming"
        assert conv["queue_length"] == 1
        assert conv["turn_id"]
        assert conv["started_at"] > 0
        assert conv["pending_approval"] is None
        await stack.say("/stop")
        await stack.wait_text(lambda x: x == "echo: next please")
        await stack.settled()
        second = (await http.get(url)).json()
    assert second["projection_epoch"] == first["projection_epoch"]
    assert second["revision"] > first["revision"]
    assert second["conversations"][stack.chat]["state"] == "idle"


async def test_a_long_answer_goes_out_a_message_at_a_time_while_it_streams(
    tmp_path: Path,
) -> None:
    """Lines style: each message's worth is in the chat while the agent still writes (here
    it hangs until stopped), and the stop shows only what was left: the answer once."""
    paragraphs = [f"Paragraph {i}. " + " ".join(["word"] * 2300) for i in range(5)]  # 11,500 chars
    script = "\n".join(f"md {p}\\n\\n" for p in paragraphs) + "\nhang"
    async with running_stack(tmp_path, settings={"bridge_first_hint_seconds": 30.0}) as stack:
        await stack.say(script)
        await stack.wait_text(lambda x: x.startswith("Paragraph 2."))
        assert stack.texts() == [
            f"{paragraphs[0]}\n\n{paragraphs[1]}",
            f"{paragraphs[2]}\n\n{paragraphs[3]}",
        ]
        await stack.say("/stop")
        await stack.wait_text(lambda x: x == t("presence.stopped"))
        await stack.settled()
        assert stack.texts()[2:] == [paragraphs[4], t("presence.stopped")]


async def test_an_oversize_reply_is_split_in_order_and_nothing_is_lost(styled: Stack) -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(2400))  # about 72,000 chars
    sent = await styled.say(f"say {text}")
    await styled.wait_text(lambda x: x.endswith("Sentence number 2399 is here."))
    await styled.settled()
    parts = styled.texts()
    assert len(parts) == 3
    assert all(encoded_size(p) <= MESSAGE_BYTES for p in parts)
    assert "".join(parts) == text  # split at sentence ends, never truncated
    uuids = [
        c.body["uuid"]
        for c in styled.emu.calls(path_prefix=f"/open-apis/im/v1/messages/{sent.message_id}/reply")
    ]
    assert uuids[1:] == [f"{uuids[0]}-2", f"{uuids[0]}-3"]
