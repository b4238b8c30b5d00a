"""The bridge meets the world's clock, ids and randomness only through bridge/clock.py (the
composition root passes them in; the simulator passes its own, so one seed gives one run).
Any other module that reads the time, a fresh uuid or the global random itself is named
here, file:line.

What counts, called or merely referenced (`clock=time.monotonic` leaks as surely as a call),
however imported (`from time import monotonic as m`): `time.time`, `time.monotonic`,
`time.perf_counter` (and their `_ns` forms); an event loop's `time`
(`asyncio.get_running_loop().time()`, `self._loop.time`: a loop is what asyncio hands out,
a name annotated as one, or any name with `loop` in it); `datetime.now`, `utcnow`,
`today`; `uuid.uuid1` and `uuid4`; the global random's functions (`random.choice`, …),
`random.SystemRandom`, and a `random.Random` without a seed. `time.localtime()`,
`gmtime()`, `ctime()` and `asctime()` read the time only without their argument, and
`time.strftime` only without its second.

Not counted: annotations (`rng: random.Random`), a seeded `random.Random(seed)`, the loop's
own timers and sleeps (`call_later`, `asyncio.sleep`, timeouts), `secrets` and
`os.urandom` (keys and ids that must not be predictable).

`time.perf_counter` is let through where its readings only measure a duration for a log
line (PERF_COUNTER_FOR_LOGS): it decides nothing, and the simulator never reaches it.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "bridge"
EXEMPT = (BRIDGE / "clock.py", BRIDGE / "devtools")  # the ports themselves; the demo's fakes

# Durations that only go to a log line (how long a voice took to fetch, decode, recognize).
PERF_COUNTER_FOR_LOGS = {"bridge/media/voice.py"}

_READS = {
    "time.time",
    "time.time_ns",
    "time.monotonic",
    "time.monotonic_ns",
    "time.perf_counter",
    "time.perf_counter_ns",
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "datetime.datetime.today",
    "datetime.date.today",
    "uuid.uuid1",
    "uuid.uuid4",
    "random.SystemRandom",
    *(f"random.{name}" for name in random.__all__ if name not in ("Random", "SystemRandom")),
}
# Read the current time only when called without their time argument (value: its index).
_NOW_WITHOUT = {
    "time.localtime": 0,
    "time.gmtime": 0,
    "time.ctime": 0,
    "time.asctime": 0,
    "time.strftime": 1,
}
_LOOP_GETTERS = {"asyncio.get_running_loop", "asyncio.get_event_loop", "asyncio.new_event_loop"}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Each name a module binds by import → what it stands for (`m` → `time.monotonic`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _terminal(node: ast.expr) -> str | None:
    """The last name of `loop`, `self._loop`, `a.b.main_loop`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _Finder(ast.NodeVisitor):
    def __init__(self, tree: ast.Module) -> None:
        self.aliases = _aliases(tree)
        self.loops = self._loop_names(tree)
        self.found: list[tuple[int, str]] = []

    def dotted(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def _is_loop_getter(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and self.dotted(node.func) in _LOOP_GETTERS

    def _loop_names(self, tree: ast.Module) -> set[str]:
        """Names and attributes that hold an event loop: assigned one from asyncio, or
        annotated as one."""
        loops: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and self._is_loop_getter(node.value):
                loops.update(t for t in map(_terminal, node.targets) if t is not None)
            elif isinstance(node, ast.AnnAssign | ast.arg):
                annotation = node.annotation
                if annotation is not None and "EventLoop" in ast.unparse(annotation):
                    name = node.arg if isinstance(node, ast.arg) else _terminal(node.target)
                    if name is not None:
                        loops.add(name)
                value = node.value if isinstance(node, ast.AnnAssign) else None
                if value is not None and self._is_loop_getter(value):
                    loops.update(t for t in [_terminal(node.target)] if t is not None)
        return loops

    def _is_loop(self, node: ast.expr) -> bool:
        if self._is_loop_getter(node):
            return True
        name = _terminal(node)
        return name is not None and (name in self.loops or "loop" in name.lower())

    # -- annotations say what a value is; they read nothing ------------------------------

    def visit_arg(self, node: ast.arg) -> None:
        return None

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for item in (*node.decorator_list, *node.body):
            self.visit(item)
        args = node.args
        for default in (*args.defaults, *args.kw_defaults):
            if default is not None:
                self.visit(default)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    # -- what reads the world ------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func)
        if name == "random.Random":
            unseeded = not node.args or (
                isinstance(node.args[0], ast.Constant) and node.args[0].value is None
            )
            if unseeded and not node.keywords:
                self.found.append((node.lineno, "random.Random() (no seed)"))
            for child in (*node.args, *node.keywords):
                self.visit(child)
            return
        index = _NOW_WITHOUT.get(name or "")
        if index is not None and len(node.args) <= index and not node.keywords:
            self.found.append((node.lineno, f"{name}() (now)"))
        if isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass"):
            # `random.Random` as the type asked about, not made
            for child in node.args[:1]:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.dotted(node)
        if name in _READS:
            self.found.append((node.lineno, name))
            return
        if name == "random.Random":  # as a value (`default_factory=random.Random`)
            self.found.append((node.lineno, "random.Random (no seed)"))
            return
        if node.attr == "time" and self._is_loop(node.value):
            self.found.append((node.lineno, f"{ast.unparse(node.value)}.time (loop time)"))
            return
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        name = self.aliases.get(node.id)
        if name in _READS:
            self.found.append((node.lineno, f"{node.id} ({name})"))
        elif name == "random.Random":
            self.found.append((node.lineno, f"{node.id} (random.Random, no seed)"))


def reads_of_the_world(source: str) -> list[tuple[int, str]]:
    """Each place `source` reads the clock, a fresh uuid or unseeded randomness itself."""
    tree = ast.parse(source)
    finder = _Finder(tree)
    finder.visit(tree)
    return sorted(finder.found)


def _modules() -> Iterator[Path]:
    for path in sorted(BRIDGE.rglob("*.py")):
        if not any(path == e or e in path.parents for e in EXEMPT):
            yield path


def test_no_module_reads_the_clock_ids_or_randomness_past_the_ports() -> None:
    leaks = []
    for path in _modules():
        relative = path.relative_to(ROOT).as_posix()
        for line, what in reads_of_the_world(path.read_text(encoding="utf-8")):
            if relative in PERF_COUNTER_FOR_LOGS and "perf_counter" in what:
                continue
            leaks.append(f"{relative}:{line}: {what}")
    assert leaks == [], "read these through bridge/clock.py's ports:\n" + "\n".join(leaks)


def test_each_perf_counter_exception_is_still_needed() -> None:
    for relative in PERF_COUNTER_FOR_LOGS:
        found = reads_of_the_world((ROOT / relative).read_text(encoding="utf-8"))
        assert any("perf_counter" in what for _, what in found), relative


# -- the check itself: what it must find, and what it must let be -------------------------

FOUND = {
    "import time\nx = time.time()": "time.time",
    "import time\nx = time.monotonic_ns()": "time.monotonic_ns",
    "import time as t\nx = t.perf_counter()": "time.perf_counter",
    "from time import monotonic\nx = monotonic()": "monotonic (time.monotonic)",
    "from time import time as now\nx = now()": "now (time.time)",
    "import time\ndef f(clock=time.monotonic): ...": "time.monotonic",
    "import time\nclass C:\n    clock: object = time.time": "time.time",
    "import time\nx = time.localtime()": "time.localtime() (now)",
    "import time\nx = time.strftime('%H')": "time.strftime() (now)",
    "import asyncio\nx = asyncio.get_running_loop().time()": (
        "asyncio.get_running_loop().time (loop time)"
    ),
    "def f(self):\n    return self._loop.time()": "self._loop.time (loop time)",
    "def f(loop):\n    return loop.time": "loop.time (loop time)",
    "import asyncio\nlp = asyncio.get_event_loop()\nx = lp.time()": "lp.time (loop time)",
    "import asyncio\ndef f(ev: asyncio.AbstractEventLoop):\n    return ev.time()": (
        "ev.time (loop time)"
    ),
    "from datetime import datetime\nx = datetime.now()": "datetime.datetime.now",
    "import datetime\nx = datetime.datetime.utcnow()": "datetime.datetime.utcnow",
    "import datetime as dt\nx = dt.date.today()": "datetime.date.today",
    "from datetime import datetime as D\nx = D.now().astimezone()": "datetime.datetime.now",
    "import uuid\nx = uuid.uuid4().hex": "uuid.uuid4",
    "from uuid import uuid4\nx = uuid4()": "uuid4 (uuid.uuid4)",
    "from uuid import uuid4\ndef f(ids=uuid4): ...": "uuid4 (uuid.uuid4)",
    "import random\nx = random.random()": "random.random",
    "import random\nx = random.choice([1])": "random.choice",
    "from random import uniform\nx = uniform(0, 1)": "uniform (random.uniform)",
    "import random\nx = random.Random()": "random.Random() (no seed)",
    "import random\nx = random.Random(None)": "random.Random() (no seed)",
    "import random\nx = random.SystemRandom()": "random.SystemRandom",
    "import random\nfrom dataclasses import field\nx = field(default_factory=random.Random)": (
        "random.Random (no seed)"
    ),
}


@pytest.mark.parametrize(("source", "what"), FOUND.items(), ids=map(str, range(len(FOUND))))
def test_the_check_finds(source: str, what: str) -> None:
    assert [w for _, w in reads_of_the_world(source)] == [what]


LET_BE = [
    "import random\ndef f(rng: random.Random) -> random.Random: ...",
    "import random\nclass C:\n    rng: random.Random | None = None",
    "import random\nx = random.Random(7)",
    "import random\nx = random.Random(f'seed:{7}')",
    "import random\ndef f(x):\n    return isinstance(x, random.Random)",
    "import time\nx = time.localtime(0.0)",
    "import time\nx = time.strftime('%H', time.localtime(0.0))",
    "import time\nasync def f():\n    time.sleep(0)",
    "import uuid\nx = uuid.uuid5(uuid.NAMESPACE_URL, 'x')",
    "from datetime import datetime, UTC\nx = datetime.fromtimestamp(0.0, UTC)",
    "import asyncio\nasync def f():\n    await asyncio.sleep(1)",
    "import asyncio\ndef f(loop):\n    loop.call_later(1, print)",
    "def f(turn):\n    return turn.time",  # a field named time, on no loop
    "def f(time):\n    return time.time",  # a parameter, not the module
    "import secrets\nx = secrets.token_hex(3)",
]


@pytest.mark.parametrize("source", LET_BE, ids=map(str, range(len(LET_BE))))
def test_the_check_lets_be(source: str) -> None:
    assert reads_of_the_world(source) == []
