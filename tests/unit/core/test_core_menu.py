"""The bot menu in the core: which command an event_key names, and a click handled as the
command typed in the private chat, except that it has no message: no ack, nothing journaled
to mark done, and what answers it is a new message (`terms.reply` False), not a reply."""

from __future__ import annotations

import pytest

from bridge.core.effects import (
    AskStatus,
    CancelTurn,
    MarkMessageDone,
    NewSession,
    PostText,
    React,
)
from bridge.core.inputs import AccessRefused, Command, CommandName, StatusAnswered
from bridge.core.menu import first_contact_key, menu_command
from bridge.core.state import Conversation, ExecState
from bridge.runtime.events import SessionFacts
from tests.unit.core.core_driver import ALICE, SID, Driver, of_type

CHAT = "oc_p2p"


@pytest.mark.parametrize(
    ("event_key", "expected"),
    [
        ("stop", (CommandName.STOP, "")),
        ("Cancel", (CommandName.STOP, "")),
        ("/stop", (CommandName.STOP, "")),
        ("new", (CommandName.NEW, "")),
        ("new_session", (CommandName.NEW, "")),
        ("New-Session", (CommandName.NEW, "")),
        ("reset", (CommandName.NEW, "")),
        (" status ", (CommandName.STATUS, "")),
        ("HELP", (CommandName.HELP, "")),
        ("agent", (CommandName.AGENT, "")),
        ("agent:codex", (CommandName.AGENT, "codex")),
        ("/agent codex", (CommandName.AGENT, "codex")),
        ("project", (CommandName.PROJECT, "")),
        ("project:docs", (CommandName.PROJECT, "docs")),
        ("cd app", (CommandName.CD, "app")),
        ("status:verbose", (CommandName.STATUS, "")),  # only the switches take an argument
        ("frobnicate", None),
        ("mode", None),  # the menu drives only the commands it names
        ("send:/etc/passwd", None),
        ("/", None),
    ],
)
def test_an_event_key_names_its_command_leniently(
    event_key: str, expected: tuple[CommandName, str] | None
) -> None:
    assert menu_command(event_key) == expected


def test_a_chat_never_seen_opens_with_a_greeting_or_the_refusal() -> None:
    assert first_contact_key(admitted=True) == "menu.first_contact"
    assert first_contact_key(admitted=False) == "access.refused"


def click(name: CommandName, cid: str = "ev_1", raw: str = "", arg: str = "") -> Command:
    return Command(name, cid, ALICE, raw=raw or name.value, arg=arg, menu=True)


def is_reply(line: PostText) -> bool:
    """Whether the line goes as a reply (its terms, set by the core), else a new message."""
    assert line.terms is not None
    assert line.terms.chat == CHAT
    return line.terms.reply


def driver() -> Driver:
    return Driver(Conversation(key=CHAT))


def test_a_status_click_is_answered_by_a_new_message_without_an_ack() -> None:
    d = driver()
    asked = d.feed(click(CommandName.STATUS))
    assert asked == [AskStatus("ev_1", None)]  # no React, no MarkMessageDone
    out = d.feed(StatusAnswered("ev_1", SessionFacts("claude", "/srv/app")))
    (line,) = of_type(out, PostText)
    assert (line.key, line.reply_to, line.idempotency_key) == (
        "command.status",
        "ev_1",
        "ev_1:status",
    )
    assert not is_reply(line)  # there is no message to reply to


def test_a_typed_command_is_still_a_reply_with_its_ack() -> None:
    d = driver()
    out = d.feed(Command(CommandName.HELP, "om_1", ALICE, "/help"))
    assert out[:1] == [React("om_1")]
    (line,) = of_type(out, PostText)
    assert is_reply(line)
    assert MarkMessageDone("om_1") in out


def test_a_stop_click_stops_the_running_round_as_stop_typed_would() -> None:
    d = driver()
    d.start()
    out = d.feed(click(CommandName.STOP))
    turn = d.conv.turn
    assert turn is not None
    assert of_type(out, CancelTurn) == [CancelTurn(turn.turn_id, SID)]
    assert d.conv.state is ExecState.CANCELLING
    assert not of_type(out, React)
    assert not of_type(out, MarkMessageDone)
    idle = driver().feed(click(CommandName.STOP, "ev_2"))
    (line,) = of_type(idle, PostText)
    assert line.key == "command.stop_idle"
    assert not is_reply(line)


def test_a_new_click_drops_the_session_and_says_so() -> None:
    d = driver()
    out = d.feed(click(CommandName.NEW, raw="new_session"))
    assert NewSession() in out
    (line,) = of_type(out, PostText)
    assert line.key == "command.new_session"
    assert not is_reply(line)


def test_an_unknown_key_is_answered_politely_and_never_reaches_the_agent() -> None:
    d = Driver(Conversation(key=CHAT, agent_commands=("compact",)))
    out = d.feed(click(CommandName.UNKNOWN, raw="compact"))
    (line,) = of_type(out, PostText)
    assert (line.key, line.params) == ("menu.unknown", {"item": "compact"})
    assert not is_reply(line)
    assert d.conv.turn is None  # not the agent's /compact


def test_a_strangers_click_gets_the_same_refusal_as_a_new_message() -> None:
    d = driver()
    out = d.feed(AccessRefused("ev_9", menu=True))
    assert out == [PostText("access.refused", {}, "ev_9", "ev_9:refused")]
    (line,) = of_type(out, PostText)
    assert not is_reply(line)
    typed = driver().feed(AccessRefused("om_9"))
    (line,) = of_type(typed, PostText)
    assert is_reply(line)
