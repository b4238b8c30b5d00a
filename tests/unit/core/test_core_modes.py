"""`/mode` in the core: it asks the engine, then chooses the line from what the agent said."""

from __future__ import annotations

from bridge.core.effects import AskConfig, AskModes, PostText, StartTurn
from bridge.core.inputs import (
    AgentCommands,
    Command,
    CommandName,
    ConfigAnswered,
    ModesAnswered,
)
from bridge.runtime.events import ConfigOption, ModeOption, SessionModes
from tests.unit.core.core_driver import ALICE, Driver, of_type

MODES = SessionModes("default", (ModeOption("default", "Default"), ModeOption("plan", "Plan")))
LISTED = "default — Default\nplan — Plan"


def mode(d: Driver, arg: str = "", sender: str = ALICE) -> list[object]:
    return list(d.feed(Command(CommandName.MODE, "c1", sender, "/mode", arg)))


def lines(effects: list[object]) -> list[tuple[str, dict[str, object]]]:
    return [(e.key, dict(e.params)) for e in of_type(effects, PostText)]


def test_mode_asks_for_the_modes_of_the_conversation_s_session() -> None:
    d = Driver()
    assert of_type(mode(d, "plan"), AskModes) == [AskModes("c1", None, "plan")]


def test_each_answer_has_its_line() -> None:
    d = Driver()
    cases = [
        (
            ModesAnswered("c1", MODES),
            ("command.mode_list", {"current": "default", "modes": LISTED}),
        ),
        (ModesAnswered("c1", MODES, "plan"), ("command.mode_set", {"mode": "plan"})),
        (
            ModesAnswered("c1", MODES, "turbo"),
            ("command.mode_unknown", {"mode": "turbo", "modes": LISTED}),
        ),
        (
            ModesAnswered("c1", MODES, "plan", "busy"),
            ("command.mode_failed", {"mode": "plan", "reason": "busy"}),
        ),
        (ModesAnswered("c1", None), ("command.mode_unsupported", {})),
        (ModesAnswered("c1", None, "plan", "no agent"), ("presence.runtime_unavailable", {})),
    ]
    for answer, line in cases:
        assert lines(d.feed(answer)) == [line]


def test_a_bystander_cannot_switch_someone_else_s_round() -> None:
    d = Driver()
    d.start()
    out = mode(d, "plan", sender="ou_bob")
    assert of_type(out, AskModes) == []
    assert lines(out) == [("command.mode_not_yours", {})]
    assert of_type(mode(d, "", sender="ou_bob"), AskModes)  # listing is anyone's


def test_model_and_config_lines() -> None:
    model = ConfigOption(
        "model",
        "Model",
        "model",
        "swift",
        (ModeOption("swift", "Swift"), ModeOption("deep", "Deep")),
    )
    effort = ConfigOption("effort", "Effort", "thought_level", "low", ())
    d = Driver()
    assert of_type(
        list(d.feed(Command(CommandName.MODEL, "c1", ALICE, "/model", "deep"))), AskConfig
    ) == [AskConfig("c1", None, "model", "deep")]
    models = "swift — Swift\ndeep — Deep"
    cases = [
        (ConfigAnswered("c1", "model", ()), ("command.model_unsupported", {})),
        (
            ConfigAnswered("c1", "model", (effort, model)),
            ("command.model_list", {"current": "swift", "models": models}),
        ),
        (ConfigAnswered("c1", "model", (model,), "deep"), ("command.model_set", {"model": "deep"})),
        (
            ConfigAnswered("c1", "model", (model,), "huge"),
            ("command.model_unknown", {"model": "huge", "models": models}),
        ),
        (ConfigAnswered("c1", "config", ()), ("command.config_none", {})),
        (
            ConfigAnswered("c1", "config", (model, effort)),
            ("command.config_list", {"options": "model — Model: swift\neffort — Effort: low"}),
        ),
    ]
    for answer, line in cases:
        assert lines(d.feed(answer)) == [line]


def test_an_agent_command_goes_to_the_agent_and_help_lists_it() -> None:
    d = Driver()
    d.feed(AgentCommands(("compact", "init"), "claude"))
    help_lines = lines(list(d.feed(Command(CommandName.HELP, "h1", ALICE, "/help"))))
    params = {"commands": "/compact  /init", "agent": "claude"}
    assert help_lines == [("command.help_agent", params)]
    out = list(d.feed(Command(CommandName.UNKNOWN, "c2", ALICE, "/compact", "now")))
    (start,) = of_type(out, StartTurn)
    assert start.text == "/compact now"
    out = list(d.feed(Command(CommandName.UNKNOWN, "c3", ALICE, "/frob")))
    assert of_type(out, StartTurn) == []
