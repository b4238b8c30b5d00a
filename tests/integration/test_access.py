"""Who can reach the agent and who can approve, over the real stack: an agent open to
everyone only when said so, the one start-up line saying who can do what, and four eyes
(the requester may not approve their own agent's request; the toast names who can)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from bridge.config.checks import UnsafeConfiguration, describe_access
from tests.integration.stack import running_stack
from tests.integration.test_waiting_for_user import (
    ALLOW_ONCE,
    T,
    ask_approval,
    assert_answered_in_time,
    button,
    buttons,
    only_card,
    wait_line,
)

BOSS = "ou_the_approver"
FOUR_EYES = {"bridge_requester_may_approve": False, "bridge_approvers": BOSS}


async def test_an_agent_open_to_everyone_is_refused_unless_said_so(tmp_path: Path) -> None:
    with pytest.raises(UnsafeConfiguration) as refused:
        async with running_stack(tmp_path / "bridge", settings={"bridge_allow_all": False}):
            pass
    assert [(p.variable, p.code) for p in refused.value.problems] == [
        ("BRIDGE_ALLOWED_USERS", "nobody_allowed")
    ]


async def test_four_eyes_without_approvers_is_refused(tmp_path: Path) -> None:
    settings = {"bridge_requester_may_approve": False}
    with pytest.raises(UnsafeConfiguration) as refused:
        async with running_stack(tmp_path / "bridge", settings=settings):
            pass
    assert [p.variable for p in refused.value.problems] == ["BRIDGE_APPROVERS"]


async def test_start_up_says_in_one_line_who_can_reach_the_agent_and_who_can_approve(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.service")
    settings = {**FOUR_EYES, "bridge_allowed_users": "ou_alice,ou_bob", "bridge_ops_token": "tk"}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        expected = describe_access(stack.demo.service.settings)
    lines = [r.getMessage() for r in caplog.records if r.name == "bridge.service"]
    assert [line for line in lines if line.startswith("access:")] == [expected]
    assert expected == (
        "access: who can reach the agent: users=2 [ou_alice, ou_bob] chats=any; "
        f"who can approve: not the requester, approvers=1 [{BOSS}]"
    )


async def test_the_requester_cannot_approve_and_is_told_who_can(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge", settings=FOUR_EYES) as stack:
        _, card = await ask_approval(stack)
        # The card's own note does not tell the requester they may choose.
        assert T("card.approval.who_may_approvers") in json.dumps(card.card, ensure_ascii=False)
        assert T("card.approval.who_may") not in json.dumps(card.card, ensure_ascii=False)

        own = await stack.emu.click_card(card.message_id, button(card, ALLOW_ONCE))

        assert_answered_in_time(own)
        assert own.toast is not None
        assert (own.toast.type, own.toast.content) == (
            "warning",
            T("card.approvers_only", approvers=BOSS),
        )
        assert not own.card_replaced
        assert buttons(only_card(stack)) != []  # still open, still waiting

        boss = await stack.emu.click_card(
            card.message_id, button(card, ALLOW_ONCE), operator_open_id=BOSS
        )

        assert_answered_in_time(boss)
        assert boss.toast is not None
        assert boss.toast.content == T("card.click.recorded")
        await wait_line(stack, "done")
