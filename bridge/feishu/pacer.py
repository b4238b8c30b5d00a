"""The call budget on the event loop: every Feishu call the client makes waits here for its
turn (`budget.py` decides which). Who a call is for and why travels with the task, not
through the `FeishuApi` signatures: the executor opens a `scope` (chat and lane) around each
effect it performs, and the client reads it when the call goes out.

A status card refresh takes its token *before* it picks the view to show (`ahead`): the
view it then draws is the newest one, however long it waited.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from bridge.core.delivery import Lane
from bridge.feishu.budget import BudgetPolicy, CallQueue, Waiter

_MESSAGES = "/open-apis/im/v1/messages"


class _Handle(Protocol):
    def cancel(self) -> None: ...


CallAt = Callable[[float, Callable[[], None]], _Handle]


@dataclass
class _Scope:
    chat: str | None
    lane: Lane | None
    credit: int = 0  # calls already paid for (`ahead`)
    api: str = ""  # the API the credit was taken from


_SCOPE: ContextVar[_Scope | None] = ContextVar("feishu_call_scope", default=None)


@contextlib.contextmanager
def scope(chat: str | None, lane: Lane | None) -> Iterator[None]:
    """Calls made inside (and in tasks started inside) are `chat`'s, in `lane`."""
    token = _SCOPE.set(_Scope(chat, lane))
    try:
        yield
    finally:
        # A call abandoned unfinished is closed by the garbage collector, in whatever
        # context is current then: its own context is gone, and nothing is left to reset.
        with contextlib.suppress(ValueError):
            _SCOPE.reset(token)


@contextlib.contextmanager
def lane(which: Lane) -> Iterator[None]:
    """The same chat, another lane."""
    current = _SCOPE.get()
    with scope(current.chat if current else None, which):
        yield


@contextlib.contextmanager
def paid(which: Lane, api: str) -> Iterator[None]:
    """The first call made inside is already paid for, from `api`'s bucket
    (`CallBudget.try_take`, `ahead`, `take_unless`)."""
    token = _SCOPE.set(_Scope(_chat(), which, credit=1, api=api))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def _chat() -> str | None:
    current = _SCOPE.get()
    return current.chat if current is not None else None


def default_lane(method: str, path: str) -> Lane:
    """A call's lane when no scope names one."""
    if "/reactions" in path:
        return Lane.HINT
    if path.startswith("/open-apis/cardkit/") or method in ("PATCH", "PUT"):
        return Lane.REFRESH
    return Lane.ANSWER


def is_send(method: str, path: str) -> bool:
    """A message send: a new message in a chat (a reply included)."""
    return method == "POST" and (path == _MESSAGES or path.endswith("/reply"))


SEND = "send"  # the API a send or a reply is metered under (one: they share the minute)


def api_of(method: str, path: str) -> str:
    """The API a call is metered under: its method and path, ids left out
    (`/open-apis/<service>/<version>/<resource>/<id>/<resource>/<id>…`)."""
    if is_send(method, path):
        return SEND
    parts = path.removeprefix("/open-apis/").split("/")
    named = [":id" if i >= 3 and i % 2 == 1 else part for i, part in enumerate(parts)]
    return f"{method} {'/'.join(named)}"


class CallBudget:
    def __init__(
        self,
        policy: BudgetPolicy | None = None,
        *,
        now: Callable[[], float] = time.monotonic,
        call_at: CallAt | None = None,
    ) -> None:
        self._now = now
        self._call_at = call_at
        self._sched = CallQueue(policy or BudgetPolicy(), now())
        self._wake: _Handle | None = None
        self._wake_at = 0.0

    @property
    def scheduler(self) -> CallQueue:
        return self._sched

    async def before_call(self, method: str, path: str) -> None:
        """Wait for this call's turn (the client calls it before each request, retries too)."""
        current = _SCOPE.get()
        api = api_of(method, path)
        if current is not None and current.credit > 0:
            current.credit -= 1
            if current.api == api:
                return
            self._sched.refund(current.api, self._now())  # paid from another API's bucket
        which = current.lane if current is not None and current.lane is not None else None
        await self.acquire(
            which if which is not None else default_lane(method, path),
            current.chat if current is not None else None,
            send=is_send(method, path),
            api=api,
        )

    async def acquire(
        self, which: Lane, chat: str | None, *, send: bool = False, api: str = ""
    ) -> None:
        queued = self._queue(which, chat, send, api)
        if queued is None:
            return
        waiter, granted = queued
        try:
            await granted
        except asyncio.CancelledError:
            self._sched.withdraw(waiter)  # (granted just before: that token is spent)
            raise

    def _queue(
        self, which: Lane, chat: str | None, send: bool, api: str
    ) -> tuple[Waiter, asyncio.Future[None]] | None:
        """Offer a call to the scheduler: None when it may go now, else its place in the
        queue and the future its grant resolves."""
        now = self._now()
        waiter = self._sched.waiter(which, chat, send, now, api)
        granted = self._sched.offer(waiter, now)
        self._release([w for w in granted if w is not waiter])
        if waiter in granted:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter.handle = future
        return waiter, future

    def may_go(self, api: str) -> bool:
        """Whether a call of `api` would find a token now (nothing is taken)."""
        return self._sched.may_go(api, self._now())

    def try_take(self, which: Lane, api: str) -> bool:
        """Take a token of `api` for the current scope's chat if one is there now (nothing
        queued waits for it); the caller then makes its call inside `paid`."""
        chat = _chat()
        now = self._now()
        if not self._sched.may_go(api, now):
            return False  # under load, most asks: answered without queueing
        waiter = self._sched.waiter(which, chat, False, now, api)
        granted = self._sched.offer(waiter, now)
        if waiter not in granted:
            self._sched.withdraw(waiter)
        self._release([w for w in granted if w is not waiter])
        return waiter in granted

    async def take_unless(
        self,
        which: Lane,
        moot: Callable[[], bool],
        changed: Callable[[], Awaitable[None]],
        *,
        api: str,
    ) -> bool:
        """A token for the current scope's chat. One there now is taken at once; else it is
        waited for until `moot()` comes true (asked now, then each time `changed()`
        completes): False then, and nothing is taken. True: the caller makes its call
        inside `paid(which, api)`."""
        queued = self._queue(which, _chat(), api == SEND, api)
        if queued is None:
            return True
        waiter, granted = queued
        try:
            while not granted.done():
                if moot():
                    self._sched.withdraw(waiter)
                    return False
                change = asyncio.ensure_future(changed())
                await asyncio.wait({granted, change}, return_when=asyncio.FIRST_COMPLETED)
                change.cancel()
        except asyncio.CancelledError:
            self._sched.withdraw(waiter)
            raise
        return True

    @contextlib.asynccontextmanager
    async def ahead(self, which: Lane, api: str) -> AsyncIterator[None]:
        """A token of `api` taken first, for the first call made inside."""
        await self.acquire(which, _chat(), send=api == SEND, api=api)
        with paid(which, api):
            yield

    def rate_limited(self, reset_after: float | None, method: str, path: str) -> None:
        chat = _chat() if is_send(method, path) else None  # a chat's limit is on sends
        self._sched.rate_limited(self._now(), reset_after, chat, api_of(method, path))
        self._arm()

    def state(self) -> dict[str, Any]:
        return self._sched.state(self._now())

    # -- waking ----------------------------------------------------------------------------

    def _release(self, granted: list[Waiter]) -> None:
        for waiter in granted:
            future = waiter.handle
            if isinstance(future, asyncio.Future) and not future.done():
                future.set_result(None)
        self._arm()

    def _pump(self) -> None:
        self._wake = None
        self._release(self._sched.grant(self._now()))

    def _arm(self) -> None:
        """Wake at the next time a waiter could go (an early wake-up just re-arms)."""
        when = self._sched.next_wake(self._now())
        if when is None:
            return
        if self._wake is not None:
            if self._wake_at <= when:
                return
            self._wake.cancel()
        self._wake_at = when
        if self._call_at is not None:
            self._wake = self._call_at(when, self._pump)
        else:
            delay = max(0.0, when - self._now())
            self._wake = asyncio.get_running_loop().call_later(delay, self._pump)
