"""The sessions an `AcpRuntime` knows, by id, with each slot's session and running-turn counts
kept as they change: the operator's process view reads them at every turn's start and end,
and counting them afresh walked every session ever opened on the runtime (thousands, on a
busy bridge) twice per turn."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from bridge.runtime.acp.session import AcpSession
from bridge.runtime.acp.turns import AcpTurn


class SessionTable:
    def __init__(self) -> None:
        self._by_id: dict[str, AcpSession] = {}
        self._sessions: Counter[int] = Counter()  # slot -> sessions
        self._running: Counter[int] = Counter()  # slot -> sessions with a turn running

    def get(self, session_id: str) -> AcpSession | None:
        return self._by_id.get(session_id)

    def __getitem__(self, session_id: str) -> AcpSession:
        return self._by_id[session_id]

    def values(self) -> Iterator[AcpSession]:
        return iter(list(self._by_id.values()))

    def add(self, session: AcpSession) -> None:
        known = self._by_id.get(session.session_id)
        if known is session:
            return
        if known is not None:
            self.drop(known.session_id)
        self._by_id[session.session_id] = session
        self._sessions[session.slot] += 1
        if session.turn is not None:
            self._running[session.slot] += 1

    def drop(self, session_id: str) -> AcpSession | None:
        session = self._by_id.pop(session_id, None)
        if session is not None:
            self._sessions[session.slot] -= 1
            if session.turn is not None:
                self._running[session.slot] -= 1
        return session

    def turn_began(self, session: AcpSession, turn: AcpTurn) -> None:
        if session.turn is None and self._by_id.get(session.session_id) is session:
            self._running[session.slot] += 1
        session.turn = turn

    def turn_ended(self, session: AcpSession, turn: AcpTurn) -> None:
        """`turn` is over; the session is free unless another turn has taken it since."""
        if session.turn is not turn:
            return
        session.turn = None
        if self._by_id.get(session.session_id) is session:
            self._running[session.slot] -= 1

    def counts(self, slot: int) -> tuple[int, int]:
        """The slot's (sessions, running turns)."""
        return self._sessions[slot], self._running[slot]
