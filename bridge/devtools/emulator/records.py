"""Typed, frozen records of everything the emulator saw and did. Tests assert on these.

Records are snapshots: the emulator keeps its live state in dicts of these values and swaps
in a new value (`dataclasses.replace`) when, say, a card is patched, so a record a test holds
never changes under it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

SenderType = Literal["user", "app"]


@dataclass(frozen=True)
class ApiCall:
    """One request to `/open-apis/…`, including failed and fault-injected attempts."""

    seq: int
    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: Any  # the parsed JSON body, or None when absent or not JSON
    # the HTTP status the emulator answered (or would have, for a timeout fault); 0: never
    # answered (an outage's timeout)
    status: int
    response: Any  # the JSON the emulator answered (None: no JSON, or no answer)
    at: float  # wall-clock seconds
    fault: str | None = None  # the injected fault kind, or `outage_<mode>`, if any
    # the app that made the call: whose token it carried (or, asking for a token, whose
    # app_id it gave); None when the token is no app's
    app_id: str | None = None

    @property
    def code(self) -> int | None:
        """Feishu's business `code` of the answer (0 on success)."""
        if isinstance(self.response, Mapping):
            code = self.response.get("code")
            return code if isinstance(code, int) else None
        return None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.code == 0

    def json_content(self) -> Any:
        """The request's `content` field decoded (Feishu sends it as a JSON *string*)."""
        if isinstance(self.body, Mapping) and isinstance(self.body.get("content"), str):
            return json.loads(self.body["content"])
        return None


@dataclass(frozen=True)
class ChatMessage:
    """One message in an emulated chat: a user's message or something the bot posted."""

    message_id: str
    chat_id: str
    chat_type: str  # "p2p" or "group"
    sender_type: SenderType
    # the user (their open_id in the emulator's first app, see people.py), or the app_id of
    # the bot that posted it
    sender_id: str
    msg_type: str  # text, post, interactive, …
    content: str  # the raw JSON string, exactly as Feishu stores it
    create_time_ms: int
    update_time_ms: int
    root_id: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    uuid: str | None = None
    updated: bool = False
    mentions: tuple[Mapping[str, Any], ...] = ()
    recalled: bool = False  # taken back by its sender: replies to it fail with 230011

    @property
    def data(self) -> Any:
        """The decoded content (a dict for every type the bridge uses)."""
        try:
            return json.loads(self.content)
        except ValueError:
            return None

    @property
    def text(self) -> str | None:
        """The text of a text message, None for other types."""
        data = self.data
        if self.msg_type == "text" and isinstance(data, Mapping):
            text = data.get("text")
            return text if isinstance(text, str) else None
        return None

    @property
    def card(self) -> dict[str, Any] | None:
        """The card JSON of an interactive message, None for other types."""
        data = self.data
        if self.msg_type == "interactive" and isinstance(data, dict):
            return data
        return None

    @property
    def is_bot(self) -> bool:
        return self.sender_type == "app"

    @property
    def app_id(self) -> str | None:
        """The app whose bot posted it; None for a user's message."""
        return self.sender_id if self.sender_type == "app" else None


@dataclass(frozen=True)
class Reaction:
    reaction_id: str
    message_id: str
    emoji_type: str
    operator_id: str
    operator_type: Literal["app", "user"]
    action_time_ms: int


DeliveryOutcome = Literal["ok", "non_200", "timeout", "error"]


@dataclass(frozen=True)
class DeliveryAttempt:
    """One POST of an event (or card callback) to the bridge's webhook."""

    event_id: str
    event_type: str
    attempt: int  # 1 for the first push, then 2, 3, … for redeliveries
    status: int | None  # the HTTP status, None when no answer arrived in time
    latency_ms: float
    outcome: DeliveryOutcome
    response_body: str
    at: float  # wall-clock seconds when the attempt started
    manual: bool = False  # a test asked for it (redeliver / post_raw), not the ladder
    url: str = ""  # where it went (several bridge instances behind a balancer: which one)
    app_id: str = ""  # the app whose event it is (its keys sealed it)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass(frozen=True)
class LongConnection:
    """An app's open long connection (a bridge instance's lark-oapi ws client)."""

    app_id: str
    conn_id: str  # the device_id of its URL
    connected_at: float  # wall-clock seconds
    pings: int  # the client's pings answered so far


@dataclass(frozen=True)
class DeliveredEvent:
    """What `send_user_message` returns: the ids to look things up by, and the first push."""

    event_id: str
    message_id: str
    chat_id: str
    payload: Mapping[str, Any]  # the plaintext event JSON
    first_attempt: DeliveryAttempt | None  # None when no webhook URL is set
    app_id: str = ""  # the app it was pushed to ("": no bot in the chat was pushed it)
    # The same message pushed to the chat's other bots, each its own event with its own ids.
    others: tuple[DeliveredEvent, ...] = ()

    @property
    def app_ids(self) -> tuple[str, ...]:
        """Every app the message was pushed to, in the emulator's order of apps."""
        return tuple(e.app_id for e in (self, *self.others) if e.app_id)

    def to(self, app_id: str) -> DeliveredEvent:
        """The event pushed to `app_id`."""
        for event in (self, *self.others):
            if event.app_id == app_id:
                return event
        raise KeyError(f"the message was not pushed to {app_id!r} (only {self.app_ids})")


@dataclass(frozen=True)
class Toast:
    type: str  # info, success, error, warning
    content: str


@dataclass(frozen=True)
class CardCallbackResult:
    """The outcome of one `card.action.trigger` callback (a button click)."""

    event_id: str
    message_id: str
    operator_open_id: str
    value: Mapping[str, Any]
    ok: bool  # answered 200 within the deadline with a JSON body
    status: int | None
    latency_ms: float
    toast: Toast | None  # the bridge's toast, or Feishu's error toast when not ok
    card_replaced: bool  # the answer carried a raw card that replaced the one in the chat
    response: Any  # the parsed answer JSON, None when absent or not JSON
    error: str | None = None
    app_id: str = ""  # the app whose card it is, the only one told of the click


@dataclass(frozen=True)
class UrlVerificationResult:
    ok: bool  # answered 200 with the challenge echoed
    challenge: str
    status: int | None
    response_body: str


@dataclass(frozen=True)
class Mention:
    """Someone @-mentioned in a user's message; `key` defaults to `@_user_<n>`."""

    open_id: str
    name: str
    key: str | None = None
    union_id: str = ""
    user_id: str = ""


@dataclass(frozen=True)
class Envelope:
    """A webhook request as Feishu would send it: the body bytes and the headers."""

    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
