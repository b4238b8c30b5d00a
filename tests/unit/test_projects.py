"""Which project a conversation works on: its own choice (`/project`) while that project
exists, else the route of its topic thread, else of its chat, else its app's default."""

from __future__ import annotations

from pathlib import Path

from bridge.runtime.port import PROJECT_CHOICE
from bridge.runtime.router import Projects, Routes

BACKEND = Routes.of([("claude", ["claude-agent-acp"])], [("backend", Path("/srv/backend"))])
DOCS = Routes.of([("codex", ["codex-acp"])], [("docs", Path("/srv/docs"))])
PROJECTS = Projects(
    (("backend", BACKEND), ("docs", DOCS)),
    {("oc_docs", None): "docs", ("oc_backend", "omt_docs"): "docs", ("oc_gone", None): "gone"},
)


def test_the_default_is_the_first_project() -> None:
    assert PROJECTS.name("oc_other", {}) == "backend"
    assert PROJECTS.of("oc_other", {}) is BACKEND


def test_a_route_picks_the_chats_project_and_a_threads_route_wins_over_its_chats() -> None:
    assert PROJECTS.name("oc_docs", {}) == "docs"
    assert PROJECTS.name("oc_docs:omt_any", {}) == "docs"  # the chat's route, in a thread
    assert PROJECTS.name("oc_backend", {}) == "backend"
    assert PROJECTS.name("oc_backend:omt_docs", {}) == "docs"
    assert PROJECTS.name("oc_gone", {}) == "backend"  # a route to no project: the default


def test_the_conversations_choice_wins_while_its_project_exists() -> None:
    assert PROJECTS.name("oc_docs", {PROJECT_CHOICE: "backend"}) == "backend"
    assert PROJECTS.name("oc_other", {PROJECT_CHOICE: "docs"}) == "docs"
    assert PROJECTS.name("oc_docs", {PROJECT_CHOICE: "removed"}) == "docs"
    assert PROJECTS.name("oc_other", {PROJECT_CHOICE: ""}) == "backend"  # switched away: cleared


def test_a_single_routes_is_one_unnamed_project() -> None:
    one = Projects.single(BACKEND)
    assert one.names == ("",)
    assert one.of("oc_any", {PROJECT_CHOICE: "docs"}) is BACKEND
