"""The docs say only what the code does.

- every FEISHU_*/BRIDGE_* name in docs/, README.md and deploy/example.env is a real setting,
  and every setting is documented in docs/configuration.md, which is up to date with its
  generator (`scripts/gen_config_docs.py --check`);
- every relative link in docs/ and README.md points at a file that exists (and a #anchor
  at a heading of it);
- every `feishu-bridge <command> [--option]` written in them exists in the CLI;
- docs/architecture.md names every ExecState and draws the same state machine as
  bridge/core/state_machine.mmd;
- every Chinese text quoted in the zh user docs is a real text of translations/zh_CN.json,
  and the presence contract texts are quoted in both quickstarts;
- the user quickstarts use no internal terms.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from bridge.app import build_parser
from bridge.config import OLD_NAMES, env_fields
from bridge.config.retired import RETIRED
from bridge.core.state import ExecState

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
EXAMPLE_ENV = ROOT / "deploy" / "example.env"
GENERATOR = ROOT / "scripts" / "gen_config_docs.py"
DIAGRAM = ROOT / "bridge" / "core" / "state_machine.mmd"

SETTING_NAME = re.compile(r"\b(?:FEISHU|BRIDGE)_[A-Z_]+\b")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
COMMAND = re.compile(r"(?:^|(?<=[\s`\"'/]))feishu-bridge[ \t]+([a-z][a-z-]*)([^\n`|;&]*)", re.M)
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)")
CJK = re.compile(r"[\u3400-\u9fff]")
EDGE = re.compile(r"^\s*(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)\s*(?::\s*(.*?))?\s*$")

# The presence texts every user must be able to look up (DESIGN.md, "Presence").
CONTRACT_KEYS = (
    "presence.running_hint",
    "presence.waiting_approval",
    "presence.waiting_reply",
    "presence.recovering",
    "presence.unrecoverable",
    "presence.ended_empty",
)
ZH_USER_DOCS = ("user-quickstart.md", "approvals.md")


def doc_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))  # docs/operators/ too


def markdown_files() -> list[Path]:
    return [*doc_files(), README]


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def without_code(text: str) -> str:
    return INLINE_CODE.sub("", FENCE.sub("", text))


def code_parts(text: str) -> list[str]:
    """Fenced blocks and inline code spans: where commands are written."""
    fenced = [m.group(0) for m in FENCE.finditer(text)]
    inline = [m.group(2) for m in INLINE_CODE.finditer(FENCE.sub("", text))]
    return fenced + inline


def quoted(text: str) -> list[str]:
    """Inline code spans outside fenced blocks."""
    return [m.group(2).strip() for m in INLINE_CODE.finditer(FENCE.sub("", text))]


@cache
def catalog(locale: str) -> dict[str, str]:
    data: dict[str, str] = json.loads(read(ROOT / "translations" / f"{locale}.json"))
    return data


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces → hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for match in HEADING.finditer(FENCE.sub("", read(path))):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


# --- settings --------------------------------------------------------------------------------


FIELDS = set(env_fields())


@pytest.mark.parametrize(
    "path", [*markdown_files(), EXAMPLE_ENV], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_setting_named_exists(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} not written yet")
    # Retired settings are named in their table of configuration.md only.
    retired = set(RETIRED) if path == DOCS / "configuration.md" else set()
    unknown = sorted(set(SETTING_NAME.findall(read(path))) - FIELDS - set(OLD_NAMES) - retired)
    assert not unknown, f"{path.name} names settings Settings does not have: {unknown}"


def test_every_setting_is_documented() -> None:
    documented = set(SETTING_NAME.findall(read(DOCS / "configuration.md")))
    missing = sorted(FIELDS - documented)
    assert not missing, f"docs/configuration.md does not document {missing}"


def test_every_retired_setting_is_in_its_table() -> None:
    text = read(DOCS / "configuration.md")
    table = text[text.index("## Retired settings") :]
    missing = sorted(name for name in RETIRED if f"| `{name}` |" not in table)
    assert not missing, f"docs/configuration.md's retired settings do not list {missing}"


def test_configuration_page_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_configuration_page_shows_no_secret_default() -> None:
    text = read(DOCS / "configuration.md")
    for name, (_, _, field) in env_fields().items():
        if "SecretStr" in str(field.annotation):
            row = next(line for line in text.splitlines() if line.startswith(f"| `{name}`"))
            assert f"{name}=<secret>" in row


def test_generator_fails_check_on_a_stale_page(tmp_path: Path) -> None:
    sys.path.insert(0, str(GENERATOR.parent))
    try:
        import gen_config_docs
    finally:
        sys.path.remove(str(GENERATOR.parent))
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n", encoding="utf-8")
    original = gen_config_docs.OUTPUT
    gen_config_docs.OUTPUT = stale
    try:
        assert gen_config_docs.main(["--check"]) == 1
        stale.write_text(gen_config_docs.render(), encoding="utf-8")
        assert gen_config_docs.main(["--check"]) == 0
    finally:
        gen_config_docs.OUTPUT = original


# --- links -----------------------------------------------------------------------------------


def relative_links(path: Path) -> list[str]:
    links = LINK.findall(without_code(read(path)))
    return [link for link in links if not re.match(r"^[a-z][a-z0-9+.-]*:", link, re.I)]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for link in relative_links(path):
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{link} (no such heading)")
    assert not broken, f"{path.name}: {broken}"


def test_slug_follows_github() -> None:
    assert slug("English") == "english"
    assert slug("Symptoms / 症状") == "symptoms--症状"
    assert slug("4. Subscribe to the event and the card callback") == (
        "4-subscribe-to-the-event-and-the-card-callback"
    )


# --- CLI -------------------------------------------------------------------------------------


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("feishu-bridge has no subcommands")


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_written_exists(path: Path) -> None:
    commands = subcommands()
    wrong = []
    for part in code_parts(read(path)):
        for match in COMMAND.finditer(part):
            name, rest = match.group(1), re.sub(r"\"[^\"]*\"|'[^']*'", "", match.group(2))
            sub = commands.get(name)
            if sub is None:
                wrong.append(f"feishu-bridge {name}")
                continue
            known = {opt for action in sub._actions for opt in action.option_strings}
            unknown = set(OPTION.findall(rest)) - known
            wrong += [f"feishu-bridge {name} {opt}" for opt in sorted(unknown)]
    assert not wrong, f"{path.name} writes commands the CLI does not have: {wrong}"


# --- architecture ----------------------------------------------------------------------------


def edges(text: str) -> set[tuple[str, str, str]]:
    found = set()
    for line in text.splitlines():
        match = EDGE.match(line)
        if match:
            found.add((match[1], match[2], match[3] or ""))
    return found


def test_architecture_names_every_state() -> None:
    text = read(DOCS / "architecture.md")
    missing = [s.name for s in ExecState if not re.search(rf"\b{s.name}\b", text)]
    assert not missing, missing


def test_architecture_diagram_matches_the_code_diagram() -> None:
    text = read(DOCS / "architecture.md")
    block = next(m.group(0) for m in FENCE.finditer(text) if "stateDiagram-v2" in m.group(0))
    assert edges(block) == edges(read(DIAGRAM))


# --- user docs -------------------------------------------------------------------------------


def template_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{[a-z_]+\}", template)
    return re.compile(".+?".join(re.escape(p) for p in parts), re.S)


def is_catalog_text(span: str, texts: list[str]) -> bool:
    """A quoted span is a catalog text with its placeholders filled in; a long text may be
    shortened to a prefix ending in `…`."""
    if any(template_regex(t).fullmatch(span) for t in texts):
        return True
    if span.endswith("…"):
        head = span[:-1]
        return any(template_regex(t).match(head) and len(head) >= 6 for t in texts)
    return False


@pytest.mark.parametrize("name", ZH_USER_DOCS)
def test_zh_texts_quoted_exist(name: str) -> None:
    texts = list(catalog("zh_CN").values())
    spans = [s for s in quoted(read(DOCS / name)) if CJK.search(s)]
    assert spans, f"{name} quotes no text"
    unknown = [s for s in spans if not is_catalog_text(s, texts)]
    assert not unknown, f"{name} quotes texts zh_CN.json does not have: {unknown}"


@pytest.mark.parametrize(
    ("name", "locale"), [("user-quickstart.md", "zh_CN"), ("user-quickstart.en.md", "en_US")]
)
def test_quickstart_quotes_the_contract_texts(name: str, locale: str) -> None:
    text = read(DOCS / name)
    missing = [key for key in CONTRACT_KEYS if f"`{catalog(locale)[key]}`" not in text]
    assert not missing, f"{name} does not quote {missing}"


@pytest.mark.parametrize("name", ["user-quickstart.en.md", "approvals.en.md"])
def test_en_texts_quoted_exist(name: str) -> None:
    texts = list(catalog("en_US").values())
    sentences = [s for s in quoted(read(DOCS / name)) if " " in s and s[0].isupper()]
    assert sentences, f"{name} quotes no text"
    unknown = [s for s in sentences if not is_catalog_text(s, texts)]
    assert not unknown, unknown


@pytest.mark.parametrize("name", ["user-quickstart.md", "user-quickstart.en.md"])
def test_quickstart_uses_no_internal_terms(name: str) -> None:
    text = read(DOCS / name)
    # `/sessions` is a command's name, not the word.
    found = re.findall(r"\bACP\b|(?<!/)\bsessions?\b|(?<!your )\bturns?\b", text, re.I)
    assert not found, f"{name} uses internal terms: {found}"


def test_is_catalog_text() -> None:
    texts = ["已排队（第 {position} 位），当前这一轮结束后处理。", "正在处理…"]
    assert is_catalog_text("已排队（第 2 位），当前这一轮结束后处理。", texts)
    assert is_catalog_text("正在处理…", texts)
    assert not is_catalog_text("正在处理中…", texts)


def test_every_security_claim_points_at_a_real_test() -> None:
    """docs/security.md: `tests/…py::name` (or `::name`, the file before) names a test."""
    text = read(DOCS / "security.md")
    pointers = re.findall(r"`(tests/[\w/]+\.py)?::(test_\w+)`", text)
    assert len(pointers) >= 20
    missing, current = [], ""
    for path, name in pointers:
        current = path or current
        source = (ROOT / current).read_text(encoding="utf-8")
        if not re.search(rf"^(async )?def {name}\(", source, flags=re.M):
            missing.append(f"{current}::{name}")
    assert missing == []
