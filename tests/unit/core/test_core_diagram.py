"""The Mermaid diagram beside the machine matches the code."""

from __future__ import annotations

import re
from pathlib import Path

from bridge.core.inputs import ConversationClosed
from bridge.core.machine import step
from bridge.core.state import ExecState
from tests.unit.core.core_chaos import ChaosRun
from tests.unit.core.core_driver import T

DIAGRAM = Path(__file__).resolve().parents[3] / "bridge" / "core" / "state_machine.mmd"
_EDGE = re.compile(r"^\s*(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)")


def drawn() -> tuple[set[tuple[str, str]], set[str]]:
    edges: set[tuple[str, str]] = set()
    inside_open: set[str] = set()
    depth_open = False
    for line in DIAGRAM.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("state Open"):
            depth_open = True
            continue
        if line.strip() == "}":
            depth_open = False
            continue
        match = _EDGE.match(line)
        if match:
            edges.add((match[1], match[2]))
            if depth_open:
                inside_open.update({match[1], match[2]})
    expanded = set()
    for src, dst in edges:
        for s in inside_open if src == "Open" else {src}:
            expanded.add((s, dst))
    return expanded, inside_open


def test_every_state_is_drawn() -> None:
    edges, _ = drawn()
    names = {name for edge in edges for name in edge}
    assert {s.name for s in ExecState} <= names


def test_every_transition_the_machine_makes_is_drawn(chaos_runs: list[ChaosRun]) -> None:
    edges, _ = drawn()
    made: set[tuple[str, str]] = set()
    for run in chaos_runs:
        for s in run.steps:
            if s.before.state is not s.after.state:
                made.add((s.before.state.name, s.after.state.name))
            # Closing can happen in any state; try it from each one reached.
            closed, _ = step(s.after, ConversationClosed(), s.now, T)
            if closed.state is not s.after.state:
                made.add((s.after.state.name, closed.state.name))
    missing = made - edges
    assert not missing, sorted(missing)
    # The random runs reach most of what is drawn; a drawn edge nobody makes is suspicious.
    unmade = edges - made - {("[*]", "IDLE"), ("CLOSED", "[*]")}
    assert len(unmade) <= 1, sorted(unmade)  # only the self-loop cannot show as a change
