"""The ACP *client* side the bridge offers to an agent process: the agent's calls, and its
requests of the user waiting on an answer.

`BridgeClient` is what the SDK's router calls for agent → client traffic. It declares no
file system and no terminal, so those methods answer "method not found"; everything else is
forwarded to the runtime (`ClientHost`). One instance per process, tagged with the process
generation, so a message from a dead process is never applied to a session that moved on.

Requests an agent makes of the user and waits on (`PendingRequests`): one class per
dialect, each able to `answer()` in that dialect and to `cancel()` (the answer ACP asks for
when a turn ends).

* `PermissionRequest`: `session/request_permission`, answered with an option id.
* `ElicitationRequest`: `elicitation/create` (a session-scoped form), accept/decline/cancel.
* `QwenQuestion`: qwen's question, a permission request flagged in `_meta`, answered with
  the answers riding next to its submit option.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from acp.client.router import build_client_router
from acp.connection import MethodHandler
from acp.exceptions import RequestError
from acp.meta import CLIENT_METHODS
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    CancelElicitationResponse,
    ClientCapabilities,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    ElicitationMode,
    FileSystemCapabilities,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

from bridge.runtime.acp.normalize import (
    KNOWN_UPDATE_KINDS,
    elicitation_content,
    qwen_answer_response,
    update_kind,
)

logger = logging.getLogger(__name__)


def client_capabilities(elicitation: bool) -> ClientCapabilities:
    """What the bridge declares: no file system, no terminal, elicitation forms on request."""
    forms = ElicitationCapabilities(form=ElicitationFormCapabilities()) if elicitation else None
    return ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
        terminal=False,
        elicitation=forms,
    )


class ClientHost(Protocol):
    def on_update(self, generation: int, session_id: str, update: Any) -> None: ...

    def on_unknown_update(self, kind: str) -> None: ...

    async def on_permission(
        self,
        generation: int,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        meta: dict[str, Any],
    ) -> Any: ...

    async def on_elicitation(
        self, generation: int, message: str, mode: ElicitationMode, meta: dict[str, Any]
    ) -> Any: ...


class BridgeClient:
    def __init__(self, host: ClientHost, generation: int) -> None:
        self._host = host
        self._generation = generation

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        # Runs as its own task per notification: the host records it before any await,
        # which keeps arrival order (tasks start in creation order).
        self._host.on_update(self._generation, session_id, update)

    def unknown_update(self, kind: str) -> None:
        self._host.on_unknown_update(kind)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> Any:
        return await self._host.on_permission(
            self._generation, session_id, tool_call, options, dict(kwargs)
        )

    async def create_elicitation(self, message: str, mode: ElicitationMode, **kwargs: Any) -> Any:
        return await self._host.on_elicitation(self._generation, message, mode, dict(kwargs))

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        logger.debug("elicitation %s completed by the agent", elicitation_id)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        logger.debug("ignored extension notification _%s", method)

    # Not offered (capabilities say so); answer honestly instead of the SDK's null default.
    async def create_terminal(self, **kwargs: Any) -> Any:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_create"])

    async def terminal_output(self, **kwargs: Any) -> Any:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_output"])

    async def release_terminal(self, **kwargs: Any) -> Any:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_release"])

    async def wait_for_terminal_exit(self, **kwargs: Any) -> Any:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_wait_for_exit"])

    async def kill_terminal(self, **kwargs: Any) -> Any:
        raise RequestError.method_not_found(CLIENT_METHODS["terminal_kill"])


def build_handler(client: BridgeClient) -> MethodHandler:
    """The SDK router, minus its noisy failure on update kinds it does not know.

    The typed route would fail validation and log a traceback (with the payload) for every
    unknown `sessionUpdate`, so such notifications are told to the host (which counts and
    logs the kind) and dropped here before validation. (Not a stream observer: the SDK
    deep-copies every frame, both ways, for its observers.)
    """
    router = build_client_router(client, use_unstable_protocol=True)  # type: ignore[arg-type]

    async def handle(method: str, params: Any | None, is_notification: bool) -> Any:
        unknown = _unknown_kind(method, params) if is_notification else None
        if unknown is not None:
            client.unknown_update(unknown)
            return None
        if method not in _CLIENT_METHODS and not method.startswith("_"):
            # An agent's own protocol additions without ACP's `_` prefix (Qwen Code's
            # `qwen/notify/session/prompt-suggestion` after every turn, its
            # `craft/drainMidTurnQueue` request): the SDK would log each one as an error.
            logger.debug("agent sent %s %s, not ACP: ignored", _KIND[is_notification], method)
            if is_notification:
                return None
            raise RequestError.method_not_found(method)
        return await router(method, params, is_notification)

    return handle


_CLIENT_METHODS = frozenset(CLIENT_METHODS.values())
_KIND = {True: "notification", False: "request"}


def unknown_update_kind(message: dict[str, Any]) -> str | None:
    """The `sessionUpdate` kind of a raw incoming message, when the SDK schema lacks it."""
    return _unknown_kind(message.get("method"), message.get("params"))


def _unknown_kind(method: Any, params: Any) -> str | None:
    if method != CLIENT_METHODS["session_update"]:
        return None
    update = params.get("update") if isinstance(params, dict) else None
    kind = update_kind(update or {})
    return None if kind in KNOWN_UPDATE_KINDS else kind


# --- what an agent asks of the user ---


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
