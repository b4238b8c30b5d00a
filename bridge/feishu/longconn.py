"""Long-connection intake: Feishu events over lark-oapi's WebSocket client.

The SDK's client is built for a script, not a service: `lark_oapi.ws.client` takes an event
loop at import time (module-level ``loop = asyncio.get_event_loop()``) and `Client.start()`
runs that loop forever. If it ran on the bridge's loop it would block it (or fight over it).
So `LongConnection` owns one daemon thread with its own fresh event loop, installs that loop
as the SDK module's `loop` *before* the client is constructed (its constructor schedules a
cache task on the current loop), and never touches the SDK client from the bridge's loop.
That `loop` is a module global, so each connection runs its own copy of the SDK's module
(`_own_ws_module`): several apps' connections live side by side in one process, each on its
own thread and loop (with one shared module, the second app's loop replaced the first's and
the first's answers to Feishu were lost).

Events come back through the SDK's dispatcher (`EventDispatcherHandler.builder("", "")`,
`register_p2_im_message_receive_v1`, `register_p2_card_action_trigger`, the recall and
`register_p2_application_bot_menu_v6`). Its typed objects
are turned back into the wire JSON (`lark_oapi.JSON.marshal`, which is what the SDK parsed
them from, minus fields it does not model) and go through `bridge.feishu.events` — the same
parser the webhook uses, so both modes produce identical models.

The SDK calls the callbacks synchronously on its thread and answers Feishu after they
return, so each callback hands the event to the bridge's loop with
`asyncio.run_coroutine_threadsafe` and waits for the result at most `deadline` seconds
(2.5 s, under Feishu's 3 s): `on_message` journals and returns in milliseconds; a card click
needs the reply. A handler that fails or times out raises into the SDK, which answers
Feishu with an error so a message is redelivered (dedup downstream makes that safe).

Logging. The SDK logs through the `Lark` logger, and at INFO its "connected to <url>" line
carries the connection ticket in the URL query; at DEBUG it logs every payload. A filter on
that logger (installed while the connection runs) redacts URL queries and payloads, turns
connect / disconnect / reconnect lines into the connection `state` and one line each on this
module's logger, and drops SDK records below `sdk_log_level` (WARNING by default).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import importlib.util
import itertools
import logging
import threading
from collections.abc import Coroutine
from types import ModuleType
from typing import Any, Final, TypeVar

from bridge.feishu.errors import EventParseError
from bridge.feishu.events import (
    BotIdentity,
    CardAction,
    CardActionReply,
    IgnoredEvent,
    InboundMessage,
    MenuClick,
    MessageRecall,
    parse_event,
)
from bridge.feishu.inbound import InboundHandler, RetryLater
from bridge.feishu.json_codec import decode_json
from bridge.feishu.sdk_logs import WEBSOCKETS_LOGGER, LarkLogFilter, RedactFilter

log = logging.getLogger(__name__)

LARK_LOGGER: Final = "Lark"
DEFAULT_DEADLINE: Final = 2.5

_T = TypeVar("_T")


class ConnectionState(enum.Enum):
    IDLE = "idle"  # not started
    CONNECTING = "connecting"  # thread up, first handshake in progress
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"  # lost, the SDK is retrying
    FAILED = "failed"  # the SDK gave up (bad credentials, retries exhausted)
    STOPPED = "stopped"


class HandoffError(RuntimeError):
    """The bridge's loop did not take an event in time (or is gone); the SDK answers 500."""


def sdk_to_payload(obj: Any) -> dict[str, Any]:
    """An SDK event object (P2ImMessageReceiveV1, P2CardActionTrigger, …) → wire JSON dict."""
    import lark_oapi

    from bridge.feishu import sdk_import  # noqa: F401  (before any lark_oapi module)

    raw = lark_oapi.JSON.marshal(obj)
    return decode_json(raw) if raw else {}  # the webhook's checks: depth, valid Unicode


def reply_to_sdk(reply: CardActionReply) -> Any:
    """Our CardActionReply → the SDK's P2CardActionTriggerResponse."""
    from lark_oapi.event.callback.model.p2_card_action_trigger import (
        P2CardActionTriggerResponse,
    )

    from bridge.feishu import sdk_import  # noqa: F401  (before any lark_oapi module)

    return P2CardActionTriggerResponse(reply.to_response())


_COPIES = itertools.count(1)


def _own_ws_module() -> ModuleType:
    """A private copy of `lark_oapi.ws.client` for one connection, so that its module-global
    `loop` is this connection's alone. Made on the connection's own thread, whose loop is
    set: the copy's import-time `asyncio.get_event_loop()` finds it."""
    import lark_oapi.ws.client as shared

    name = f"{shared.__name__}._connection{next(_COPIES)}"
    spec = importlib.util.spec_from_file_location(name, shared.__file__)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot copy {shared.__name__}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LongConnection:
    """Feishu long connection on its own thread; hands events to `handler` on `main_loop`."""

    def __init__(
        self,
        app_id: str,
        app_secret: str,
        domain: str,
        handler: InboundHandler,
        main_loop: asyncio.AbstractEventLoop,
        *,
        bot: BotIdentity | None = None,
        deadline: float = DEFAULT_DEADLINE,
        sdk_log_level: int = logging.WARNING,
        auto_reconnect: bool = True,
        stop_timeout: float = 5.0,
    ) -> None:
        self._app_id = app_id
        self._app_secret = app_secret
        self._domain = domain.rstrip("/")
        self._handler = handler
        self._main_loop = main_loop
        self._bot = bot if bot is not None else BotIdentity()
        self._deadline = deadline
        self._sdk_log_level = sdk_log_level
        self._auto_reconnect = auto_reconnect
        self._stop_timeout = stop_timeout

        self._state = ConnectionState.IDLE
        self.error: str | None = None  # why it failed (the SDK's code and message), for /status
        self._state_lock = threading.Lock()
        self._connected_event = asyncio.Event()  # set/cleared on main_loop only
        self._thread: threading.Thread | None = None
        self._sdk_loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._stopping = threading.Event()
        self._loop_ready = threading.Event()
        self._log_filter = LarkLogFilter(self._observe_sdk_log, sdk_log_level)
        self._ws_log_filter = RedactFilter()
        self._sdk_shutdown = False
        self._lark_level_before = logging.NOTSET

    # --- status ---------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def connected(self) -> bool:
        return self._state is ConnectionState.CONNECTED

    async def wait_connected(self, within: float) -> bool:
        """Wait (on the main loop) until connected; False if not connected `within` seconds."""
        try:
            async with asyncio.timeout(within):
                await self._connected_event.wait()
        except TimeoutError:
            return False
        return True

    def _set_state(self, state: ConnectionState) -> None:
        with self._state_lock:
            previous, self._state = self._state, state
        if previous is state:
            return
        connected = state is ConnectionState.CONNECTED
        with contextlib.suppress(RuntimeError):  # main loop closed during shutdown
            self._main_loop.call_soon_threadsafe(
                self._connected_event.set if connected else self._connected_event.clear
            )
        if connected:
            log.info("feishu long connection: connected")
        elif state is ConnectionState.RECONNECTING:
            log.warning("feishu long connection: lost, reconnecting")
        elif state is ConnectionState.FAILED:
            log.error("feishu long connection: failed, not retrying")
        elif state is ConnectionState.STOPPED:
            log.info("feishu long connection: stopped")
        elif state is ConnectionState.CONNECTING and previous is ConnectionState.CONNECTED:
            log.warning("feishu long connection: disconnected")

    def _observe_sdk_log(self, message: str) -> None:
        if self._stopping.is_set():
            return
        if message.startswith("connected to "):
            self._set_state(ConnectionState.CONNECTED)
        elif message.startswith(("disconnected to ", "receive message loop exit")):
            if self._state is ConnectionState.CONNECTED:
                self._set_state(
                    ConnectionState.RECONNECTING
                    if self._auto_reconnect
                    else ConnectionState.CONNECTING
                )
        elif message.startswith("trying to reconnect"):
            self._set_state(ConnectionState.RECONNECTING)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the connection thread and return at once (call from the main loop's thread
        or any other; the main loop is only used for handing events over)."""
        if self._thread is not None:
            raise RuntimeError("LongConnection.start() called twice")
        lark_logger = logging.getLogger(LARK_LOGGER)
        self._lark_level_before = lark_logger.level  # the SDK client sets its own level
        lark_logger.addFilter(self._log_filter)
        logging.getLogger(WEBSOCKETS_LOGGER).addFilter(self._ws_log_filter)
        self._set_state(ConnectionState.CONNECTING)
        self._thread = threading.Thread(
            target=self._run, name="feishu-long-connection", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        """Stop the SDK loop, close the socket, join the thread (at most `stop_timeout`)."""
        timeout = self._stop_timeout
        thread = self._thread
        if thread is None:
            self._set_state(ConnectionState.STOPPED)
            return
        self._stopping.set()
        loop = self._sdk_loop
        if self._loop_ready.is_set() and loop is not None:
            with contextlib.suppress(RuntimeError):  # already closed: the thread has ended
                loop.call_soon_threadsafe(self._interrupt_sdk_loop)
        await asyncio.to_thread(thread.join, timeout)
        if thread.is_alive():
            # Blocked in the SDK's synchronous endpoint request; the thread is a daemon.
            log.warning("feishu long connection: thread did not stop within %.1fs", timeout)
        lark_logger = logging.getLogger(LARK_LOGGER)
        lark_logger.removeFilter(self._log_filter)
        lark_logger.setLevel(self._lark_level_before)
        logging.getLogger(WEBSOCKETS_LOGGER).removeFilter(self._ws_log_filter)
        self._stopping.clear()
        self._set_state(ConnectionState.STOPPED)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            client = self._build_client(loop)
        except Exception as exc:
            log.exception("feishu long connection: cannot build the SDK client")
            self.error = f"cannot build the SDK client: {type(exc).__name__}"
            self._set_state(ConnectionState.FAILED)
            loop.close()
            return
        self._sdk_loop = loop
        self._client = client
        self._loop_ready.set()
        try:
            if not self._stopping.is_set():
                client.start()
        except (asyncio.CancelledError, RuntimeError) as exc:
            # Cancelled tasks / "Event loop stopped" are how our own stop() ends start().
            if not self._stopping.is_set():
                log.error("feishu long connection: SDK loop ended: %s", type(exc).__name__)
                self.error = f"the SDK's loop ended: {type(exc).__name__}"
                self._set_state(ConnectionState.FAILED)
        except Exception as exc:
            if not self._stopping.is_set():
                # The SDK's exceptions carry the server's code and message, never a secret.
                log.error("feishu long connection: %s: %s", type(exc).__name__, exc)
                self.error = f"{type(exc).__name__}: {exc}"
                self._set_state(ConnectionState.FAILED)
        finally:
            self._sdk_shutdown = True
            self._shutdown_sdk_loop(loop, client)

    def _interrupt_sdk_loop(self) -> None:
        """On the SDK loop: end whatever `Client.start()` is running. `start()` runs several
        `run_until_complete` calls in a row (connect, reconnect, the endless select), so one
        cancellation could land between two of them; repeat until the thread has left
        `start()`."""
        if self._sdk_shutdown or self._sdk_loop is None:
            return
        client = self._client
        if client is not None:
            client._auto_reconnect = False  # start() must not fall into its reconnect loop
        for task in asyncio.all_tasks(self._sdk_loop):
            task.cancel()
        self._sdk_loop.call_later(0.05, self._interrupt_sdk_loop)

    def _build_client(self, loop: asyncio.AbstractEventLoop) -> Any:
        import lark_oapi

        from bridge.feishu import sdk_import  # noqa: F401  (before any lark_oapi module)

        ws_client = _own_ws_module()

        # The SDK module uses this global for everything it schedules; point it at our loop
        # before the client's constructor creates its cache task on the current loop.
        ws_client.loop = loop  # type: ignore[attr-defined]
        dispatcher = (
            lark_oapi.EventDispatcherHandler.builder("", "")
            .register_p2_im_message_receive_v1(self.on_sdk_message)
            .register_p2_card_action_trigger(self.on_sdk_card_action)
            .register_p2_im_message_recalled_v1(self.on_sdk_recall)
            .register_p2_application_bot_menu_v6(self.on_sdk_menu)
            .build()
        )
        # At least INFO: the connect / disconnect lines are how `state` is tracked.
        debug = self._sdk_log_level <= logging.DEBUG
        level = lark_oapi.LogLevel.DEBUG if debug else lark_oapi.LogLevel.INFO
        client = ws_client.Client(
            self._app_id,
            self._app_secret,
            log_level=level,
            event_handler=dispatcher,
            domain=self._domain,
            auto_reconnect=self._auto_reconnect,
        )
        client.on_reconnecting = lambda: self._set_state(ConnectionState.RECONNECTING)
        client.on_reconnected = lambda: self._set_state(ConnectionState.CONNECTED)
        return client

    def _shutdown_sdk_loop(self, loop: asyncio.AbstractEventLoop, client: Any) -> None:
        try:
            client._auto_reconnect = False  # no reconnect from the receive loop we cancel
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                # Bounded: the SDK's ping loop sleeps in a `finally` and may outlive one cancel.
                loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
            conn = getattr(client, "_conn", None)
            if conn is not None:
                loop.run_until_complete(asyncio.wait_for(conn.close(), 2.0))
                client._conn = None
            loop.run_until_complete(loop.shutdown_asyncgens())
        except Exception as exc:
            log.warning("feishu long connection: unclean shutdown (%s)", type(exc).__name__)
        finally:
            loop.close()

    # --- SDK callbacks (run on the SDK thread) --------------------------------------------

    def on_sdk_message(self, data: Any) -> None:
        """The SDK callback for `im.message.receive_v1` (runs on the SDK thread)."""
        event = self._parse(data)
        if not isinstance(event, InboundMessage):
            return
        ids = f"event_id={event.event_id} message_id={event.message_id}"
        try:
            # Not cancelled when late: see webhook.py, a cut hand-over can strand a message.
            self._call_main(self._handler.on_message(event), cancel_late=False)
        except (HandoffError, RetryLater) as exc:
            log.error("feishu long connection: on_message %s, %s; asking for redelivery", exc, ids)
            raise
        except Exception:
            log.exception(
                "feishu long connection: on_message failed, %s; asking for redelivery", ids
            )
            raise

    def on_sdk_recall(self, data: Any) -> None:
        """The SDK callback for `im.message.recalled_v1` (runs on the SDK thread)."""
        event = self._parse(data)
        if not isinstance(event, MessageRecall):
            return
        try:
            self._call_main(self._handler.on_recall(event), cancel_late=False)
        except Exception:
            log.exception("feishu long connection: on_recall failed, event_id=%s", event.event_id)
            raise

    def on_sdk_menu(self, data: Any) -> None:
        """The SDK callback for `application.bot.menu_v6` (runs on the SDK thread)."""
        event = self._parse(data)
        if not isinstance(event, MenuClick):
            return
        try:
            self._call_main(self._handler.on_menu(event), cancel_late=False)
        except Exception:
            log.exception("feishu long connection: on_menu failed, event_id=%s", event.event_id)
            raise

    def on_sdk_card_action(self, data: Any) -> Any:
        """The SDK callback for `card.action.trigger`; returns P2CardActionTriggerResponse."""
        event = self._parse(data)
        if not isinstance(event, CardAction):
            raise EventParseError("card callback did not parse as a card action")
        ids = f"event_id={event.event_id} message_id={event.open_message_id}"
        try:
            reply = self._call_main(self._handler.on_card_action(event))
        except HandoffError as exc:
            log.error("feishu long connection: on_card_action %s, %s", exc, ids)
            raise
        except Exception:
            log.exception("feishu long connection: on_card_action failed, %s", ids)
            raise
        return reply_to_sdk(reply)

    def _parse(self, data: Any) -> InboundMessage | CardAction | MessageRecall | MenuClick | None:
        try:
            event = parse_event(
                sdk_to_payload(data),
                bot_open_id=self._bot.open_id,
                bot_name=self._bot.name,
                sibling_names=self._bot.sibling_names(),
            )
        except EventParseError as exc:
            log.warning("feishu long connection: rejected event, %s", exc.reason)
            raise
        if isinstance(event, IgnoredEvent):
            log.info("feishu long connection: ignored %s (%s)", event.event_type, event.reason)
            return None
        if isinstance(event, InboundMessage | CardAction | MessageRecall | MenuClick):
            return event
        log.info("feishu long connection: ignored url_verification")
        return None

    def _call_main(self, coro: Coroutine[Any, Any, _T], *, cancel_late: bool = True) -> _T:
        """Run `coro` on the main loop; wait for it on this (SDK) thread within the deadline.
        Past it, the caller gets `HandoffError`; `coro` is cancelled unless `cancel_late` is
        false, when it finishes on the main loop."""
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._main_loop)
        except RuntimeError:  # main loop closed
            coro.close()
            raise HandoffError("main loop is not running") from None
        try:
            return future.result(timeout=self._deadline)
        except concurrent.futures.TimeoutError:
            if cancel_late:
                future.cancel()
            raise HandoffError(f"exceeded {self._deadline:.1f}s") from None
        except concurrent.futures.CancelledError:
            raise HandoffError("was cancelled") from None
