""" "Waiting for the user" over the real stack (emulator + bridge in webhook mode + scripted
ACP agent subprocess).

Approval requests and questions pause the round: the user sees the card (or question) and
an explicit pause line, their click or next message resumes the same turn, an unanswered
request is reminded once and then expires with a clear line, and nothing claims the
assistant is working while it waits for the user. Every assertion is on what the emulator
recorded: the chat as the user sees it, card JSON (as posted and as replaced/patched),
card-callback answers, and Feishu calls with their order and count. Texts are compared with
the rendered zh_CN catalog, never re-typed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.devtools.emulator.records import CardCallbackResult, ChatMessage
from bridge.i18n import Translator, load_catalog
from tests.integration.stack import Stack, running_stack

T = Translator("zh_CN")

APPROVAL_PROMPT = "permission Delete build/"
QUESTION_PROMPT = "ask Which env? staging|production"
# The scripted agent's permission options, in the order it offers them (its names).
# Buttons are labelled in the user's language by what they do, not by the agent's wording.
ALLOW_ONCE = T("card.approval.option.allow_once")
ALLOW_ALWAYS = T("card.approval.option.allow_always")
REJECT = T("card.approval.option.reject_once")
REJECT_ALWAYS = T("card.approval.option.reject_always")
PERMISSION_BUTTONS = [ALLOW_ONCE, ALLOW_ALWAYS, REJECT, REJECT_ALWAYS]
OTHER_USER = "ou_someone_else_entirely"
APPROVER = "ou_configured_approver"
WAIT = 10.0  # an upper bound for event waits; tests finish in well under it
FEISHU_CALLBACK_LIMIT_MS = 3000.0

APPROVAL_CARD = f"[card] {T('card.approval.header')}"
QUESTION_CARD = f"[card] {T('card.question.header')}"
PAUSE_APPROVAL = T("presence.waiting_approval")
PAUSE_REPLY = T("presence.waiting_reply")
RUNNING_HINT = T("presence.running_hint")
ASKS = T("card.approval.asks", title="Delete build/")


# --- helpers (local to this file) ----------------------------------------------------------


def like(key: str) -> Callable[[str], bool]:
    """A predicate matching the catalog text of `key` with any value for its parameters."""
    template = load_catalog("zh_CN")[key]
    pattern = re.escape(template)
    pattern = re.sub(r"\\\{\w+\\\}", ".+?", pattern)
    compiled = re.compile(f"^{pattern}$")
    return lambda text: compiled.match(text) is not None


def running_line(text: str) -> bool:
    """The running hint or a heartbeat: the two "still working" lines."""
    return text == RUNNING_HINT or like("presence.heartbeat")(text)


def mention(open_id: str) -> str:
    """Feishu's lark_md mention of a user, as a card names who decided."""
    return f"<at id={open_id}></at>"


async def wait_until(stack: Stack, predicate: Callable[[list[str]], bool]) -> list[str]:
    """Until the user's view of the chat satisfies `predicate`; returns that view."""

    def check() -> list[str] | None:
        texts = stack.texts()
        return texts if predicate(texts) else None

    result: list[str] = await stack.emu.wait_for(check, timeout=WAIT)
    return result


async def wait_line(stack: Stack, line: str | Callable[[str], bool]) -> list[str]:
    match = line if callable(line) else (lambda text: text == line)
    return await wait_until(stack, lambda texts: any(match(t) for t in texts))


def cards(stack: Stack) -> list[ChatMessage]:
    return [m for m in stack.bot() if m.msg_type == "interactive"]


def only_card(stack: Stack) -> ChatMessage:
    found = cards(stack)
    assert len(found) == 1, [m.card for m in found]
    return stack.emu.message(found[0].message_id)  # as currently shown (patched/replaced)


def buttons(card: ChatMessage) -> list[dict[str, Any]]:
    data = card.card or {}
    return [
        action
        for element in data.get("elements", [])
        if element.get("tag") == "action"
        for action in element.get("actions", [])
        if action.get("tag") == "button"
    ]


def labels(card: ChatMessage) -> list[str]:
    return [b["text"]["content"] for b in buttons(card)]


def button(card: ChatMessage, label: str) -> dict[str, Any]:
    found = next((b for b in buttons(card) if b["text"]["content"] == label), None)
    assert found is not None, f"no button {label!r} on the card; it has {labels(card)}"
    value: dict[str, Any] = found["value"]
    return value


def card_lines(card: ChatMessage) -> list[str]:
    """Every text on a card body (lark_md blocks and notes), in order."""
    data = card.card or {}
    shown: list[str] = []
    for element in data.get("elements", []):
        if element.get("tag") == "div":
            shown.append(element["text"]["content"])
        elif element.get("tag") == "note":
            shown.extend(e.get("content", "") for e in element.get("elements", []))
    return shown


def colour(card: ChatMessage) -> str:
    template: str = (card.card or {}).get("header", {}).get("template", "")
    return template


def card_patches(stack: Stack, message_id: str) -> int:
    return len(
        stack.emu.calls(path_prefix=f"/open-apis/im/v1/messages/{message_id}", method="PATCH")
    )


def im_calls(stack: Stack) -> list[tuple[str, str]]:
    """(method, what) for every IM call, with message ids replaced by their role."""
    shown = []
    for call in stack.emu.calls(path_prefix="/open-apis/im/"):
        kind = call.path.rsplit("/", 1)[-1]
        if call.method == "POST" and kind == "reply":
            body = call.body or {}
            content = call.json_content() or {}
            if body.get("msg_type") == "interactive":
                title = content.get("header", {}).get("title", {}).get("content", "")
                shown.append(("reply", f"[card] {title}"))
            else:
                shown.append(("reply", content.get("text", "")))
        elif call.method == "POST" and kind == "reactions":
            shown.append(("react", (call.body or {}).get("reaction_type", {}).get("emoji_type")))
        elif call.method == "PATCH":
            shown.append(("patch", "card"))
        else:
            shown.append((call.method, call.path))
    return shown


def assert_answered_in_time(result: CardCallbackResult) -> None:
    assert result.ok, result.error
    assert result.status == 200
    assert result.latency_ms < FEISHU_CALLBACK_LIMIT_MS


async def ask_approval(stack: Stack) -> tuple[str, ChatMessage]:
    sent = await stack.say(APPROVAL_PROMPT)
    await wait_line(stack, PAUSE_APPROVAL)
    return sent.message_id, only_card(stack)


async def ask_question(stack: Stack) -> tuple[str, ChatMessage]:
    sent = await stack.say(QUESTION_PROMPT)
    await wait_line(stack, PAUSE_REPLY)
    return sent.message_id, only_card(stack)


async def stop_while_waiting(
    stack: Stack, card: ChatMessage, cancelled_line: str, asked: str
) -> None:
    """`/stop` while the round waits for the user: the card closes, the stopped line ends it.

    (It also ends the round before teardown: the service's shutdown drain would otherwise
    wait its whole grace period for a turn that only a person can move.)"""
    shown = stack.texts()
    stop = await stack.say("/stop")
    await wait_line(stack, T("presence.stopped"))
    await stack.settled()
    assert stack.texts() == [*shown, T("presence.stopped")]
    closed = only_card(stack)
    assert buttons(closed) == []
    assert card_lines(closed)[-1] == cancelled_line
    assert card_patches(stack, card.message_id) == 1
    assert stack.reactions(asked) == ["OnIt"]
    assert stack.reactions(stop.message_id) == ["OnIt"]


def state(stack: Stack) -> str:
    (actor,) = stack.demo.service.engine.conversations.values()
    return str(actor.conv.state.value)


# --- 4. approvals --------------------------------------------------------------------------


async def test_permission_request_posts_an_approval_card_then_the_pause_line(
    stack: Stack,
) -> None:
    message_id, card = await ask_approval(stack)
    await stack.demo.service.engine.wait_idle()

    assert stack.texts() == [APPROVAL_CARD, PAUSE_APPROVAL]
    assert labels(card) == PERMISSION_BUTTONS
    assert [b["type"] for b in buttons(card)] == ["primary", "default", "danger", "danger"]
    values = [button(card, label) for label in PERMISSION_BUTTONS]
    assert {v["kind"] for v in values} == {"approval"}
    assert len({v["request_id"] for v in values}) == 1
    assert [v["choice"] for v in values] == [
        "allow-once",
        "allow-always",
        "reject-once",
        "reject-always",
    ]
    # What is asked, and who may answer.
    # What is asked (the command is the title: no duplicate detail block), who may answer.
    assert card_lines(card) == [ASKS, T("card.approval.who_may")]
    assert (card.card or {}).get("config", {}).get("update_multi") is True  # shared card
    # Ack first, then the card, then the pause line; all in reply to the user's message.
    assert im_calls(stack) == [
        ("react", "OnIt"),
        ("reply", APPROVAL_CARD),
        ("reply", PAUSE_APPROVAL),
    ]
    replies = stack.emu.calls(path_prefix=f"/open-apis/im/v1/messages/{message_id}/reply")
    assert len(replies) == 2
    assert state(stack) == "waiting_approval"

    await stop_while_waiting(stack, card, T("card.approval.cancelled"), message_id)


@pytest.mark.parametrize(
    ("label", "reply"),
    [(ALLOW_ONCE, "done"), (ALLOW_ALWAYS, "done"), (REJECT, "not done")],
)
async def test_requester_click_decides_updates_the_card_and_the_turn_continues(
    stack: Stack, label: str, reply: str
) -> None:
    message_id, card = await ask_approval(stack)

    result = await stack.emu.click_card(card.message_id, button(card, label))

    assert_answered_in_time(result)
    assert result.toast is not None
    assert result.toast.content == T("card.click.recorded")
    assert result.card_replaced
    await wait_line(stack, reply)
    await stack.settled()

    decided = only_card(stack)
    assert buttons(decided) == []  # nothing left to click
    assert card_lines(decided) == [
        ASKS,
        T("card.approval.decided", option=label, by=mention(stack.emu.default_user_open_id)),
    ]
    assert colour(decided) == ("red" if label == REJECT else "green")  # rejected reads as such
    # The callback's answer already replaced the card: no second update of it.
    assert card_patches(stack, card.message_id) == 0
    assert stack.texts() == [APPROVAL_CARD, PAUSE_APPROVAL, reply]
    assert stack.reactions(message_id) == ["OnIt"]
    assert len(stack.emu.card_callbacks()) == 1


async def test_click_by_someone_else_is_refused_with_a_toast_and_changes_nothing(
    stack: Stack,
) -> None:
    message_id, card = await ask_approval(stack)
    before = stack.emu.message(card.message_id).content
    calls_before = len(stack.emu.calls())

    refused = await stack.emu.click_card(
        card.message_id, button(card, ALLOW_ONCE), operator_open_id=OTHER_USER
    )

    assert_answered_in_time(refused)
    assert refused.toast is not None
    assert refused.toast.content == T("card.not_allowed")
    assert not refused.card_replaced
    await stack.demo.service.engine.wait_idle()
    assert stack.emu.message(card.message_id).content == before
    assert len(stack.emu.calls()) == calls_before  # no post, no patch, nothing sent
    assert stack.texts() == [APPROVAL_CARD, PAUSE_APPROVAL]
    assert state(stack) == "waiting_approval"

    # The request is still open for the requester.
    allowed = await stack.emu.click_card(card.message_id, button(card, ALLOW_ONCE))
    assert_answered_in_time(allowed)
    await wait_line(stack, "done")
    await stack.settled()
    assert stack.texts() == [APPROVAL_CARD, PAUSE_APPROVAL, "done"]
    assert card_lines(only_card(stack))[-1] == T(
        "card.approval.decided", option=ALLOW_ONCE, by=mention(stack.emu.default_user_open_id)
    )
    assert stack.reactions(message_id) == ["OnIt"]


async def test_a_configured_approver_may_decide_and_is_named_on_the_card(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "b", settings={"bridge_approvers": APPROVER}) as stack:
        _, card = await ask_approval(stack)

        result = await stack.emu.click_card(
            card.message_id, button(card, REJECT), operator_open_id=APPROVER
        )

        assert_answered_in_time(result)
        assert result.card_replaced
        await wait_line(stack, "not done")
        await stack.settled()
        assert card_lines(only_card(stack))[-1] == T(
            "card.approval.decided", option=REJECT, by=mention(APPROVER)
        )
        assert stack.texts() == [APPROVAL_CARD, PAUSE_APPROVAL, "not done"]


async def test_a_second_click_on_an_answered_card_gets_a_toast_and_changes_nothing(
    stack: Stack,
) -> None:
    _, card = await ask_approval(stack)
    first = await stack.emu.click_card(card.message_id, button(card, ALLOW_ONCE))
    assert_answered_in_time(first)
    await wait_line(stack, "done")
    await stack.settled()
    decided = stack.emu.message(card.message_id).content
    calls_before = len(stack.emu.calls())

    # A stale client still shows the buttons: the user clicks REJECT late.
    late = await stack.emu.click_card(card.message_id, button(card, REJECT))

    assert_answered_in_time(late)
    assert late.toast is not None
    assert late.toast.content == T("card.already_handled")
    assert not late.card_replaced
    await stack.settled()
    assert stack.emu.message(card.message_id).content == decided
    assert len(stack.emu.calls()) == calls_before
    assert stack.texts() == [APPROVAL_CARD, PAUSE_APPROVAL, "done"]


async def test_unanswered_approval_reminds_once_then_expires_and_tells_the_user(
    tmp_path: Path,
) -> None:
    settings: dict[str, object] = {"bridge_approval_timeout_seconds": 0.4}
    async with running_stack(tmp_path / "b", settings=settings) as stack:
        message_id, card = await ask_approval(stack)

        await wait_line(stack, like("presence.approval_timed_out"))
        await stack.settled()

        texts = stack.texts()
        assert texts[:2] == [APPROVAL_CARD, PAUSE_APPROVAL]
        assert like("presence.approval_reminder")(texts[2]), texts
        assert like("presence.approval_timed_out")(texts[3]), texts
        assert len(texts) == 4, texts  # one reminder, one end line; no "stopped", no reply
        # The card flipped to expired, once, without buttons.
        expired = only_card(stack)
        assert buttons(expired) == []
        assert card_lines(expired)[-1] == T("card.approval.expired")
        assert colour(expired) == "grey"
        assert card_patches(stack, card.message_id) == 1
        assert [kind for kind, _ in im_calls(stack)] == [
            "react",
            "reply",  # card
            "reply",  # pause line
            "reply",  # reminder
            "patch",  # card → expired (before the end line)
            "reply",  # timed out, turn cancelled
        ]
        assert stack.reactions(message_id) == ["OnIt"]

        # A click on the expired card is answered with a toast, never nothing.
        calls_before = len(stack.emu.calls())
        late = await stack.emu.click_card(card.message_id, button(card, ALLOW_ONCE))
        assert_answered_in_time(late)
        assert late.toast is not None
        assert late.toast.content == T("card.already_handled")
        assert not late.card_replaced
        await stack.settled()
        assert len(stack.emu.calls()) == calls_before
        assert stack.texts() == texts

        # The conversation is free again: the next message is a new turn.
        await stack.say("hello")
        await wait_line(stack, "echo: hello")
        await stack.settled()
        assert stack.texts() == [*texts, "echo: hello"]


async def test_a_message_sent_while_awaiting_approval_is_queued_and_runs_after(
    stack: Stack,
) -> None:
    first, card = await ask_approval(stack)

    queued = await stack.say("hello")
    queued_line = T("presence.queued_approval", position=1)
    await wait_line(stack, queued_line)
    assert state(stack) == "waiting_approval"

    result = await stack.emu.click_card(card.message_id, button(card, ALLOW_ONCE))
    assert_answered_in_time(result)
    await wait_line(stack, "echo: hello")
    await stack.settled()

    assert stack.texts() == [APPROVAL_CARD, PAUSE_APPROVAL, queued_line, "done", "echo: hello"]
    assert stack.reactions(first) == ["OnIt"]
    assert stack.reactions(queued.message_id) == ["OnIt"]


# --- 5. questions --------------------------------------------------------------------------


async def test_question_shows_the_text_options_as_buttons_and_the_pause_line(
    stack: Stack,
) -> None:
    asked, card = await ask_question(stack)
    await stack.demo.service.engine.wait_idle()

    assert stack.texts() == [QUESTION_CARD, PAUSE_REPLY]
    assert card_lines(card) == ["Which env?", T("card.question.how_to_answer")]
    assert labels(card) == ["staging", "production"]
    assert [button(card, label)["kind"] for label in labels(card)] == ["question", "question"]
    assert im_calls(stack) == [
        ("react", "OnIt"),
        ("reply", QUESTION_CARD),
        ("reply", PAUSE_REPLY),
    ]
    assert state(stack) == "waiting_reply"

    await stop_while_waiting(stack, card, T("card.question.cancelled"), asked)


async def test_the_next_message_is_the_answer_not_a_new_turn(stack: Stack) -> None:
    asked, card = await ask_question(stack)

    answer = await stack.say("staging")
    await wait_line(stack, "answer: staging")
    await stack.settled()

    assert stack.texts() == [QUESTION_CARD, PAUSE_REPLY, "answer: staging"]
    # One ack per user message; the answer is not echoed, queued or run as its own turn.
    assert stack.reactions(asked) == ["OnIt"]
    assert stack.reactions(answer.message_id) == ["OnIt"]
    answered = only_card(stack)
    assert buttons(answered) == []
    assert card_lines(answered) == [
        "Which env?",
        T("card.question.answered", answer="staging", by=mention(stack.emu.default_user_open_id)),
    ]
    assert card_patches(stack, card.message_id) == 1  # no callback here: the card is patched
    # Nothing was posted in reply to the answer itself.
    assert stack.emu.calls(path_prefix=f"/open-apis/im/v1/messages/{answer.message_id}/reply") == []
    # The agent saw exactly one prompt before this one: the answer was not a prompt.
    await stack.say("history")
    await wait_line(stack, "history: 2 prompts")


async def test_a_button_answers_the_question(stack: Stack) -> None:
    asked, card = await ask_question(stack)

    refused = await stack.emu.click_card(
        card.message_id, button(card, "production"), operator_open_id=OTHER_USER
    )
    assert_answered_in_time(refused)
    assert refused.toast is not None
    assert refused.toast.content == T("card.not_allowed")
    assert not refused.card_replaced
    assert state(stack) == "waiting_reply"

    result = await stack.emu.click_card(card.message_id, button(card, "production"))

    assert_answered_in_time(result)
    assert result.toast is not None
    assert result.toast.content == T("card.click.recorded")
    assert result.card_replaced
    await wait_line(stack, "answer: production")
    await stack.settled()
    answered = only_card(stack)
    assert card_lines(answered) == [
        "Which env?",
        T(
            "card.question.answered",
            answer="production",
            by=mention(stack.emu.default_user_open_id),
        ),
    ]
    assert card_patches(stack, card.message_id) == 0
    assert stack.texts() == [QUESTION_CARD, PAUSE_REPLY, "answer: production"]
    assert stack.reactions(asked) == ["OnIt"]

    late = await stack.emu.click_card(card.message_id, button(card, "staging"))
    assert_answered_in_time(late)
    assert late.toast is not None
    assert late.toast.content == T("card.already_handled")
    await stack.settled()
    assert stack.texts() == [QUESTION_CARD, PAUSE_REPLY, "answer: production"]


async def test_unanswered_question_reminds_once_then_expires_and_tells_the_user(
    tmp_path: Path,
) -> None:
    settings: dict[str, object] = {"bridge_approval_timeout_seconds": 0.4}
    async with running_stack(tmp_path / "b", settings=settings) as stack:
        asked, card = await ask_question(stack)

        await wait_line(stack, like("presence.reply_timed_out"))
        await stack.settled()

        texts = stack.texts()
        assert texts[:2] == [QUESTION_CARD, PAUSE_REPLY]
        assert like("presence.reply_reminder")(texts[2]), texts
        assert like("presence.reply_timed_out")(texts[3]), texts
        assert len(texts) == 4, texts
        expired = only_card(stack)
        assert buttons(expired) == []
        assert card_lines(expired)[-1] == T("card.question.expired")
        assert card_patches(stack, card.message_id) == 1
        assert stack.reactions(asked) == ["OnIt"]

        # After the timeout a message is a new turn, not a late answer.
        await stack.say("staging")
        await wait_line(stack, "echo: staging")
        await stack.settled()
        assert stack.texts() == [*texts, "echo: staging"]


# --- 6. no "still working" while waiting for the user -------------------------------------


@pytest.mark.parametrize(
    ("prompt", "pause", "reminder", "choice", "reply"),
    [
        (APPROVAL_PROMPT, PAUSE_APPROVAL, "presence.approval_reminder", ALLOW_ONCE, "done"),
        (QUESTION_PROMPT, PAUSE_REPLY, "presence.reply_reminder", "staging", "answer: staging"),
    ],
    ids=["approval", "question"],
)
async def test_no_hint_or_heartbeat_while_waiting_for_the_user(
    tmp_path: Path, prompt: str, pause: str, reminder: str, choice: str, reply: str
) -> None:
    settings: dict[str, object] = {
        "bridge_first_hint_seconds": 0.02,
        "bridge_heartbeat_seconds": 0.03,
        "bridge_approval_timeout_seconds": 0.6,  # the reminder comes at 0.3 s: 10 heartbeats
    }
    async with running_stack(tmp_path / "b", settings=settings) as stack:
        await stack.say(prompt)
        # Time passes by waiting for the reminder at half the timeout, not by sleeping.
        await wait_line(stack, like(reminder))
        await stack.demo.service.engine.wait_idle()
        before_click = stack.texts()

        paused_at = before_click.index(pause)
        # A hint before the card is fine (the assistant was working then); after the pause
        # line, the only line is the reminder.
        assert all(not running_line(t) for t in before_click[paused_at:]), before_click
        assert before_click[paused_at + 1 :] == [next(t for t in before_click if like(reminder)(t))]
        assert all(running_line(t) for t in before_click[: paused_at - 1]), before_click
        assert before_click[paused_at - 1].startswith("[card] ")

        card = only_card(stack)
        result = await stack.emu.click_card(card.message_id, button(card, choice))
        assert_answered_in_time(result)
        await wait_line(stack, reply)
        await stack.settled()
        after_click = stack.texts()[len(before_click) :]
        # Once answered the assistant works again (a heartbeat would be fair there, 30 ms
        # is short); the reply ends the round and nothing follows it.
        assert after_click[-1] == reply, after_click
        assert all(running_line(t) for t in after_click[:-1]), after_click
        assert stack.texts()[: len(before_click)] == before_click
