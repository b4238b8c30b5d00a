"""What rendering the agent's answers as rich content costs: CPU per answer for a short
plain answer (parsed to find there is no Markdown, then sent as text), a typical Markdown
answer, and a 20,000-character one (split into cards).

    python bench/rich_bench.py [--rounds N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.feishu.text import answer_parts

PLAIN = "好的，已经把登录页的重试加上了，测试也跑过了。"
TYPICAL = """## 改动

1. `auth.py`：加了 **重试**，见 [文档](https://example.com/docs)
2. 测试全部通过

| 文件 | 行数 |
|---|--:|
| auth.py | 12 |

```python
def login(user):
    return check(user)
```
"""
LONG = "Intro.\n\n```go\n" + "\n".join(f"line {i} " + "x" * 60 for i in range(300)) + "\n```"


def per_call(text: str, rounds: int) -> float:
    start = time.process_time()
    for _ in range(rounds):
        answer_parts(text)
    return (time.process_time() - start) / rounds * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    answer_parts(TYPICAL)  # warm the parser
    for name, text in (("plain", PLAIN), ("typical", TYPICAL), ("long", LONG)):
        n = rounds if name != "long" else max(1, rounds // 20)
        parts = answer_parts(text)
        shown = "text" if parts is None else f"{len(parts)} card(s)"
        print(f"{name:8} {len(text):6} chars -> {shown:10} {per_call(text, n):7.3f} ms CPU")


if __name__ == "__main__":
    main()
