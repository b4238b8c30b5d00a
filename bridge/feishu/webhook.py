"""Webhook intake: `POST /feishu/events` on aiohttp.

One request, in this order (each step answers on its own and logs one line naming the reason,
never a secret, a body or message text):

1. signature — when an encrypt key is configured and the request carries `X-Lark-Signature`,
   it must match (401 otherwise). A request without signature headers is accepted only if it
   turns out to be `url_verification` (Feishu does not sign that one); anything else unsigned
   is 401.
2. JSON, then decryption of `{"encrypt": …}` — malformed or undecryptable → 400.
3. verification token, when configured — `header.token` (schema 2.0) or `token`
   (`url_verification`, schema 1.0); missing or wrong → 403.
4. `url_verification` → `{"challenge": …}`; an event type the bridge does not handle → 200
   `{}` and an info line; a handled type whose payload is malformed → 400.
5. a message → `await handler.on_message` (journal and schedule, milliseconds), a card click
   → `await handler.on_card_action`, a bot-menu click → `await handler.on_menu`; all bounded
   by `deadline` (2.5 s default) so Feishu, which gives up after 3 s, always gets an answer.
   The work itself happens elsewhere.

Failures of the handler. A message whose `on_message` raises or runs past the deadline was
not journaled for sure, so the answer is 500/503: Feishu redelivers (seconds to hours later)
and the receiver's dedup on event/message id makes the redelivery safe — a lost message is
worse than a retried one. A hand-over that runs past the deadline is not cancelled: its store
write may already be committing in the database's thread, and a hand-over cut between that
commit and the hand-off would leave the message journaled (so the redelivery is taken as a
duplicate) yet never run. It finishes in the background; the redelivery then finds it either
handed over (a duplicate, rightly) or not journaled at all (and runs it). `RetryLater` from the
handler (the bot's identity still unknown) is a 503 too.

A card click whose handler fails is answered 500: Feishu shows its own "try again" toast
and the card stays as it was, which is honest; a click is not redelivered, the user clicks
again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

from aiohttp import web

from bridge.feishu import crypto
from bridge.feishu.errors import EventParseError
from bridge.feishu.events import (
    BotIdentity,
    CardAction,
    IgnoredEvent,
    InboundMessage,
    MenuClick,
    MessageRecall,
    UrlVerification,
    event_token,
    event_type_of,
    parse_event,
)
from bridge.feishu.inbound import InboundHandler, RetryLater
from bridge.feishu.json_codec import decode_json

log = logging.getLogger(__name__)

EVENTS_PATH: Final = "/feishu/events"
DEFAULT_DEADLINE: Final = 2.5


def _json(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda o: json.dumps(o, ensure_ascii=False))


def _error(status: int, code: str) -> web.Response:
    return _json({"error": code}, status=status)


class FeishuEventEndpoint:
    """The request handler behind `webhook_routes`; usable on its own in tests."""

    def __init__(
        self,
        handler: InboundHandler,
        *,
        encrypt_key: str | None,
        verification_token: str | None,
        bot: BotIdentity,
        deadline: float = DEFAULT_DEADLINE,
    ) -> None:
        self._handler = handler
        self._encrypt_key = encrypt_key or None
        self._token = verification_token or None
        self._bot = bot
        self._deadline = deadline
        # Hand-overs that outlived the deadline, kept referenced until they finish.
        self._late: set[asyncio.Task[None]] = set()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._handle(request)
        except Exception:
            # A bug here must not become aiohttp's HTML 500 with the body in a traceback.
            log.exception("feishu webhook: unexpected failure")
            return _error(500, "internal")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            log.warning("feishu webhook: rejected, body too large")
            return _error(413, "too_large")

        signed = False
        if self._encrypt_key is not None and crypto.has_signature(request.headers):
            try:
                crypto.verify_signature(request.headers, body, self._encrypt_key)
            except crypto.SignatureError as exc:
                log.warning("feishu webhook: rejected, %s", exc.reason)
                return _error(401, "bad_signature")
            signed = True

        try:
            payload = decode_json(body)
            payload = self._decrypt(payload)
        except EventParseError as exc:
            log.warning("feishu webhook: rejected, %s", exc.reason)
            return _error(400, "malformed")
        except crypto.DecryptError as exc:
            log.warning("feishu webhook: rejected, %s", exc.reason)
            return _error(400, "undecryptable")

        event_type = event_type_of(payload) or "unknown"
        if self._encrypt_key is not None and not signed and event_type != "url_verification":
            log.warning("feishu webhook: rejected %s, signature headers missing", event_type)
            return _error(401, "bad_signature")

        if self._token is not None:
            try:
                crypto.verify_token(event_token(payload), self._token)
            except crypto.TokenError as exc:
                log.warning("feishu webhook: rejected %s, %s", event_type, exc.reason)
                return _error(403, "bad_token")

        try:
            event = parse_event(
                payload,
                bot_open_id=self._bot.open_id,
                bot_name=self._bot.name,
                sibling_names=self._bot.sibling_names(),
            )
        except EventParseError as exc:
            log.warning("feishu webhook: rejected %s, %s", event_type, exc.reason)
            return _error(400, "malformed")
        except Exception as exc:
            # Parsing is pure: what fails once fails on every redelivery, so it is a 400 (a
            # 5xx would have Feishu redeliver it for hours). The type only, never the body.
            reason = type(exc).__name__
            log.warning("feishu webhook: rejected %s, unparseable (%s)", event_type, reason)
            return _error(400, "malformed")

        if isinstance(event, UrlVerification):
            log.info("feishu webhook: url_verification answered")
            return _json({"challenge": event.challenge})
        if isinstance(event, IgnoredEvent):
            log.info(
                "feishu webhook: ignored %s event_id=%s (%s)",
                event.event_type,
                event.event_id,
                event.reason,
            )
            return _json({})
        if isinstance(event, InboundMessage):
            return await self._message(event)
        if isinstance(event, MessageRecall):
            return await self._recall(event)
        if isinstance(event, MenuClick):
            return await self._menu(event)
        return await self._card_action(event)

    async def _menu(self, click: MenuClick) -> web.Response:
        try:
            await asyncio.wait_for(self._handler.on_menu(click), self._deadline)
        except Exception:
            # Redelivered later; the receiver's event claim keeps a second one harmless.
            log.exception("feishu webhook: on_menu failed, event_id=%s", click.event_id)
            return _error(500, "handler_failed")
        return _json({})

    async def _recall(self, recall: MessageRecall) -> web.Response:
        try:
            await asyncio.wait_for(self._handler.on_recall(recall), self._deadline)
        except Exception:
            # Redelivered later; the receiver's event claim keeps a second one harmless.
            log.exception("feishu webhook: on_recall failed, event_id=%s", recall.event_id)
            return _error(500, "handler_failed")
        return _json({})

    def _decrypt(self, payload: dict[str, Any]) -> dict[str, Any]:
        encrypted = payload.get("encrypt")
        if encrypted is None:
            return payload
        if not isinstance(encrypted, str) or not encrypted:
            raise EventParseError("`encrypt` is not a string")
        if self._encrypt_key is None:
            raise crypto.DecryptError("encrypted body but no encrypt key is configured")
        return decode_json(crypto.decrypt_payload(encrypted, self._encrypt_key))

    async def _message(self, message: InboundMessage) -> web.Response:
        ids = f"event_id={message.event_id} message_id={message.message_id}"
        handover = asyncio.ensure_future(self._handler.on_message(message))
        try:
            await asyncio.wait_for(asyncio.shield(handover), self._deadline)
        except TimeoutError:
            log.error(
                "feishu webhook: on_message exceeded %.1fs, %s; asking for redelivery",
                self._deadline,
                ids,
            )
            self._finish_late(handover, ids)
            return _error(503, "busy")
        except RetryLater as exc:
            log.warning("feishu webhook: %s, %s; asking for redelivery", exc, ids)
            return _error(503, "retry_later")
        except Exception:
            log.exception("feishu webhook: on_message failed, %s; asking for redelivery", ids)
            return _error(500, "handler_failed")
        log.debug("feishu webhook: handed over %s type=%s", ids, message.message_type)
        return _json({})

    def _finish_late(self, handover: asyncio.Task[None], ids: str) -> None:
        self._late.add(handover)

        def done(task: asyncio.Task[None]) -> None:
            self._late.discard(task)
            if task.cancelled():
                log.warning("feishu webhook: late hand-over cancelled, %s", ids)
            elif (exc := task.exception()) is not None:
                log.error("feishu webhook: late hand-over failed, %s", ids, exc_info=exc)
            else:
                log.info("feishu webhook: late hand-over finished, %s", ids)

        handover.add_done_callback(done)

    async def _card_action(self, action: CardAction) -> web.Response:
        ids = f"event_id={action.event_id} message_id={action.open_message_id}"
        try:
            reply = await asyncio.wait_for(self._handler.on_card_action(action), self._deadline)
        except TimeoutError:
            log.error("feishu webhook: on_card_action exceeded %.1fs, %s", self._deadline, ids)
            return _error(503, "busy")
        except Exception:
            log.exception("feishu webhook: on_card_action failed, %s", ids)
            return _error(500, "handler_failed")
        log.debug("feishu webhook: card action answered, %s", ids)
        return _json(reply.to_response())


def webhook_routes(
    handler: InboundHandler,
    *,
    encrypt_key: str | None,
    verification_token: str | None,
    bot: BotIdentity,
    deadline: float = DEFAULT_DEADLINE,
    path: str = EVENTS_PATH,
) -> list[web.RouteDef]:
    """Routes for the Feishu event request URL; add them with `app.add_routes(...)`."""
    endpoint = FeishuEventEndpoint(
        handler,
        encrypt_key=encrypt_key,
        verification_token=verification_token,
        bot=bot,
        deadline=deadline,
    )
    return [web.post(path, endpoint.handle)]
