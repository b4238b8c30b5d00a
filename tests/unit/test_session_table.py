"""The runtime's session table keeps each slot's session and running-turn counts as they
change: after any sequence of opens, rebinds, drops, turn starts and ends, they equal a
recount of what the table holds."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from bridge.runtime.acp.sessions import AcpSession, SessionTable


def _session(session_id: str, slot: int) -> AcpSession:
    return AcpSession(session_id, f"chat-{session_id}", slot, cast(Any, None), "/w")


def _recount(table: SessionTable, slot: int) -> tuple[int, int]:
    held = [s for s in table.values() if s.slot == slot]
    return len(held), sum(1 for s in held if s.turn is not None)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "rebind", "drop", "begin", "end", "end_stale"]),
        st.integers(0, 5),  # session id
        st.integers(0, 2),  # slot
    ),
    max_size=60,
)


@given(OPS)
def test_the_kept_counts_equal_a_recount(ops: list[tuple[str, int, int]]) -> None:
    table = SessionTable()
    made: dict[int, AcpSession] = {}  # every session object made, dropped ones too
    turns: dict[int, object] = {}
    for op, n, slot in ops:
        sid = f"s{n}"
        if op == "add" or (op == "rebind" and n not in made):
            made[n] = _session(sid, slot)
            table.add(made[n])
        elif op == "rebind":  # the same session object bound again
            table.add(made[n])
        elif op == "drop":
            table.drop(sid)
        elif op == "begin" and n in made and made[n].turn is None:
            turns[n] = object()
            table.turn_began(made[n], cast(Any, turns[n]))
        elif op == "end" and n in made and n in turns:
            table.turn_ended(made[n], cast(Any, turns.pop(n)))
        elif op == "end_stale" and n in made:
            table.turn_ended(made[n], cast(Any, object()))  # not its turn: nothing changes
        for s in range(3):
            assert table.counts(s) == _recount(table, s)


def test_a_session_dropped_while_its_turn_runs_is_not_counted_twice() -> None:
    table = SessionTable()
    session, turn = _session("s1", 0), cast(Any, object())
    table.add(session)
    table.turn_began(session, turn)
    assert table.counts(0) == (1, 1)
    table.drop("s1")
    assert table.counts(0) == (0, 0)
    table.turn_ended(session, turn)  # its turn ends after: the counts stay right
    assert table.counts(0) == (0, 0)
    assert session.turn is None
