"""`/agent`, `/cd`, `/sessions`, `/resume` and the usage footer in the core: who may move the
conversation and when, the session let go at once, and the line each answer gets."""

from __future__ import annotations

import pytest

from bridge.core.effects import AskSwitch, PostText, RelayAgentText, StartTurn
from bridge.core.inputs import Command, CommandName, SwitchAnswered, SwitchResult
from bridge.core.state import Conversation, Options
from bridge.core.text import Text
from bridge.runtime.events import MessageChunk, StopReason, TurnEnded, Usage, UsageReported
from tests.unit.core.core_driver import ALICE, SID, Driver, of_type

BOB = "ou_bob"


def command(d: Driver, name: CommandName, arg: str = "", sender: str = ALICE) -> list[object]:
    return list(d.feed(Command(name, "c1", sender, f"/{name.value}", arg)))


@pytest.mark.parametrize(
    ("name", "kind"),
    [(CommandName.AGENT, "agent"), (CommandName.CD, "cd"), (CommandName.RESUME, "resume")],
)
def test_a_move_when_idle_is_asked_for_and_lets_the_session_go(
    name: CommandName, kind: str
) -> None:
    d = Driver()
    d.start()
    d.feed(TurnEnded(SID, StopReason.END_TURN))
    assert d.conv.turn is None
    assert d.conv.session_id == SID
    out = command(d, name, "beta")
    assert of_type(out, AskSwitch) == [AskSwitch("c1", kind, "beta")]
    assert d.conv.session_id is None  # the next message opens a session where it moved
    d.message("m2")
    assert of_type(d.message("m3"), StartTurn) == []  # m2 runs, m3 queues behind it


def test_listing_is_anyone_s_and_keeps_the_session() -> None:
    d = Driver()
    d.start()
    for name in (CommandName.AGENT, CommandName.CD, CommandName.SESSIONS):
        out = command(d, name, sender=BOB)
        assert [a.choice for a in of_type(out, AskSwitch)] == [""]
    # /sessions never takes an argument as a choice
    assert of_type(command(d, CommandName.SESSIONS, "2"), AskSwitch) == [
        AskSwitch("c1", "resume", "")
    ]
    assert d.conv.session_id == SID


def test_a_move_during_a_round_is_refused_for_its_owner_and_a_bystander() -> None:
    d = Driver()
    d.start()
    for sender, key in ((ALICE, "command.switch_busy"), (BOB, "command.switch_not_yours")):
        out = command(d, CommandName.AGENT, "beta", sender=sender)
        assert of_type(out, AskSwitch) == []
        assert [p.key for p in of_type(out, PostText)] == [key]
    assert d.conv.session_id == SID


def test_each_answer_has_its_line() -> None:
    d = Driver()
    entries = ("alpha — claude-agent-acp", "beta — codex-acp")
    for result, key in [
        (SwitchResult.LISTED, "command.agent_listed"),
        (SwitchResult.SWITCHED, "command.agent_switched"),
        (SwitchResult.SAME, "command.agent_same"),
        (SwitchResult.UNKNOWN, "command.agent_unknown"),
    ]:
        out = d.feed(SwitchAnswered("c1", "agent", result, "alpha", entries, "beta", "beta"))
        assert of_type(out, PostText) == [
            PostText(
                key,
                {
                    "current": "alpha",
                    "choice": "beta",
                    "entries": "alpha — claude-agent-acp\nbeta — codex-acp",
                    "detail": "beta",
                },
                "c1",
                "c1:agent",
            )
        ]
    out = d.feed(SwitchAnswered("c1", "resume", SwitchResult.LISTED))
    assert [p.key for p in of_type(out, PostText)] == ["command.resume_none"]


def test_the_usage_footer_goes_under_the_last_message_only_when_configured() -> None:
    usage = Usage(12_345, 200_000, 0.42, "USD")
    for footer_on, expected in (
        (
            True,
            Text(
                "usage.footer_cost",
                {"used": "12.3k", "size": "200k", "percent": 6, "cost": "0.42 USD"},
            ),
        ),
        (False, None),
    ):
        d = Driver(Conversation(options=Options(usage_footer=footer_on)))
        d.start()
        d.feed(MessageChunk(SID, "done"))
        d.feed(UsageReported(SID, usage))
        out = d.feed(TurnEnded(SID, StopReason.END_TURN))
        assert [(r.text, r.footer) for r in of_type(out, RelayAgentText)] == [("done", expected)]
        assert d.conv.usage == usage
