"""What the app's call budget spent of Feishu's minutes, kept in the app's data folder, so
a restarted bridge knows how much of each minute its predecessor left (budget.py `Spent`).

Feishu counts an API's 1,000 calls a minute whoever made them: a bridge restarted under load
that took its minute as unspent would burst past Feishu's figure, and one that took it as
spent (it cannot tell) would hold a crowd meeting a bridge just started to the pace, its
first reactions and cards seconds late. So the budget's grants of the last 60 s are written
down every second while calls go (by whole wall-clock seconds: a grant counts until the end
of its second, a little longer than Feishu counts it), and once more at a clean stop. A
restart reads them back; the time since a record that was not the last (the process was
killed after it) is taken as spent at the pace. No record: no predecessor, nothing spent.

A small JSON file, replaced whole (written beside it, then renamed): a crash mid-write
leaves the last one. A file that cannot be read is a predecessor whose minute is unknown:
taken as spent at the pace, as the budget did before it kept a record."""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.clock import Clock
from bridge.feishu.budget import Spent

log = logging.getLogger(__name__)

FILE_NAME = "call-budget.json"
MINUTE = 60.0


class BudgetRecord:
    """The record of one app's budget at `path`, times read from `clock` (its `now` is the
    budget's; its `wall` is what outlives the process)."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self._clock = clock
        self._saved: tuple[int, float, bool] | None = None  # what was last written

    def load(self) -> Spent:
        """What the predecessor spent, in this process's time (nothing without a record)."""
        now, wall = self._clock.now(), self._clock.wall()
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            saved_at, closed = float(data["saved_at"]), bool(data["closed"])
            bins = _bins(data["apis"])
        except FileNotFoundError:
            return Spent()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "the call budget's record %s cannot be read (%s): the last minute is taken"
                " as spent at the pace",
                self.path,
                type(exc).__name__,
            )
            return Spent(unseen_since=now - MINUTE)
        by_api = {  # (a second not yet over here is one that ends now)
            api: [now - max(0.0, wall - second) for second, count in counts for _ in range(count)]
            for api, counts in bins.items()
        }
        unseen = None if closed else now - max(0.0, wall - saved_at)
        return Spent({api: times for api, times in by_api.items() if times}, unseen)

    def save(self, spent: Mapping[str, Sequence[float]], *, closed: bool = False) -> None:
        """Write `spent` (each API's grant times on the budget's clock) down; nothing when
        it is what was last written."""
        newest = max((times[-1] for times in spent.values() if times), default=-math.inf)
        signature = (sum(map(len, spent.values())), newest, closed)
        if signature == self._saved:
            return
        wall = self._clock.wall()
        to_wall = wall - self._clock.now()  # the budget's clock to the wall clock
        apis = {
            api: sorted(Counter(math.ceil(t + to_wall) for t in times).items())
            for api, times in spent.items()
        }
        data: dict[str, Any] = {"saved_at": wall, "closed": closed, "apis": apis}
        partial = self.path.with_name(self.path.name + ".new")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
            os.replace(partial, self.path)
        except OSError as exc:  # the next save tries again; a restart then assumes the pace
            log.warning("cannot write the call budget's record %s: %s", self.path, exc)
            return
        self._saved = signature


def _bins(apis: Any) -> dict[str, list[tuple[float, int]]]:
    """Each API's (wall-clock second, grants in it), checked."""
    if not isinstance(apis, dict):
        raise TypeError("apis")
    out: dict[str, list[tuple[float, int]]] = {}
    for api, pairs in apis.items():
        out[str(api)] = [(float(at), max(0, min(int(count), 10_000))) for at, count in pairs]
    return out
