"""The reaction that tells the state (issue 45), over the real stack: the emulator (which
takes only Feishu's emoji types, and removes a reaction only by its id and message), the
bridge in webhook mode and the scripted ACP agent as a subprocess.

Ten chats through hello, slow, approval (answered, and left pending), /stop and a crash:
each user message's reaction ends in the state of its round, one of the bot's reactions on
a message at a time, and every reply to a message goes out before its end reaction.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from bridge.devtools.emulator.records import ApiCall
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack

T = Translator("zh_CN")
ON: dict[str, object] = {"bridge_state_reactions": True}
WAIT = 20.0
MESSAGES = "/open-apis/im/v1/messages/"
RECEIVED, WAITING, DONE, STOPPED, FAULT = "OnIt", "Alarm", "DONE", "CrossMark", "ERROR"
ALLOW_ONCE = T("card.approval.option.allow_once")


def message_of(call: ApiCall) -> str:
    return call.path.removeprefix(MESSAGES).split("/", 1)[0]


def reaction_calls(stack: Stack) -> list[ApiCall]:
    return [c for c in stack.emu.calls(path_prefix=MESSAGES) if "/reactions" in c.path]


def never_two_at_once(stack: Stack) -> None:
    """Replays the reaction calls Feishu took, in order: never two on one message."""
    on: dict[str, set[str]] = defaultdict(set)
    for call in reaction_calls(stack):
        if call.status != 200:
            continue
        mid = message_of(call)
        if call.method == "POST":
            on[mid].add(call.response["data"]["reaction_id"])
        else:
            on[mid].discard(call.path.rsplit("/", 1)[1])
        assert len(on[mid]) <= 1, (mid, [c.path for c in reaction_calls(stack)])


def replies_before_the_end_reaction(stack: Stack, mid: str, emoji: str) -> None:
    """Every reply to the message (its answer or its end line) is taken before the reaction
    that says its round ended: the reaction never holds an answer."""
    calls = stack.emu.calls(path_prefix=MESSAGES + mid)
    replies = [c.seq for c in calls if c.method == "POST" and c.path.endswith("/reply")]
    ends = [
        c.seq
        for c in calls
        if c.method == "POST"
        and c.path.endswith("/reactions")
        and c.body == {"reaction_type": {"emoji_type": emoji}}
    ]
    assert replies, mid
    assert len(ends) == 1, (mid, emoji)
    assert max(replies) < ends[0], (mid, replies, ends)


async def settle_on(stack: Stack, want: dict[str, str]) -> None:
    """Until each message shows exactly its reaction (emulator changes wake the wait)."""

    def there() -> bool:
        return all(stack.reactions(mid) == [emoji] for mid, emoji in want.items())

    await stack.emu.wait_for(there, timeout=WAIT)
    await stack.demo.service.engine.wait_idle()  # nothing more is on its way


def approval_button(stack: Stack, chat: str) -> tuple[str, dict[str, Any]] | None:
    """The approval card in the chat and its allow-once button's value, once it is there."""
    for message in stack.bot(chat):
        shown = stack.emu.message(message.message_id)
        for element in (shown.card or {}).get("elements", []):
            for action in element.get("actions", []) if element.get("tag") == "action" else []:
                if action.get("text", {}).get("content") == ALLOW_ONCE:
                    return message.message_id, action["value"]
    return None


async def test_ten_chats_end_in_their_rounds_state_one_reaction_at_a_time(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path, settings=ON) as stack:

        async def say(n: int, text: str) -> str:
            sent = await stack.say(text, chat_id=f"oc_r{n}", sender_open_id=f"ou_r{n}")
            return str(sent.message_id)

        # The crash first, alone: the agent process it kills serves no other chat's round.
        crash = await say(9, "crash")
        await settle_on(stack, {crash: FAULT})

        want: dict[str, str] = {}
        for n in (0, 1):
            want[await say(n, "say hello")] = DONE
        for n in (2, 3):
            want[await say(n, "sleep 300\nsay a slow answer")] = DONE
        pending = await say(4, "permission Delete build/")
        approved = [await say(n, "permission Delete build/") for n in (5, 6)]
        stopped = [await say(n, "hang") for n in (7, 8)]
        # The approvals are asked: the requester allows two, leaves one waiting.
        await stack.emu.wait_for(lambda: stack.reactions(pending) == [WAITING], timeout=WAIT)
        for n, mid in zip((5, 6), approved, strict=True):
            card, value = await stack.emu.wait_for(
                lambda n=n: approval_button(stack, f"oc_r{n}"), WAIT
            )
            await stack.emu.wait_for(lambda mid=mid: stack.reactions(mid) == [WAITING], WAIT)
            await stack.emu.click_card(card, value, operator_open_id=f"ou_r{n}")
            want[mid] = DONE
        stops = [await say(n, "/stop") for n in (7, 8)]
        want |= dict.fromkeys(stopped, STOPPED) | {pending: WAITING, crash: FAULT}
        want |= dict.fromkeys(stops, RECEIVED)  # a command keeps its ack

        await settle_on(stack, want)
        never_two_at_once(stack)
        for mid, emoji in want.items():
            if emoji not in (WAITING, RECEIVED):
                replies_before_the_end_reaction(stack, mid, emoji)
        # Every change made by removing the one before: as many removes as changes.
        calls = [c for c in reaction_calls(stack) if c.status == 200]
        adds = [c for c in calls if c.method == "POST"]
        removes = [c for c in calls if c.method == "DELETE"]
        assert len(adds) - len(removes) == len(want)
        # What each round showed, in order (the approved ones waited, then went on).
        for mid in approved:
            shown = [c.body["reaction_type"]["emoji_type"] for c in adds if message_of(c) == mid]
            assert shown == [RECEIVED, WAITING, RECEIVED, DONE]


async def test_off_keeps_the_single_ack(tmp_path: Path) -> None:
    async with running_stack(tmp_path, settings={"bridge_state_reactions": False}) as stack:
        sent = await stack.say("say hello")
        await stack.settled()
        assert stack.reactions(sent.message_id) == [RECEIVED]
        assert [c.method for c in reaction_calls(stack)] == ["POST"]
