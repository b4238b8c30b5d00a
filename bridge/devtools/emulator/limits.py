"""Feishu's rate limits, enforced: calls a second to each API of the app (Feishu meters
"每个 API、每个应用、每个租户"), message sends a minute, and sends a second to one chat
(docs/scaling.md cites the figures); optionally also calls a second to all APIs together,
as a tenant or gateway that meters the app as a whole would. Past one, the call is
answered as Feishu does (HTTP 429, code 99991400, `x-ogw-ratelimit-*` headers: the same
answer as `outage.py`'s 429) and not carried out.

Off until set (`FeishuEmulator.set_rate_limits`). Windows slide: a call is refused when the
calls already taken in the last second (minute) reach the limit, so a client that bursts
at a window's edge is caught, as a strict server would. Every call taken or refused is
kept with its chat, so a benchmark can measure calls a second per chat and 429s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from bridge.devtools.emulator import codes
from bridge.devtools.emulator.outage import LIMIT_HEADER, RESET_HEADER, OutageMode, Refusal

_AUTH = "/open-apis/auth/"  # the token endpoint has limits of its own, not these


@dataclass(frozen=True)
class Counted:
    at: float
    method: str
    path: str
    chat: str | None
    limited: str | None  # "api", "total", "sends" or "chat" when refused


class SlidingWindow:
    """Calls taken in the last `seconds`, sliding (a burst at a window's edge is caught, as
    a strict server would)."""

    def __init__(self, limit: int, seconds: float) -> None:
        self.limit, self.seconds = limit, seconds
        self.times: deque[float] = deque()

    def full(self, now: float) -> bool:
        while self.times and self.times[0] <= now - self.seconds:
            self.times.popleft()
        return len(self.times) >= self.limit


class RateLimits:
    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._api_limit: int | None = None
        self._apis: dict[str, SlidingWindow] = {}
        self._total: SlidingWindow | None = None
        self._sends: SlidingWindow | None = None
        self._chat_limit: int | None = None
        self._chats: dict[str, SlidingWindow] = {}
        self.reset_seconds = 1
        self.counted: list[Counted] = []

    def set(
        self,
        *,
        app_per_second: int | None = None,
        sends_per_minute: int | None = None,
        chat_per_second: int | None = None,
        total_per_second: int | None = None,
        reset_seconds: int = 1,
    ) -> None:
        """Enforce these limits from now on (None: that one is off). `app_per_second` is
        each API's; `total_per_second` all of them together."""
        self._api_limit = app_per_second
        self._apis.clear()
        self._total = SlidingWindow(total_per_second, 1.0) if total_per_second else None
        self._sends = SlidingWindow(sends_per_minute, 60.0) if sends_per_minute else None
        self._chat_limit = chat_per_second
        self._chats.clear()
        self.reset_seconds = reset_seconds

    @property
    def enforced(self) -> bool:
        return bool(self._api_limit or self._total or self._sends or self._chat_limit)

    def refused(self) -> list[Counted]:
        return [c for c in self.counted if c.limited is not None]

    def check(self, method: str, path: str, chat: str | None, send: bool) -> Refusal | None:
        """Count the call, or refuse it past a limit."""
        if path.startswith(_AUTH):
            return None
        now = self._clock()
        chat_window = None
        if chat is not None and self._chat_limit and send:  # Feishu's is the send limit
            chat_window = self._chats.get(chat)
            if chat_window is None:
                chat_window = self._chats[chat] = SlidingWindow(self._chat_limit, 1.0)
        api_window = None
        if self._api_limit:
            api = _api(method, path, send)
            api_window = self._apis.get(api)
            if api_window is None:
                api_window = self._apis[api] = SlidingWindow(self._api_limit, 1.0)
        limited = None
        if self._total is not None and self._total.full(now):
            limited, window = "total", self._total
        elif api_window is not None and api_window.full(now):
            limited, window = "api", api_window
        elif send and self._sends is not None and self._sends.full(now):
            limited, window = "sends", self._sends
        elif chat_window is not None and chat_window.full(now):
            limited, window = "chat", chat_window
        self.counted.append(Counted(now, method, path, chat, limited))
        if limited is not None:
            headers = {LIMIT_HEADER: str(window.limit), RESET_HEADER: str(self.reset_seconds)}
            answer = codes.RATE_LIMITED
            return Refusal(OutageMode.RATE_LIMITED, answer.http_status, answer.body(), headers)
        for taken in (self._total, api_window, self._sends if send else None, chat_window):
            if taken is not None:
                taken.times.append(now)
        return None


def _api(method: str, path: str, send: bool) -> str:
    """Which API a call is: its method and path without the ids in it (a send and a reply
    are one here, as they share the sends-a-minute limit)."""
    if send:
        return "send"
    parts = path.removeprefix("/open-apis/").split("/")
    return method + " " + "/".join(":id" if i >= 3 and i % 2 else p for i, p in enumerate(parts))
