"""The agent's Markdown as Feishu card markdown (bridge/feishu/text.py): a corpus of answers
shaped like real agents' (code, tables, nested lists, CJK), the split at block boundaries,
and a fuzz that no answer ever yields a mention, a tag or a broken code block."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it.tree import SyntaxTreeNode

from bridge.feishu.text import (
    _PARSER,
    _RICH,
    MESSAGE_BYTES,
    answer_card,
    answer_parts,
    encoded_size,
)


def test_plain_text_stays_plain() -> None:
    for text in ("好的，已经改完了。", "line one\nline two", "price is 5 * 3 = 15", "a_b_c"):
        assert answer_parts(text) is None


def test_a_typical_coding_answer() -> None:
    answer = """# 修复登录页

改动如下：

1. 修改 `auth.py`
   - 加了 **重试**，见 [文档](https://example.com/docs)
   - 删掉了 ~~旧代码~~
2. 跑了测试

| 文件 | 行数 |
|---|--:|
| auth.py | 12 |

```python
def login(user):
    return check(user)
```

> 注意：需要重启服务。
"""
    assert answer_parts(answer) == [
        "## 修复登录页\n\n"
        "改动如下：\n\n"
        "1. 修改 `auth.py`\n"
        "    - 加了 **重试**，见 文档 ([https://example.com/docs](https://example.com/docs))\n"
        "    - 删掉了 ~~旧代码~~\n"
        "2. 跑了测试\n\n"
        "| 文件 | 行数 |\n| --- | --: |\n| auth.py | 12 |\n\n"
        "```python\ndef login(user):\n    return check(user)\n```\n\n"
        "> 注意：需要重启服务。"
    ]


def test_agent_text_stays_data_mentions_tags_and_hidden_links_never_survive() -> None:
    answer = (
        '**Done** <at id=all></at> and <at user_id="ou_x">boss</at>\n\n'
        "- [click here](https://evil.example/steal)\n"
        "- [local](file:///etc/passwd) ![img](https://x.example/p.png)\n\n"
        "```\n<at id=all></at>\n```"
    )
    (part,) = answer_parts(answer) or []
    assert "<at" not in part.replace("<\u200bat", "")
    assert "click here ([https://evil.example/steal](https://evil.example/steal))" in part
    assert "](file:" not in part
    assert "![" not in part


def test_a_code_fence_inside_code_cannot_close_the_block() -> None:
    (part,) = answer_parts("```md\nsee:\n```\nnot code\n```\n```") or []
    assert part.startswith("```md\n")
    assert answer_parts("Use ````` for `x`") is not None


def test_long_answers_split_between_blocks_never_inside_code_or_tables() -> None:
    code = "\n".join(f"line {i} " + "x" * 60 for i in range(1000))  # ~70,000 characters
    rows = "\n".join(f"| r{i} | {'y' * 50} |" for i in range(1000))
    answer = f"Intro **text**.\n\n```go\n{code}\n```\n\n| k | v |\n|---|---|\n{rows}\n\nEnd."
    parts = answer_parts(answer)
    assert parts is not None
    assert len(parts) > 4
    assert all(encoded_size(p) <= MESSAGE_BYTES for p in parts)  # as Feishu counts bytes
    for part in parts:
        assert not open_fence_at_end(part), "a part ends inside a code block"
        for block in part.split("\n\n"):
            if block.startswith("| "):
                assert block.startswith("| k | v |\n| --- | --- |"), "a table part lost its header"
    code_lines = [ln for p in parts for ln in p.splitlines() if ln.startswith("line ")]
    assert code_lines == code.splitlines()  # every line, once, in order
    assert all("```go\nline " in p for p in parts if "\nline " in p)  # refenced, with its language
    assert parts[0].startswith("Intro **text**.")
    assert parts[-1].endswith("End.")


def test_one_endless_line_of_code_is_cut_to_fit_a_card() -> None:
    """Minified code: a single line past a card's size is cut where it must be, each piece
    a code block of its own that fits; every character kept, in order."""
    line = "".join(f"var v{i}=f({i});" for i in range(4000))  # about 60,000 characters
    parts = answer_parts(f"Bundle:\n\n```js\n{line}\n```") or []
    assert len(parts) >= 3
    assert all(encoded_size(p) <= MESSAGE_BYTES for p in parts)
    code = "".join(p.split("```js\n", 1)[1].rsplit("\n```", 1)[0] for p in parts if "```js" in p)
    assert code == line


def test_the_card_is_one_markdown_element() -> None:
    assert answer_card("**x**") == {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {"elements": [{"tag": "markdown", "content": "**x**"}]},
    }


_pieces = st.sampled_from(
    [
        "# h",
        "- item",
        "1. one",
        "**b**",
        "`c`",
        "```py",
        "```",
        "| a | b |",
        "|---|---|",
        "> q",
        "[t](https://x.example)",
        "<at id=all></at>",
        "中文",
        "text",
        "",
        "    indented",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_pieces, max_size=40))
def test_any_answer_yields_safe_well_formed_parts(lines: list[str]) -> None:
    parts = answer_parts("\n".join(lines))
    for part in parts or []:
        assert encoded_size(part) <= MESSAGE_BYTES
        assert not re.search(r"<\s*/?\s*at\b", part), part
        assert not open_fence_at_end(part), part


def open_fence_at_end(part: str) -> bool:
    """CommonMark's rule, for backtick fences: a fence closes on a line of at least as many
    backticks and nothing else."""
    opened = 0
    for line in part.splitlines():
        run = re.match(r"^(`{3,})(.*)$", line)
        if run is None:
            continue
        ticks, rest = len(run[1]), run[2]
        if not opened:
            opened = ticks
        elif ticks >= opened and not rest.strip():
            opened = 0
    return bool(opened)


# Everything but the markers `answer_parts` looks for before it parses: spaces, line ends,
# words, underscores inside them, hyphens and digits with a dot or bracket after them (not at
# a line's start), and the punctuation of plain prose.
_MARKED = re.compile(r"(?<!\w)_|_(?!\w)|(?:^|\r)(?: {0,3}(?:-|\d+[.)])| {4})", re.MULTILINE)
_PLAIN = st.text(
    alphabet=st.sampled_from(list("ab 中文\n\r.,:;!?'\"()/@&%$^{}0123456789_-")), max_size=80
).filter(lambda text: not _MARKED.search(text))


@settings(max_examples=500, deadline=None)
@given(_PLAIN)
def test_text_skipped_as_plain_has_no_rich_node_when_parsed(text: str) -> None:
    # The shortcut in `answer_parts` must agree with the parse it skips.
    assert answer_parts(text) is None
    root = SyntaxTreeNode(_PARSER.parse(text))
    assert not [node.type for node in root.walk() if node.type in _RICH], text
