"""What the agents of the simulated world do: each prompt's plan, drawn from the seed
(silences, text chunks, tool calls, approvals, a crash, a cancel honoured late or never),
and what the agents saw (`PromptRecord`, `Ask`). The agent that plays the plans behind the
real ACP runtime is `acp_agent.py`."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from bridge.runtime.events import (
    PermissionKind,
    PermissionOption,
)

OPTIONS = (
    PermissionOption("allow", "Allow", PermissionKind.ALLOW_ONCE),
    PermissionOption("reject", "Reject", PermissionKind.REJECT_ONCE),
)


@dataclass(frozen=True)
class Step:
    after: float  # seconds of silence before it
    kind: str  # chunk | tool | permission | crash | end
    text: str = ""


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    cancel_delay: float | None  # None: the agent never honours a cancel

    @property
    def first_silence(self) -> float:
        return self.steps[0].after


_PAUSES = (0.05, 0.3, 1.0, 2.5, 5.0)


def answer_for(prompt: str) -> str:
    return f"answer to {prompt}"


def _said(kind: str, prompt: str, index: int) -> str:
    """A step's text. One chunk in eight is long: two paragraphs past a message's worth,
    which lines style posts a part at a time as it streams (bridge/core/long_answer.py).
    Which one is drawn from the prompt, not from the seed's stream: every world keeps the
    draws it had."""
    text = f"{kind} of {prompt}"
    if kind != "chunk" or zlib.crc32(f"{prompt}#{index}".encode()) % 8:
        return text
    filler = " lorem" * 640
    return f"{text}{filler}\n\n{text} goes on{filler}\n\n"


def draw_plan(rng: random.Random, prompt: str, *, streams: bool = False) -> Plan:
    """`streams`: a long turn of text, tool calls and approvals in quick succession (a
    crowd's: its live card is asked to change every moment)."""
    steps: list[Step] = []
    count, pauses = ((8, 16), (0.05, 0.3, 0.6, 1.0)) if streams else ((0, 4), _PAUSES)
    kinds = ("chunk", "tool") * (3 if streams else 2) + ("permission",)
    for index in range(rng.randint(*count)):
        kind = rng.choice(kinds)
        steps.append(Step(rng.choice(pauses), kind, _said(kind, prompt, index)))
    if rng.random() < 0.05:  # the agent process dies mid-turn
        steps.append(Step(rng.choice((0.1, 1.0, 3.0)), "crash"))
    steps.append(Step(rng.choice((0.1, 0.5, 1.0, 3.0)), "chunk", answer_for(prompt)))
    steps.append(Step(rng.choice((0.0, 0.05)), "end"))
    cancel = None if rng.random() < 0.15 else rng.choice((0.0, 0.2, 2.0, 6.0))
    return Plan(tuple(steps), cancel)


@dataclass
class PromptRecord:
    session_id: str
    text: str
    started: float  # when the agent read it
    ended: float | None = None
    cancelled_at: float | None = None
    handed: float | None = None  # when the bridge's runtime said it went out (PromptSent)


@dataclass
class Ask:
    """A permission the agent asked for, and the bridge's answer (None: refused unasked,
    cancelled or timed out)."""

    request_id: str
    prompt: str
    asked: float
    answered: float | None = None
    option: str | None = None
