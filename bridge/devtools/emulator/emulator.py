"""`FeishuEmulator`: the loopback Feishu that integration tests and `demo` talk to.

It serves Feishu's HTTP API (`server.OpenApi`) on a random 127.0.0.1 port, plays the Feishu
side of the webhook (`delivery.EventDelivery`), keeps the chat world (`chats.ChatWorld`), and
serves a small chat page (`page`). Tests drive it through the methods here and assert on the
typed records; `wait_for` wakes on every change, so no test polls or sleeps.

Apps: one by default, described by the flat fields (`app_id`, `app_secret`, …); or several,
`apps=[AppSpec(…), …]`, each with its own credentials, tokens, keys, webhook, bot and rate
meters (`apps.py`). The flat attributes (`app_id`, `bot_open_id`, `webhook_url`, `limits`, …)
and every method's default are the first app's; the methods that act for one app or read
one app's records take `app_id`.

Time: Feishu's redelivery ladder (15 s, 5 min, 1 h, 6 h) and its 3-second answer deadline are
multiplied by `time_scale`. The deadlines never drop below `MIN_DEADLINE_S` unless given
explicitly, because a loaded CI machine can take a few hundred ms on a first request and a
spuriously "late" answer would make tests flaky; tests of the deadline itself pass
`deadline_seconds` / `card_deadline_seconds`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Literal, TypeVar

from aiohttp import web

from bridge.devtools.emulator import page
from bridge.devtools.emulator.apps import SINGLE_APP_FIELDS, AppSpec, GroupMessages, HostedApp
from bridge.devtools.emulator.cardkit import CardKit
from bridge.devtools.emulator.chats import ChatWorld, new_id
from bridge.devtools.emulator.delivery import (
    FEISHU_DEADLINE_S,
    FEISHU_REDELIVERY_LADDER_S,
    EventDelivery,
)
from bridge.devtools.emulator.faults import Fault, FaultKind, FaultPlan
from bridge.devtools.emulator.limits import RateLimits
from bridge.devtools.emulator.longconn import Credentials, LongConnections
from bridge.devtools.emulator.outage import Outage, OutageState, Plan, RefusedCall
from bridge.devtools.emulator.people import People
from bridge.devtools.emulator.records import (
    ApiCall,
    CardCallbackResult,
    ChatMessage,
    DeliveryAttempt,
    LongConnection,
    Reaction,
    SenderType,
)
from bridge.devtools.emulator.server import OpenApi
from bridge.devtools.emulator.speech import SpeechRecognition
from bridge.devtools.emulator.tokens import TokenIssuer
from bridge.devtools.emulator.urgent import Urgent, Urgents
from bridge.devtools.emulator.users import UserSide

T = TypeVar("T")

MIN_DEADLINE_S = 0.5


def _loopback(host: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the emulator only listens on loopback, not {host!r}")
    return host


@dataclass(frozen=True)
class EmulatorOptions:
    """Who the emulated app is (or `apps`: who they are), how Feishu's clocks run, where it
    listens. Pass the fields as keywords to `FeishuEmulator(...)`, or an instance to share
    one set."""

    app_id: str = "cli_emulator00000001"
    app_secret: str = "emulator-app-secret"
    encrypt_key: str = ""
    verification_token: str = "emulator-verification-token"
    webhook_url: str | None = None
    time_scale: float = 1.0
    deadline_seconds: float | None = None
    card_deadline_seconds: float | None = None
    redelivery_ladder_seconds: Sequence[float] = FEISHU_REDELIVERY_LADDER_S
    token_ttl_seconds: int = 7200
    idempotency_window_seconds: float = 3600.0
    bot_name: str = "Presence Bot"
    user_name: str = "Emulated User"
    tenant_key: str | None = None
    scenarios: Sequence[str] = ()
    host: str = "127.0.0.1"
    port: int = 0
    speech_scope: bool = True  # the app has speech_to_text:speech (99991672 without it)
    urgent_scope: bool = True  # the app has im:message.urgent (99991672 without it)
    # Several apps, the first being the one the flat attributes name; instead of the single
    # app's fields above (app_id … bot_name), which must then be left as they are.
    apps: Sequence[AppSpec] = ()


def _app_specs(o: EmulatorOptions) -> tuple[AppSpec, ...]:
    if not o.apps:
        return (AppSpec(**{name: getattr(o, name) for name in SINGLE_APP_FIELDS}),)
    defaults = EmulatorOptions()
    changed = [n for n in SINGLE_APP_FIELDS if getattr(o, n) != getattr(defaults, n)]
    if changed:
        raise ValueError(f"give {', '.join(changed)} in the AppSpecs of `apps`, not beside them")
    ids = [spec.app_id for spec in o.apps]
    if len(set(ids)) != len(ids):
        raise ValueError(f"each app once: {ids}")
    return tuple(o.apps)


class FeishuEmulator(UserSide):
    def __init__(
        self,
        options: EmulatorOptions | None = None,
        /,
        *,
        clock: Callable[[], float] = time.monotonic,
        **fields: Any,
    ) -> None:
        o = replace(options or EmulatorOptions(), **fields)  # an unknown field is a TypeError
        time_scale = o.time_scale
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        specs = _app_specs(o)
        self.time_scale = time_scale
        self.user_name = o.user_name
        self.tenant_key = o.tenant_key or secrets.token_hex(8)  # one tenant, all its apps
        self.scenarios: tuple[str, ...] = tuple(o.scenarios)
        self.default_user_open_id = new_id("ou_")
        self._host = _loopback(o.host)
        self._requested_port = o.port
        self._port: int | None = None
        scaled_deadline = max(FEISHU_DEADLINE_S * time_scale, MIN_DEADLINE_S)
        self.card_deadline_seconds = o.card_deadline_seconds or scaled_deadline

        self._revision = 0
        self._change = asyncio.Event()
        self._closing = asyncio.Event()
        self._calls: list[ApiCall] = []
        self._callbacks: list[CardCallbackResult] = []
        self._attempts: list[DeliveryAttempt] = []  # every app's pushes, in order
        self._faults = FaultPlan()
        self.outage = Outage(clock=clock, on_change=self._changed)
        self._people = People(specs[0].app_id)
        group_messages: GroupMessages = "all" if len(specs) == 1 else "mentioned"
        self._long_connections = LongConnections(
            credentials=self._credentials, base_url=lambda: self.url, on_change=self._changed
        )

        def delivery(app: HostedApp) -> EventDelivery:
            return EventDelivery(
                encrypt_key=app.encrypt_key,
                ladder_seconds=[s * time_scale for s in o.redelivery_ladder_seconds],
                deadline_seconds=o.deadline_seconds or scaled_deadline,
                webhook_url=lambda: app.webhook_url,
                on_change=self._changed,
                app_id=app.app_id,
                attempts=self._attempts,
                long_connection=lambda: self._long_connections.pick(app.app_id),
            )

        self.apps = {}
        for spec in specs:
            bot_open_id = new_id("ou_")
            bot_person = bot_open_id if not self.apps else new_id("ou_")
            self._people.register(bot_person, spec.app_id, bot_open_id)
            self.apps[spec.app_id] = HostedApp(
                spec,
                group_messages=spec.group_messages or group_messages,
                bot_person=bot_person,
                bot_open_id=bot_open_id,
                tokens=TokenIssuer(spec.app_id, spec.app_secret, o.token_ttl_seconds, clock),
                limits=RateLimits(clock=clock),  # Feishu's rate limits, once set
                delivery=delivery,
            )
        self._world = ChatWorld(
            app_ids=list(self.apps),
            people=self._people,
            tenant_key=self.tenant_key,
            idempotency_window_seconds=o.idempotency_window_seconds,
            clock=clock,
            on_change=self._changed,
        )
        self._group_chat_id = self._world.open_chat("group").chat_id  # with every bot
        self.cardkit = CardKit(redraw=self._world.replace_card)
        self.speech = SpeechRecognition()  # speech_to_text/v1; `scope_granted`, transcripts
        self.speech.scope_granted = o.speech_scope
        self.urgent = Urgents(self._world)  # urgent_app; `scope_granted`, `sent`
        self.urgent.scope_granted = o.urgent_scope
        self._runner: web.AppRunner | None = None

    # --- lifecycle -----------------------------------------------------------------------
    async def __aenter__(self) -> FeishuEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the emulator is already running")
        self._closing.clear()
        api = OpenApi(
            apps=self.apps,
            world=self._world,
            faults=self._faults,
            outage=self.outage,
            record=self._record_call,
            closing=self._closing,
            cardkit=self.cardkit,
            speech=self.speech,
            urgents=self.urgent,
        )
        app = web.Application()
        app.router.add_route("*", "/open-apis/{tail:.*}", api.handle)
        self._long_connections.add_routes(app)
        page.add_routes(app, self)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((self._host, self._requested_port))
            site = web.SockSite(runner, sock)
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._port = int(sock.getsockname()[1])
        self._runner = runner
        for hosted in self.apps.values():
            await hosted.delivery.start()

    async def close(self) -> None:
        self._closing.set()  # ends held (timeout-fault) answers and page long-polls
        self._changed()
        await self._long_connections.drop()
        for hosted in self.apps.values():
            await hosted.delivery.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- addresses -----------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        return self._port

    @property
    def url(self) -> str:
        """The base URL the bridge uses as its Feishu domain (FEISHU_DOMAIN)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    # --- the first app, as a one-app emulator has it ----------------------------------------
    @property
    def app_id(self) -> str:
        return self.app().app_id

    @property
    def app_secret(self) -> str:
        """A fake credential; exposed so tests can log in."""
        return self.app().app_secret

    @property
    def encrypt_key(self) -> str:
        return self.app().encrypt_key

    @property
    def verification_token(self) -> str:
        return self.app().verification_token

    @property
    def bot_name(self) -> str:
        return self.app().bot_name

    @property
    def bot_open_id(self) -> str:
        return self.app().bot_open_id

    @property
    def limits(self) -> RateLimits:
        """The first app's rate-limit meters (`app(app_id).limits`: another app's)."""
        return self.app().limits

    @property
    def app_ids(self) -> tuple[str, ...]:
        return tuple(self.apps)

    @property
    def webhook_url(self) -> str | None:
        return self.app().webhook_url

    @webhook_url.setter
    def webhook_url(self, value: str | None) -> None:
        self.app().webhook_url = value

    def set_webhook_url(self, url: str | None, app_id: str | None = None) -> None:
        """Where an app's events go (its developer console's request URL)."""
        self.app(app_id).webhook_url = url

    def spread_webhooks(
        self, urls: Sequence[str], seed: int = 0, app_id: str | None = None
    ) -> None:
        """Several bridge instances behind a load balancer: every push and card callback of
        the app goes to one of `urls` at random (seeded); `deliveries()` record which."""
        app = self.app(app_id)
        app.webhook_url = urls[0] if urls else None
        app.delivery.spread = tuple(urls)
        app.delivery.rng.seed(seed)

    @property
    def deadline_seconds(self) -> float:
        return self.app().delivery.deadline_seconds

    @property
    def p2p_chat_id(self) -> str:
        """The default user's private chat with the (first app's) bot."""
        return self.p2p_chat()

    def p2p_chat(self, app_id: str | None = None, user_open_id: str | None = None) -> str:
        """A user's (default: the default user's) private chat with an app's bot."""
        user = user_open_id or self.default_user_open_id
        bots = (self.app(app_id).app_id,)
        return self._world.open_chat("p2p", user_open_id=user, bots=bots).chat_id

    @property
    def group_chat_id(self) -> str:
        """A group chat every bot is in, used when a group message names no chat."""
        return self._group_chat_id

    # --- test hooks ----------------------------------------------------------------------
    def expire_tokens(self, app_id: str | None = None) -> None:
        """Every tenant_access_token issued (to `app_id`; default: to any app) becomes
        invalid (99991663 on next use)."""
        for app in [self.app(app_id)] if app_id is not None else self.apps.values():
            app.tokens.expire_all()

    def fail_next(
        self,
        method: str,
        path_pattern: str,
        kind: FaultKind | str,
        times: int = 1,
        *,
        code: int | None = None,
        msg: str | None = None,
        http_status: int | None = None,
        reset_seconds: int = 1,
        hold_seconds: float = 5.0,
        apply: bool = True,
        app_id: str | None = None,
    ) -> None:
        """The next `times` calls matching `method` ("*" for any) and the fnmatch glob
        `path_pattern` (and made by `app_id`, when given) fail with `kind`. See
        `faults.FaultKind` for what each one answers."""
        if app_id is not None:
            self.app(app_id)  # a typo must not arm a fault that never fires
        self._faults.arm(
            Fault(
                kind=FaultKind(kind),
                method=method,
                path_pattern=path_pattern,
                code=code,
                msg=msg,
                http_status=http_status,
                reset_seconds=reset_seconds,
                hold_seconds=hold_seconds,
                apply=apply,
                app_id=app_id,
            ),
            times,
        )

    def clear_faults(self) -> None:
        self._faults.clear()

    def set_api_outage(self, plan: Plan, **options: Any) -> OutageState:
        """Take the message API down now: a mode ("503", "429", "timeout"; "up" ends it)
        until changed, or a schedule such as `[("503", 20), ("429", 20), ("timeout", 20)]`
        after which it is up; `apps=[…]` for those apps' calls only. Options and answers:
        `outage.Outage.set`."""
        for app_id in options.get("apps") or ():
            self.app(app_id)
        return self.outage.set(plan, **options)

    def set_rate_limits(self, app_id: str | None = None, **limits: Any) -> None:
        """Enforce Feishu's rate limits (app calls a second, sends a minute, calls a second to
        one chat): past one a call gets Feishu's 429. Options: `limits.RateLimits.set`. Each
        app has its own meters, as Feishu meters per app: these limits for `app_id`, or
        (None) the same limits for every app, each counting its own calls."""
        for app in [self.app(app_id)] if app_id is not None else self.apps.values():
            app.limits.set(**limits)

    def refused_calls(self) -> list[RefusedCall]:
        """Every call refused by an outage, in order, with the mode and the clock time."""
        return list(self.outage.refused)

    def open_chat(
        self,
        chat_type: str = "p2p",
        *,
        chat_id: str | None = None,
        user_open_id: str | None = None,
        bots: Sequence[str] | None = None,
    ) -> str:
        """Make a chat exist (its bots can post to it); returns its chat_id. A group's `bots`
        are app_ids (default: every app's bot); a private chat is the user's with one bot
        (`bots=[app_id]`, default the first app's)."""
        if chat_type == "p2p" and user_open_id is None:
            user_open_id = self.default_user_open_id
        return self._world.open_chat(chat_type, chat_id, user_open_id, bots=bots).chat_id

    def add_chat_bots(self, chat_id: str, app_ids: Sequence[str]) -> None:
        """These apps' bots join a group."""
        self._world.add_bots(chat_id, app_ids)

    def chat_bots(self, chat_id: str) -> tuple[str, ...]:
        """The app_ids of the bots in a chat, in the emulator's order of apps."""
        bots = self._world.chats[chat_id].bots
        return tuple(a for a in self.apps if a in bots)

    def add_chat_members(self, chat_id: str, open_ids: Sequence[str]) -> None:
        """People in a chat besides those who wrote there (an urgent notification reaches
        only members)."""
        self._world.add_members(chat_id, open_ids)

    # --- records (each narrowed to one app's with `app_id`) ------------------------------
    def urgents(self, message_id: str | None = None, *, app_id: str | None = None) -> list[Urgent]:
        """Every urgent notification Feishu sent (加急), in order."""
        return [
            u
            for u in self.urgent.sent
            if (message_id is None or u.message_id == message_id)
            and (app_id is None or u.app_id == app_id)
        ]

    def calls(
        self,
        path_prefix: str | None = None,
        method: str | None = None,
        *,
        app_id: str | None = None,
    ) -> list[ApiCall]:
        """Every call to `/open-apis/…`, in order; `app_id`: those that app made."""
        return [
            c
            for c in self._calls
            if (path_prefix is None or c.path.startswith(path_prefix))
            and (method is None or c.method == method.upper())
            and (app_id is None or c.app_id == app_id)
        ]

    def messages(
        self,
        chat_id: str | None = None,
        *,
        sender_type: SenderType | None = None,
        app_id: str | None = None,
    ) -> list[ChatMessage]:
        """The chat timeline (user and bot messages in order), cards as currently patched;
        `app_id`: only what that app's bot posted."""
        return [
            m
            for m in self._world.timeline(chat_id)
            if (sender_type is None or m.sender_type == sender_type)
            and (app_id is None or m.app_id == app_id)
        ]

    def bot_messages(
        self, chat_id: str | None = None, *, app_id: str | None = None
    ) -> list[ChatMessage]:
        """What the bots posted (`app_id`: what that app's bot posted), in order."""
        return self.messages(chat_id, sender_type="app", app_id=app_id)

    def message(self, message_id: str) -> ChatMessage:
        return self._world.messages[message_id]

    def reactions(self, message_id: str, *, app_id: str | None = None) -> list[Reaction]:
        """The reactions currently on a message (removed ones are gone); `app_id`: that
        app's bot's."""
        return [
            r
            for r in self._world.reactions_on(message_id)
            if app_id is None or r.operator_id == app_id
        ]

    def deliveries(
        self, event_id: str | None = None, *, app_id: str | None = None
    ) -> list[DeliveryAttempt]:
        """Every push of an event or a card callback, every app's, in order."""
        return [
            a
            for a in self._attempts
            if (event_id is None or a.event_id == event_id)
            and (app_id is None or a.app_id == app_id)
        ]

    def long_connections(self, app_id: str | None = None) -> list[LongConnection]:
        """The long connections open now (of `app_id`), in the order they were opened."""
        return [
            LongConnection(s.app_id, s.conn_id, s.connected_at, s.pings)
            for s in self._long_connections.sessions
            if app_id is None or s.app_id == app_id
        ]

    def long_connection_refused(self, app_id: str | None = None) -> str | None:
        """Why the app's latest try to open a long connection was refused (wrong secret,
        too many connections); None once one is open."""
        return self._long_connections.refused.get(self.app(app_id).app_id)

    async def drop_long_connections(self, app_id: str | None = None) -> int:
        """Close the long connections (of `app_id`) from Feishu's side, as a gateway restart
        does; returns how many. The clients reconnect as their ClientConfig says."""
        return await self._long_connections.drop(app_id)

    @property
    def redeliveries_pending(self) -> int:
        """Events whose redelivery ladder is still running."""
        return sum(app.delivery.redeliveries_pending for app in self.apps.values())

    def card_callbacks(self, *, app_id: str | None = None) -> list[CardCallbackResult]:
        return [c for c in self._callbacks if app_id is None or c.app_id == app_id]

    @property
    def revision(self) -> int:
        """Bumped on every recorded change."""
        return self._revision

    async def wait_for(
        self,
        predicate: Callable[[], T | Literal[False] | None],
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> T:
        """Wait until `predicate()` is truthy and return its value; it is re-evaluated on
        every change the emulator records (never on a timer). The `timeout` parameter (rather
        than the caller's `asyncio.timeout`) lets the error name the last calls seen."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    result = predicate()
                    if result:
                        return result
                    await self._change.wait()
        except TimeoutError:
            recent = ", ".join(f"{c.method} {c.path} -> {c.status}" for c in self._calls[-5:])
            raise TimeoutError(
                f"condition not met within {timeout}s (last calls: {recent or 'none'})"
            ) from None

    async def wait_revision(self, since: int, max_wait: float) -> int:
        """Wait until the revision passes `since` (for the page's long-poll)."""
        try:
            async with asyncio.timeout(max_wait):
                while self._revision <= since and not self._closing.is_set():
                    await self._change.wait()
        except TimeoutError:
            pass
        return self._revision

    # --- internals -----------------------------------------------------------------------
    def _credentials(self, app_id: str) -> Credentials | None:
        app = self.apps.get(app_id)
        return None if app is None else Credentials(app.app_id, app.app_secret)

    def _record_call(self, call: ApiCall) -> None:
        self._calls.append(call)
        self._changed()

    def _changed(self) -> None:
        # A fresh Event per revision: everyone waiting on the old one wakes exactly once.
        self._revision += 1
        self._change.set()
        self._change = asyncio.Event()
