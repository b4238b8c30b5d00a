"""Pushing one app's events to the bridge the way Feishu does, redeliveries included.

Feishu counts a push as failed unless HTTP 200 comes back within 3 seconds, and then pushes
the same event (same event_id) again 15 s, 5 min, 1 h and 6 h after each failure. Here the
deadline and the ladder are parameters (the emulator scales them by `time_scale`), and every
attempt is recorded. Each push is sealed afresh: new IV, timestamp, nonce and signature.

While the app holds a long connection (`longconn.py`), its events go there (plaintext, the
answer's `code` 200 counting as the webhook's HTTP 200); else to its webhook URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from bridge.devtools.emulator.crypto import seal
from bridge.devtools.emulator.longconn import Session
from bridge.devtools.emulator.records import DeliveryAttempt, DeliveryOutcome, Envelope

FEISHU_REDELIVERY_LADDER_S: tuple[float, ...] = (15.0, 300.0, 3600.0, 21600.0)
FEISHU_DEADLINE_S = 3.0


@dataclass(frozen=True)
class _Answer:
    status: int | None
    body: str
    latency_ms: float
    outcome: DeliveryOutcome
    started_at: float
    url: str = ""


class EventDelivery:
    def __init__(
        self,
        *,
        encrypt_key: str,
        ladder_seconds: Sequence[float],
        deadline_seconds: float,
        webhook_url: Callable[[], str | None],
        on_change: Callable[[], None],
        app_id: str = "",
        attempts: list[DeliveryAttempt] | None = None,
        long_connection: Callable[[], Session | None] = lambda: None,
    ) -> None:
        self._long_connection = long_connection
        self.app_id = app_id
        self._encrypt_key = encrypt_key
        self._ladder = tuple(ladder_seconds)
        self.deadline_seconds = deadline_seconds
        self._webhook_url = webhook_url
        self._on_change = on_change
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._payloads: dict[str, Mapping[str, Any]] = {}  # event_id -> plaintext payload
        # Every app's attempts in one list (shared), so their order across apps is kept.
        self.attempts: list[DeliveryAttempt] = [] if attempts is None else attempts
        # Several bridge instances behind a load balancer: each push goes to one at random.
        self.spread: Sequence[str] = ()
        self.rng = random.Random(0)

    async def start(self) -> None:
        # trust_env=False: a proxy from the environment must never see loopback test traffic.
        self._session = aiohttp.ClientSession(trust_env=False)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def reachable(self) -> bool:
        """The app has somewhere for its events to go."""
        return self._long_connection() is not None or self._webhook_url() is not None

    @property
    def redeliveries_pending(self) -> int:
        return len(self._tasks)

    def sent(self, event_id: str) -> bool:
        return event_id in self._payloads

    def payload(self, event_id: str) -> Mapping[str, Any]:
        try:
            return self._payloads[event_id]
        except KeyError:
            raise KeyError(f"no event {event_id!r} was sent by this emulator") from None

    def seal(self, payload: Mapping[str, Any]) -> Envelope:
        return seal(payload, self._encrypt_key, timestamp=str(int(time.time())))

    async def push(self, payload: Mapping[str, Any]) -> DeliveryAttempt | None:
        """First push of a new event; on failure the redelivery ladder runs in the background.
        Returns None (and pushes nothing) while the app has neither a long connection nor a
        webhook URL."""
        event_id = str(payload["header"]["event_id"])
        self._payloads[event_id] = payload
        if not self.reachable:
            return None
        attempt = await self._attempt(payload, manual=False)
        if not attempt.ok and self._ladder:
            task = asyncio.create_task(self._ladder_run(payload), name=f"redeliver-{event_id}")
            self._tasks.add(task)
        return attempt

    async def redeliver(self, event_id: str, url: str | None = None) -> DeliveryAttempt:
        """One extra push of a sent event, as when Feishu redelivers it (to `url` when
        given: another instance behind the balancer)."""
        return await self._attempt(self.payload(event_id), manual=True, url=url)

    async def call(
        self, payload: Mapping[str, Any], deadline_seconds: float
    ) -> tuple[DeliveryAttempt, str]:
        """One push without redelivery (card callbacks are never retried by Feishu)."""
        self._payloads[str(payload["header"]["event_id"])] = payload
        attempt = await self._attempt(payload, manual=False, deadline_seconds=deadline_seconds)
        return attempt, attempt.response_body

    async def post_raw(
        self,
        envelope: Envelope,
        *,
        event_id: str = "",
        event_type: str = "raw",
        deadline_seconds: float | None = None,
    ) -> DeliveryAttempt:
        """POST exactly these bytes and headers (for tampered-signature tests)."""
        answer = await self._post(envelope, deadline_seconds or self.deadline_seconds)
        return self._record(event_id, event_type, answer, manual=True)

    async def _ladder_run(self, payload: Mapping[str, Any]) -> None:
        try:
            for delay in self._ladder:
                await asyncio.sleep(delay)
                if (await self._attempt(payload, manual=False)).ok:
                    return
        finally:
            # Leave the set before announcing the change, so a waiter sees the ladder as done.
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)
            self._on_change()

    async def _attempt(
        self,
        payload: Mapping[str, Any],
        *,
        manual: bool,
        deadline_seconds: float | None = None,
        url: str | None = None,
    ) -> DeliveryAttempt:
        header = payload.get("header", {})
        deadline = deadline_seconds or self.deadline_seconds
        session = self._long_connection() if url is None else None
        if session is not None:
            pushed = await session.push(payload, deadline)
            answer = _Answer(
                pushed.status,
                pushed.body,
                pushed.latency_ms,
                pushed.outcome,
                pushed.started_at,
                pushed.url,
            )
        else:
            answer = await self._post(self.seal(payload), deadline, url)
        return self._record(
            str(header.get("event_id", "")), str(header.get("event_type", "")), answer, manual
        )

    def _record(
        self, event_id: str, event_type: str, answer: _Answer, manual: bool
    ) -> DeliveryAttempt:
        attempt = DeliveryAttempt(
            event_id=event_id,
            event_type=event_type,
            attempt=1 + sum(1 for a in self.attempts if event_id and a.event_id == event_id),
            status=answer.status,
            latency_ms=answer.latency_ms,
            outcome=answer.outcome,
            response_body=answer.body,
            at=answer.started_at,
            manual=manual,
            url=answer.url,
            app_id=self.app_id,
        )
        self.attempts.append(attempt)
        self._on_change()
        return attempt

    async def _post(
        self, envelope: Envelope, deadline_seconds: float, url: str | None = None
    ) -> _Answer:
        if url is None:
            url = self.rng.choice(self.spread) if self.spread else self._webhook_url()
        if url is None:
            raise RuntimeError("the emulator has no webhook_url to deliver to")
        if self._session is None:
            raise RuntimeError("the emulator is not started")
        loop = asyncio.get_running_loop()
        started_at = time.time()
        started = loop.time()
        status: int | None = None
        body = ""
        outcome: DeliveryOutcome
        try:
            async with self._session.post(
                url,
                data=envelope.body,
                headers=dict(envelope.headers),
                timeout=aiohttp.ClientTimeout(total=deadline_seconds),
            ) as response:
                status = response.status
                body = await response.text()
            outcome = "ok" if status == 200 else "non_200"
        except TimeoutError:
            outcome = "timeout"
            status = None
        except aiohttp.ClientError as exc:
            outcome = "error"
            body = f"{type(exc).__name__}: {exc}"
        latency_ms = (loop.time() - started) * 1000
        return _Answer(status, body, latency_ms, outcome, started_at, url)
