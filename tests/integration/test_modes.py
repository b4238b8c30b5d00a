"""`/mode` over the real stack: the agent's ACP session modes listed with the current one,
a switch the agent really makes, an unknown mode, and the chosen mode set again after the
agent restarts (it comes back in its default)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.devtools.scripted_agent.language import MODELS, MODES
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack
from tests.integration.test_faults_and_restart import _crash_and_restart

T = Translator("zh_CN")
LISTED = "\n".join(f"{mode_id} — {name}" for mode_id, name in MODES)


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with running_stack(tmp_path / "bridge") as running:
        yield running


async def test_mode_lists_the_agents_modes_with_the_current_one(stack: Stack) -> None:
    await stack.say("/mode")
    text = await stack.wait_text(lambda t: t.startswith("当前模式"))
    assert text == T("command.mode_list", current="default", modes=LISTED)


async def test_a_switch_reaches_the_agent_and_an_unknown_mode_is_named(stack: Stack) -> None:
    await stack.say("/mode plan")
    await stack.wait_text(lambda t: t == T("command.mode_set", mode="plan"))
    await stack.say("mode")
    await stack.wait_text(lambda t: t == "mode: plan")
    await stack.say("/mode turbo")
    await stack.wait_text(lambda t: t == T("command.mode_unknown", mode="turbo", modes=LISTED))
    await stack.say("/mode")
    await stack.wait_text(lambda t: t == T("command.mode_list", current="plan", modes=LISTED))
    await stack.settled()


async def test_the_chosen_mode_is_set_again_after_the_agent_restarts(stack: Stack) -> None:
    await stack.say("/mode yolo")
    await stack.wait_text(lambda t: t == T("command.mode_set", mode="yolo"))
    await stack.say("crash")
    await stack.wait_text(lambda t: "请重发" in t)
    await stack.settled()
    await stack.say("mode")
    await stack.wait_text(lambda t: t == "mode: yolo")


MODELS_LISTED = "\n".join(f"{value} — {name}" for value, name in MODELS)


async def test_model_lists_switches_and_survives_an_agent_restart(stack: Stack) -> None:
    await stack.say("/model")
    await stack.wait_text(
        lambda t: t == T("command.model_list", current="swift", models=MODELS_LISTED)
    )
    await stack.say("/model deep")
    await stack.wait_text(lambda t: t == T("command.model_set", model="deep"))
    await stack.say("model")
    await stack.wait_text(lambda t: t == "model: deep")
    await stack.say("/model huge")
    await stack.wait_text(
        lambda t: t == T("command.model_unknown", model="huge", models=MODELS_LISTED)
    )
    await stack.say("/config")
    await stack.wait_text(lambda t: t == T("command.config_list", options="model — Model: deep"))
    await stack.say("crash")
    await stack.wait_text(lambda t: "请重发" in t)
    await stack.settled()
    await stack.say("model")
    await stack.wait_text(lambda t: t == "model: deep")


async def test_the_agents_own_commands_are_listed_and_passed_through(stack: Stack) -> None:
    await stack.say("say warm")  # the agent announces its commands with its session
    await stack.wait_text(lambda t: t == "warm")
    await stack.settled()
    # The announcement comes a moment after session/new, as real agents send it, and the
    # bridge learns it at a round's end: it may land after the first round has ended, so a
    # second round makes sure it is known.
    await stack.say("say again")
    await stack.wait_text(lambda t: t == "again")
    await stack.settled()
    engine = stack.demo.service.engine
    async with asyncio.timeout(15):
        while not engine.conversations[stack.chat].conv.agent_commands:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    await stack.say("/help")
    shown = await stack.wait_text(lambda t: t.startswith(T("command.help")))
    assert "/history" in shown
    assert "/stream" in shown
    await stack.say("/history")  # the agent's, not ours: it reaches the agent as typed
    await stack.wait_text(lambda t: t == "echo: /history")
    await stack.say("/mode")  # a clash: the bridge's own command wins
    await stack.wait_text(lambda t: t.startswith("当前模式"))
    await stack.say("/nonsense")
    await stack.wait_text(lambda t: t == T("command.unknown", command="/nonsense"))


async def test_the_choices_outlive_a_bridge_restart(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await stack.say("/mode plan")
        await stack.wait_text(lambda t: t == T("command.mode_set", mode="plan"))
        await stack.say("/model deep")
        await stack.wait_text(lambda t: t == T("command.model_set", model="deep"))
        await stack.settled()
        await _crash_and_restart(stack)  # a new bridge, and a new agent in its defaults
        await stack.say("mode")
        await stack.wait_text(lambda t: t == "mode: plan")
        await stack.say("model")
        await stack.wait_text(lambda t: t == "model: deep")
