"""The emulator hosts several Feishu apps, kept apart as Feishu keeps them: tokens, open_ids,
rate meters and event pushes per app; a group with two bots tells each only what is
addressed to it. Over real loopback sockets, each app's webhook a lark-oapi handler with that
app's keys (so an event sealed with another app's keys would be refused)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from bridge.devtools.emulator import AppSpec, FeishuEmulator
from bridge.devtools.emulator.apps import parse_app_spec
from tests.integration.test_emulator import LarkWebhook

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES = "/open-apis/im/v1/messages"
BOT_INFO = "/open-apis/bot/v3/info"
CLAUDE, CODEX = "cli_claude000000001", "cli_codex0000000002"
APPS = (
    AppSpec(
        CLAUDE,
        "claude-secret",
        encrypt_key="claude-key",
        verification_token="claude-token",
        bot_name="Claude",
    ),
    AppSpec(
        CODEX,
        "codex-secret",
        encrypt_key="codex-key",
        verification_token="codex-token",
        bot_name="Codex",
    ),
)


class TwoApps:
    """The emulator with both apps, each app's webhook, and an HTTP client."""

    def __init__(self, emu: FeishuEmulator, hooks: dict[str, LarkWebhook], http: httpx.AsyncClient):
        self.emu, self.hooks, self.http = emu, hooks, http

    async def auth(self, app_id: str) -> dict[str, str]:
        app = self.emu.app(app_id)
        answer = await self.http.post(
            TOKEN_PATH, json={"app_id": app.app_id, "app_secret": app.app_secret}
        )
        return {"Authorization": f"Bearer {answer.json()['tenant_access_token']}"}

    async def post(self, app_id: str, chat_id: str, msg_type: str, content: Any) -> httpx.Response:
        return await self.http.post(
            MESSAGES,
            params={"receive_id_type": "chat_id"},
            json={"receive_id": chat_id, "msg_type": msg_type, "content": json.dumps(content)},
            headers=await self.auth(app_id),
        )

    def received(self, app_id: str) -> list[str]:
        """The texts of the messages the app's webhook took, in order."""
        return [json.loads(m.event.message.content)["text"] for m in self.hooks[app_id].messages]


@pytest.fixture
async def two_apps() -> AsyncIterator[TwoApps]:
    async with AsyncExitStack() as stack:
        hooks = {
            spec.app_id: await stack.enter_async_context(
                LarkWebhook(spec.encrypt_key, spec.verification_token)
            )
            for spec in APPS
        }
        emu = await stack.enter_async_context(FeishuEmulator(apps=APPS, time_scale=0.001))
        for app_id, hook in hooks.items():
            emu.set_webhook_url(hook.url, app_id)
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=emu.url, trust_env=False, timeout=5.0)
        )
        yield TwoApps(emu, hooks, http)


# --- configuration ---------------------------------------------------------------------------
def test_apps_are_declared_as_specs_or_as_the_single_apps_fields() -> None:
    emu = FeishuEmulator(apps=APPS)
    assert emu.app_ids == (CLAUDE, CODEX)
    assert (emu.app_id, emu.bot_name, emu.verification_token) == (CLAUDE, "Claude", "claude-token")
    assert emu.app(CODEX).bot_name == "Codex"
    assert [emu.app(a).group_messages for a in emu.app_ids] == ["mentioned", "mentioned"]
    assert FeishuEmulator(bot_name="Solo").app().group_messages == "all"  # as it always was
    with pytest.raises(ValueError, match="bot_name"):
        FeishuEmulator(apps=APPS, bot_name="Which one?")
    with pytest.raises(ValueError, match="each app once"):
        FeishuEmulator(apps=[APPS[0], APPS[0]])
    with pytest.raises(KeyError, match="cli_nobody"):
        emu.app("cli_nobody")


def test_an_app_on_the_command_line() -> None:
    spec = parse_app_spec("id=cli_x, secret=s, name=Codex Bot, webhook=http://127.0.0.1:9/e")
    assert spec == AppSpec("cli_x", "s", bot_name="Codex Bot", webhook_url="http://127.0.0.1:9/e")
    assert parse_app_spec("id=cli_y,group=all").group_messages == "all"
    with pytest.raises(ValueError, match="key=value"):
        parse_app_spec("id=cli_x,colour=blue")
    with pytest.raises(ValueError, match="needs id"):
        parse_app_spec("secret=s")
    with pytest.raises(ValueError, match="group_messages"):
        parse_app_spec("id=cli_x,group=some")


# --- tokens ----------------------------------------------------------------------------------
async def test_each_app_has_its_own_tokens_and_bot(two_apps: TwoApps) -> None:
    emu, http = two_apps.emu, two_apps.http
    claude, codex = await two_apps.auth(CLAUDE), await two_apps.auth(CODEX)
    assert claude != codex
    bots = [(await http.get(BOT_INFO, headers=h)).json()["bot"] for h in (claude, codex)]
    assert [(b["app_name"], b["open_id"]) for b in bots] == [
        ("Claude", emu.app(CLAUDE).bot_open_id),
        ("Codex", emu.app(CODEX).bot_open_id),
    ]
    assert emu.app(CLAUDE).bot_open_id != emu.app(CODEX).bot_open_id

    wrong = await http.post(TOKEN_PATH, json={"app_id": CODEX, "app_secret": "claude-secret"})
    assert wrong.json()["code"] == 10014  # one app's secret is not another's

    emu.expire_tokens(CLAUDE)
    expired = await http.get(BOT_INFO, headers=claude)
    assert (expired.status_code, expired.json()["code"]) == (400, 99991663)
    assert (await http.get(BOT_INFO, headers=codex)).json()["code"] == 0
    assert [(c.app_id, c.status) for c in emu.calls(BOT_INFO)][-2:] == [
        (CLAUDE, 400),
        (CODEX, 200),
    ]
    assert {c.app_id for c in emu.calls(app_id=CODEX)} == {CODEX}


async def test_a_bot_changes_only_its_own_messages_and_cards(two_apps: TwoApps) -> None:
    emu = two_apps.emu
    posted = await two_apps.post(CODEX, emu.group_chat_id, "text", {"text": "codex here"})
    message_id = posted.json()["data"]["message_id"]
    assert posted.json()["data"]["sender"]["id"] == CODEX
    edit = await two_apps.http.put(
        f"{MESSAGES}/{message_id}",
        json={"msg_type": "text", "content": json.dumps({"text": "claude was here"})},
        headers=await two_apps.auth(CLAUDE),
    )
    assert edit.json()["code"] == 230001
    card = await two_apps.http.post(
        "/open-apis/cardkit/v1/cards",
        json={"type": "card_json", "data": json.dumps({"schema": "2.0", "body": {}})},
        headers=await two_apps.auth(CODEX),
    )
    card_id = card.json()["data"]["card_id"]
    settings = {"settings": json.dumps({"config": {"streaming_mode": True}}), "sequence": 1}
    borrowed = await two_apps.http.patch(
        f"/open-apis/cardkit/v1/cards/{card_id}/settings",
        json=settings,
        headers=await two_apps.auth(CLAUDE),
    )
    assert borrowed.json()["code"] == 200740  # another app's card is no card of Claude's
    assert [m.text for m in emu.bot_messages(app_id=CODEX)] == ["codex here"]
    assert emu.bot_messages(app_id=CLAUDE) == []


# --- people and chats ------------------------------------------------------------------------
async def test_a_person_has_an_open_id_per_app_and_a_private_chat_per_bot(
    two_apps: TwoApps,
) -> None:
    emu = two_apps.emu
    me = emu.default_user_open_id
    as_codex = emu.open_id_in(CODEX, me)
    assert as_codex != me
    assert as_codex.startswith("ou_")
    assert emu.open_id_in(CLAUDE, as_codex) == me  # either app's id names the same person
    assert emu.p2p_chat(CLAUDE) == emu.p2p_chat_id != emu.p2p_chat(CODEX)

    to_codex = await emu.send_user_message("hi codex", app_id=CODEX)
    assert to_codex.chat_id == emu.p2p_chat(CODEX)
    assert (two_apps.received(CLAUDE), two_apps.received(CODEX)) == ([], ["hi codex"])
    [event] = two_apps.hooks[CODEX].messages
    sender = event.event.sender.sender_id
    assert (sender.open_id, event.header.app_id) == (as_codex, CODEX)
    await emu.send_user_message("hi claude")
    [claude_event] = two_apps.hooks[CLAUDE].messages
    assert claude_event.event.sender.sender_id.open_id == me
    assert claude_event.event.sender.sender_id.union_id == sender.union_id  # one developer's

    # A bot posts only where it is: Claude's private chat is not Codex's, and a send to the
    # person's open_id (Codex's for them) lands in the person's chat with Codex.
    refused = await two_apps.post(CODEX, emu.p2p_chat(CLAUDE), "text", {"text": "psst"})
    assert refused.json()["code"] == 230002
    by_open_id = await two_apps.http.post(
        MESSAGES,
        params={"receive_id_type": "open_id"},
        json={"receive_id": as_codex, "msg_type": "text", "content": json.dumps({"text": "yo"})},
        headers=await two_apps.auth(CODEX),
    )
    assert by_open_id.json()["data"]["chat_id"] == emu.p2p_chat(CODEX)


# --- a group with two bots -------------------------------------------------------------------
async def test_a_group_message_goes_to_the_bots_it_mentions(two_apps: TwoApps) -> None:
    emu = two_apps.emu
    assert emu.chat_bots(emu.group_chat_id) == (CLAUDE, CODEX)

    to_claude = await emu.send_user_message("review this", chat_type="group", mention_apps=[CLAUDE])
    assert to_claude.app_ids == (CLAUDE,)
    assert (two_apps.received(CLAUDE), two_apps.received(CODEX)) == (["@_user_1 review this"], [])
    [seen] = two_apps.hooks[CLAUDE].messages
    assert seen.header.app_id == CLAUDE
    assert [m.id.open_id for m in seen.event.message.mentions] == [emu.app(CLAUDE).bot_open_id]

    nobody = await emu.send_user_message("just chatting", chat_type="group")
    assert (nobody.app_ids, nobody.first_attempt) == ((), None)

    both = await emu.send_user_message("compare", chat_type="group", mention_apps=[CLAUDE, CODEX])
    assert both.app_ids == (CLAUDE, CODEX)
    assert both.to(CLAUDE).event_id != both.to(CODEX).event_id
    assert {e.message_id for e in (both, *both.others)} == {both.message_id}
    assert two_apps.received(CODEX) == ["@_user_1 @_user_2 compare"]
    mentions = {
        app_id: [m.id.open_id for m in two_apps.hooks[app_id].messages[-1].event.message.mentions]
        for app_id in (CLAUDE, CODEX)
    }
    # Each app is told both mentions by its own open_ids: its own bot as /bot/v3/info names it.
    assert mentions[CLAUDE] == [
        emu.app(CLAUDE).bot_open_id,
        emu.open_id_in(CLAUDE, _bot(emu, CODEX)),
    ]
    assert mentions[CODEX] == [emu.open_id_in(CODEX, _bot(emu, CLAUDE)), emu.app(CODEX).bot_open_id]
    # Pushed at once, as Feishu does: neither app waits for the other's answer.
    assert sorted(d.app_id for d in emu.deliveries() if d.ok) == [CLAUDE, CLAUDE, CODEX]


def _bot(emu: FeishuEmulator, app_id: str) -> str:
    return emu.app(app_id).bot_open_id


async def test_an_app_that_reads_all_group_messages_gets_them_all() -> None:
    apps = [APPS[0], AppSpec(CODEX, group_messages="all", bot_name="Codex")]
    async with (
        LarkWebhook("claude-key", "claude-token") as claude,
        LarkWebhook() as codex,
        FeishuEmulator(apps=apps) as emu,
    ):
        emu.set_webhook_url(claude.url, CLAUDE)
        emu.set_webhook_url(codex.url, CODEX)
        group = emu.open_chat("group", bots=[CLAUDE, CODEX])
        quiet = emu.open_chat("group", bots=[CLAUDE])
        await emu.send_user_message("to claude", chat_id=group, chat_type="group", mention_bot=True)
        await emu.send_user_message("to all", chat_id=group, chat_type="group")
        await emu.send_user_message("elsewhere", chat_id=quiet, chat_type="group")
        assert [m.event.message.chat_id for m in claude.messages] == [group]
        assert [json.loads(m.event.message.content)["text"] for m in codex.messages] == [
            "@_user_1 to claude",
            "to all",
        ]


async def test_a_card_click_reaches_only_the_app_whose_card_it_is(two_apps: TwoApps) -> None:
    emu = two_apps.emu
    two_apps.hooks[CODEX].card_answer = {"toast": {"type": "success", "content": "codex ok"}}
    card = {
        "schema": "2.0",
        "body": {"elements": [{"tag": "button", "text": {"tag": "plain_text", "content": "Go"}}]},
    }
    posted = await two_apps.post(CODEX, emu.group_chat_id, "interactive", card)
    message_id = posted.json()["data"]["message_id"]

    result = await emu.click_card(message_id, {"action": "go"})
    assert (result.ok, result.app_id, result.toast and result.toast.content) == (
        True,
        CODEX,
        "codex ok",
    )
    assert result.operator_open_id == emu.open_id_in(CODEX, emu.default_user_open_id)
    [action] = two_apps.hooks[CODEX].card_actions
    assert (action.header.app_id, action.event.action.value) == (CODEX, {"action": "go"})
    assert action.event.operator.open_id == result.operator_open_id
    assert two_apps.hooks[CLAUDE].card_actions == []
    assert emu.card_callbacks(app_id=CODEX) == [result]
    assert emu.card_callbacks(app_id=CLAUDE) == []
    assert [d.app_id for d in emu.deliveries()] == [CODEX]


async def test_a_menu_click_and_a_recall_go_to_their_apps(two_apps: TwoApps) -> None:
    emu = two_apps.emu
    clicked = await emu.click_menu("status", app_id=CODEX)
    said = await emu.send_user_message("oops", chat_type="group", mention_apps=[CODEX])
    recalled = await emu.recall_message(said.message_id)
    assert clicked is not None
    assert [clicked.app_id, *recalled.app_ids] == [CODEX, CODEX]
    assert recalled.payload["header"]["event_type"] == "im.message.recalled_v1"
    assert {d.app_id for d in emu.deliveries()} == {CODEX}
    assert two_apps.hooks[CLAUDE].requests == []


# --- per-app meters and outages --------------------------------------------------------------
async def test_each_app_has_its_own_rate_limit_meters() -> None:
    now = [0.0]
    async with (
        FeishuEmulator(apps=APPS, clock=lambda: now[0]) as emu,
        httpx.AsyncClient(base_url=emu.url, trust_env=False) as http,
    ):
        pair = TwoApps(emu, {}, http)
        emu.set_rate_limits(app_per_second=2)  # the same limit, each app its own meter
        claude, codex = await pair.auth(CLAUDE), await pair.auth(CODEX)
        answers = [(await http.get(BOT_INFO, headers=claude)).status_code for _ in range(3)]
        assert answers == [200, 200, 429]
        assert [(await http.get(BOT_INFO, headers=codex)).status_code for _ in range(2)] == [
            200,
            200,
        ]
        assert [c.limited for c in emu.app(CLAUDE).limits.refused()] == ["api"]
        assert emu.app(CODEX).limits.refused() == []
        now[0] += 1.0
        assert (await http.get(BOT_INFO, headers=claude)).status_code == 200

        emu.set_rate_limits(CODEX, app_per_second=1)  # one app's limit alone
        assert [(await http.get(BOT_INFO, headers=codex)).status_code for _ in range(2)] == [
            200,
            429,
        ]
        assert (await http.get(BOT_INFO, headers=claude)).status_code == 200


async def test_an_outage_of_one_apps_api_leaves_the_other_served(two_apps: TwoApps) -> None:
    emu = two_apps.emu
    emu.set_api_outage("503", apps=[CLAUDE])
    down = await two_apps.post(CLAUDE, emu.group_chat_id, "text", {"text": "a"})
    up = await two_apps.post(CODEX, emu.group_chat_id, "text", {"text": "b"})
    assert (down.status_code, up.status_code) == (503, 200)
    assert [(r.app_id, r.mode.value) for r in emu.refused_calls()] == [(CLAUDE, "503")]

    emu.fail_next("POST", MESSAGES, "business_error", code=99991672, app_id=CODEX)
    claude_ok = await two_apps.post(CLAUDE, emu.group_chat_id, "text", {"text": "c"})
    assert claude_ok.status_code == 503  # still down; the fault waits for Codex's call
    codex_refused = await two_apps.post(CODEX, emu.group_chat_id, "text", {"text": "d"})
    assert codex_refused.json()["code"] == 99991672
