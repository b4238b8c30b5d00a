"""The cancel-tail table: which agents are restarted after a cancel, by the `agentInfo` they
report; and the table in docs/agents.md is the one in the code, in both languages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from acp.schema import Implementation

from bridge.runtime.acp.cancel_tails import CANCEL_TAIL_AGENTS, CancelTails, TailAgent

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
ROW = re.compile(r"^\| `(@?[\w./-]+)` \| `([^`]+)` \|", re.M)


def info(name: str, version: str) -> Implementation:
    return Implementation(name=name, version=version)


@pytest.mark.parametrize(
    ("name", "version", "restarted"),
    [
        ("@zed-industries/claude-agent-acp", "0.23.1", True),
        ("@zed-industries/claude-agent-acp", "0.24.0", True),
        ("@zed-industries/claude-agent-acp", "0.22.9", False),
        ("@agentclientprotocol/claude-agent-acp", "0.101.0", False),  # settles in place
        ("qwen-code", "0.24.4", False),
        ("@zed-industries/claude-agent-acp", "not a version", False),
    ],
)
def test_the_table_decides_by_name_and_version(name: str, version: str, restarted: bool) -> None:
    assert CancelTails().leaves_tail(info(name, version)) is restarted


def test_an_agent_that_reports_nothing_is_cancelled_in_place() -> None:
    assert not CancelTails().leaves_tail(None)


def test_a_tail_seen_is_remembered_for_that_version_only() -> None:
    tails = CancelTails(table=(TailAgent("other", ">=1"),))
    tails.saw_tail(info("gemini-cli", "0.61.0"))
    assert tails.leaves_tail(info("gemini-cli", "0.61.0"))
    assert not tails.leaves_tail(info("gemini-cli", "0.62.0"))
    assert not CancelTails().leaves_tail(info("gemini-cli", "0.61.0"))  # per runtime


def test_docs_list_the_table_in_both_languages() -> None:
    text = DOC.read_text(encoding="utf-8")
    zh, en = text.split('<a id="english"></a>', 1)
    code = [(row.name, row.versions) for row in CANCEL_TAIL_AGENTS]
    assert ROW.findall(zh) == code
    assert ROW.findall(en) == code
