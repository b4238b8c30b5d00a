"""Requests an agent makes of the user and waits on: one class per dialect, each able to
`answer()` in that dialect and to `cancel()` (the answer ACP asks for when a turn ends).

* `PermissionRequest`: `session/request_permission`, answered with an option id.
* `ElicitationRequest`: `elicitation/create` (a session-scoped form), accept/decline/cancel.
* `QwenQuestion`: qwen's question, a permission request flagged in `_meta`, answered with
  the answers riding next to its submit option.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    CancelElicitationResponse,
    DeclineElicitationResponse,
    DeniedOutcome,
    RequestPermissionResponse,
)

from bridge.runtime.acp.normalize import elicitation_content, qwen_answer_response


def cancelled_permission() -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


def selected(option_id: str) -> RequestPermissionResponse:
    return RequestPermissionResponse(
        outcome=AllowedOutcome(outcome="selected", option_id=option_id)
    )


@dataclass
class PendingRequest:
    request_id: str
    session_id: str
    future: asyncio.Future[Any]

    def resolve(self, response: Any) -> None:
        if not self.future.done():
            self.future.set_result(response)

    def cancel(self) -> None:
        self.resolve(cancelled_permission())


@dataclass
class PermissionRequest(PendingRequest):
    option_ids: frozenset[str] = frozenset()

    def answer(self, option_id: str | None) -> None:
        if option_id is None:
            self.resolve(cancelled_permission())
        elif option_id in self.option_ids:
            self.resolve(selected(option_id))
        else:
            raise ValueError(f"option {option_id!r} was not offered for {self.request_id}")


@dataclass
class ElicitationRequest(PendingRequest):
    types: Mapping[str, str] = field(default_factory=dict)

    def answer(self, answers: Mapping[str, str] | None) -> None:
        if answers is None:
            self.resolve(DeclineElicitationResponse(action="decline"))
        else:
            content = elicitation_content(answers, self.types)
            self.resolve(AcceptElicitationResponse(action="accept", content=content))

    def cancel(self) -> None:
        self.resolve(CancelElicitationResponse(action="cancel"))


@dataclass
class QwenQuestion(PendingRequest):
    submit_option_id: str | None = None
    decline_option_id: str | None = None  # "no answer" is its Cancel option

    def answer(self, answers: Mapping[str, str] | None) -> None:
        if answers is not None and self.submit_option_id:
            self.resolve(qwen_answer_response(self.submit_option_id, answers))
        elif self.decline_option_id:
            self.resolve(selected(self.decline_option_id))
        else:
            self.resolve(cancelled_permission())


class PendingRequests:
    """Requests waiting on a person, by request id."""

    def __init__(self) -> None:
        self._pending: dict[str, PendingRequest] = {}

    def add(self, request: PendingRequest) -> None:
        self._pending[request.request_id] = request

    def discard(self, request_id: str) -> None:
        self._pending.pop(request_id, None)

    def get(self, request_id: str) -> PendingRequest | None:
        return self._pending.get(request_id)

    def of_sessions(self, session_ids: set[str]) -> list[PendingRequest]:
        return [p for p in self._pending.values() if p.session_id in session_ids]

    def cancel_session(self, session_id: str) -> None:
        for pending in self.of_sessions({session_id}):
            pending.cancel()

    def ids(self) -> list[str]:
        return list(self._pending)

    def __iter__(self) -> Iterator[PendingRequest]:
        return iter(list(self._pending.values()))

    def __len__(self) -> int:
        return len(self._pending)
