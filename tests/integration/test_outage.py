"""Issue 35: Feishu's message API goes away (503, then 429 with its reset header, then calls
that time out) while twenty chats talk. The bridge keeps every answer owed, probes instead
of retrying each post, and when the API is back every answer arrives once, in order per chat,
with no "still working" after it. Timings are scaled to milliseconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from bridge.devtools.emulator import FeishuEmulator
from bridge.i18n import Translator

from .stack import Stack, running_stack
from .test_cluster import emulator, spawn_instance, wait_healthy

T = Translator("zh_CN")
CHATS = 20
OUTAGE = [("429", 0.4), ("timeout", 0.4)]  # after the 503s
SETTINGS: dict[str, object] = {
    "bridge_first_hint_seconds": 0.1,
    "bridge_heartbeat_seconds": 0.2,
}
# The probes in milliseconds, the give-up window kept at its hour (no operator sets them).
PROBES = {"delivery_first_probe_seconds": 0.05, "delivery_max_probe_seconds": 0.2}
WORKING = (T("presence.running_hint"), T("presence.heartbeat").split("{")[0])


async def _talk_through_an_outage(stack: Stack) -> list[str]:
    """Twenty chats talk while the API answers 503; once every chat's first answer has been
    refused, 429s with a reset header, then calls that time out, then it is back."""
    chats = [stack.emu.open_chat("p2p", user_open_id=f"ou_user_{n}") for n in range(CHATS)]
    stack.emu.set_api_outage("503")
    for n, chat in enumerate(chats):
        await stack.emu.send_user_message(f"sleep 150\nsay first {n}", chat_id=chat)
        await stack.emu.send_user_message(f"say second {n}", chat_id=chat)
    await stack.emu.wait_for(lambda: len(_answer_tries(stack.emu)) >= CHATS, timeout=30.0)
    stack.emu.set_api_outage(OUTAGE, hold_seconds=0.2, reset_seconds=0)
    return chats


def _answers(stack: Stack, chat: str) -> list[str]:
    return [t for t in stack.texts(chat) if t.startswith(("first", "second"))]


async def test_every_answer_arrives_once_in_order_after_the_api_comes_back(tmp_path: Path) -> None:
    async with running_stack(tmp_path, settings=SETTINGS, tuning=PROBES) as stack:
        chats = await _talk_through_an_outage(stack)
        await stack.emu.wait_for(
            lambda: all(len(_answers(stack, c)) >= 2 for c in chats), timeout=30.0
        )
        await stack.settled(within=30.0)
        for n, chat in enumerate(chats):
            texts = stack.texts(chat)
            assert _answers(stack, chat) == [f"first {n}", f"second {n}"], texts
            # No "still working" about a message once its answer is there.
            for bot in stack.bot(chat):
                answer = bot.text or ""
                if not answer.startswith(("first", "second")):
                    continue
                later = stack.bot(chat)[stack.bot(chat).index(bot) + 1 :]
                stale = [m.text for m in later if m.parent_id == bot.parent_id]
                assert not [t for t in stale if (t or "").startswith(WORKING)], texts
        refused = stack.emu.refused_calls()
        assert refused, "the outage refused nothing: the test did not test it"
        seconds = refused[-1].at - refused[0].at
        # The acks of 40 messages are tried once each; a post that finds the API down tries
        # once (the client's own retries aside) and then waits for a probe.
        tries = len([c for c in refused if "/reactions" not in c.path])
        attempts = 4  # the client's own tries of one call
        assert tries <= attempts * (2 * CHATS + seconds / 0.05 + 5), (tries, seconds)
        status = await _status(stack)
        assert status["feishu_api"] == {**status["feishu_api"], "down": 0.0}
        assert status["feishu_api"]["probes"] >= 1


async def _status(stack: Stack) -> dict[str, Any]:
    async with httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(f"{stack.ops_url}/status")
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


async def test_a_post_given_up_after_the_window_is_told_to_its_chat(tmp_path: Path) -> None:
    # The probes follow the 0.3 s window: the first after 5 ms, then at most every 75 ms.
    settings = {**SETTINGS, "bridge_delivery_give_up_seconds": 0.3}
    async with running_stack(tmp_path, settings=settings) as stack:
        stack.emu.set_api_outage("503")
        await stack.say("say lost")
        await stack.emu.wait_for(lambda: _answer_tries(stack.emu), timeout=15.0)
        stack.emu.set_api_outage([("503", 2.0)])  # well past the 0.3 s window, then back
        await stack.wait_text(lambda t: t == T("delivery.given_up"), within=15.0)
        await stack.settled()
        assert "lost" not in stack.texts()
        assert stack.texts().count(T("delivery.given_up")) == 1
        await stack.say("say next")  # nothing else owed: the chat goes on
        await stack.wait_text(lambda t: t == "next")


async def test_a_bridge_killed_during_the_outage_delivers_what_it_owed_after_it(
    tmp_path: Path,
) -> None:
    """SIGKILL mid-outage, start again once the API is back: the answers the dead process
    owed go out (once, in order), and the messages it had taken but not run are run."""
    extra = {f"BRIDGE_{k[len('bridge_') :].upper()}": str(v) for k, v in SETTINGS.items()}
    state = tmp_path / "agent-state"
    async with emulator() as emu:
        first, port, _ = spawn_instance(emu, None, "one", tmp_path, 5.0, state, **extra)
        try:
            await wait_healthy(port, first)
            emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"
            chats = [emu.open_chat("p2p", user_open_id=f"ou_user_{n}") for n in range(CHATS)]
            emu.set_api_outage("503")
            for n, chat in enumerate(chats):
                await emu.send_user_message(f"say first {n}", chat_id=chat)
                await emu.send_user_message(f"say second {n}", chat_id=chat)
            # Every chat's first answer has been tried (and refused): owed in the store.
            await emu.wait_for(lambda: len(_answer_tries(emu)) >= CHATS, timeout=30.0)
        finally:
            first.kill()
            first.wait()
        emu.set_api_outage("up")
        again, port, _ = spawn_instance(emu, None, "one", tmp_path, 5.0, state, **extra)
        try:
            await wait_healthy(port, again)
            emu.webhook_url = f"http://127.0.0.1:{port}/feishu/events"

            def answers(chat: str) -> list[str]:
                shown = [m.text or "" for m in emu.bot_messages(chat)]
                return [t for t in shown if t.startswith(("first", "second"))]

            await emu.wait_for(lambda: all(len(answers(c)) >= 2 for c in chats), timeout=60.0)
            for n, chat in enumerate(chats):
                assert answers(chat) == [f"first {n}", f"second {n}"]
                shown = [m.text or "" for m in emu.bot_messages(chat)]
                assert T("presence.unrecoverable") not in shown, shown  # nothing was lost
        finally:
            again.kill()
            again.wait()


def _answer_tries(emu: FeishuEmulator) -> list[object]:
    return [c for c in emu.refused_calls() if c.path.endswith("/reply") and c.method == "POST"]
