"""The chat page with two bots: the group lists both, each bot's messages come under its own
name, the @-picker addresses one bot or both, and each bot has its own private chat. Over
the page's own endpoints, and once in a real headless Chromium (as test_demo_browser.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bridge.devtools.emulator import AppSpec, FeishuEmulator
from tests.integration.test_demo_browser import CHROMIUM, CHROMIUM_ARGS, _need_browser

CLAUDE, CODEX = "cli_claude000000001", "cli_codex0000000002"
APPS = (AppSpec(CLAUDE, "s1", bot_name="Claude"), AppSpec(CODEX, "s2", bot_name="Codex"))
SHOT = Path(__file__).resolve().parents[2] / "artifacts" / "two-bots-group.png"


class Hooks:
    """Each app's webhook: answers 200 and keeps the texts pushed to it."""

    def __init__(self) -> None:
        self.texts: dict[str, list[str]] = {CLAUDE: [], CODEX: []}
        app = web.Application()
        app.router.add_post("/hook/{app_id}", self._hook)
        self.server = TestServer(app, host="127.0.0.1", port=0)

    async def _hook(self, request: web.Request) -> web.Response:
        event = (await request.json())["event"]
        if "message" in event:
            content = json.loads(event["message"]["content"])
            self.texts[request.match_info["app_id"]].append(content.get("text", "[file]"))
        return web.json_response({})

    def url(self, app_id: str) -> str:
        return f"http://127.0.0.1:{self.server.port}/hook/{app_id}"


@pytest.fixture
async def page_apps() -> AsyncIterator[tuple[FeishuEmulator, Hooks, httpx.AsyncClient]]:
    hooks = Hooks()
    await hooks.server.start_server()
    try:
        async with (
            FeishuEmulator(apps=APPS) as emu,
            httpx.AsyncClient(base_url=emu.url, trust_env=False, timeout=5.0) as http,
        ):
            for app_id in (CLAUDE, CODEX):
                emu.set_webhook_url(hooks.url(app_id), app_id)
            yield emu, hooks, http
    finally:
        await hooks.server.close()


async def _bot_says(http: httpx.AsyncClient, emu: FeishuEmulator, app_id: str, text: str) -> None:
    app = emu.app(app_id)
    token = await http.post(
        "/open-apis/auth/v3/tenant_access_token/internal",
        json={"app_id": app_id, "app_secret": app.app_secret},
    )
    answer = await http.post(
        "/open-apis/im/v1/messages",
        params={"receive_id_type": "chat_id"},
        json={
            "receive_id": emu.group_chat_id,
            "msg_type": "text",
            "content": json.dumps({"text": text}),
        },
        headers={"Authorization": f"Bearer {token.json()['tenant_access_token']}"},
    )
    assert answer.json()["code"] == 0


async def test_the_pages_endpoints_know_both_bots(
    page_apps: tuple[FeishuEmulator, Hooks, httpx.AsyncClient],
) -> None:
    emu, hooks, http = page_apps
    state = (await http.get("/_emulator/state")).json()
    assert [(b["app_id"], b["name"]) for b in state["bots"]] == [
        (CLAUDE, "Claude"),
        (CODEX, "Codex"),
    ]
    assert state["group_bots"] == [CLAUDE, CODEX]
    assert state["p2p_chats"] == {CLAUDE: emu.p2p_chat(CLAUDE), CODEX: emu.p2p_chat(CODEX)}
    # A bot's card @s people by its own app's open_ids: the page names them all.
    user = emu.default_user_open_id
    assert state["names"][emu.open_id_in(CODEX, user)] == emu.user_name
    assert state["names"][emu.open_id_in(CODEX, emu.app(CLAUDE).bot_open_id)] == "Claude"

    async def send(body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = (await http.post("/_emulator/send", json=body)).json()
        return answer

    sent = await send({"text": "hi", "chat_type": "group", "mention_apps": [CODEX]})
    assert (sent["apps"], sent["delivered"]) == ([CODEX], True)
    both = await send({"text": "both", "chat_type": "group", "mention_apps": [CLAUDE, CODEX]})
    assert both["apps"] == [CLAUDE, CODEX]
    nobody = await send({"text": "aside", "chat_type": "group", "mention_apps": []})
    assert (nobody["apps"], nobody["delivered"]) == ([], True)  # no bot was asked
    private = await send({"text": "just us", "chat_type": "p2p", "app_id": CODEX})
    assert private["chat_id"] == emu.p2p_chat(CODEX)
    assert hooks.texts == {
        CLAUDE: ["@_user_1 @_user_2 both"],
        CODEX: ["@_user_1 hi", "@_user_1 @_user_2 both", "just us"],
    }
    refused = await http.post("/_emulator/send", json={"text": "x", "app_id": "cli_nobody"})
    assert refused.status_code == 400

    await _bot_says(http, emu, CODEX, "codex answers")
    timeline = (await http.get("/_emulator/timeline", params={"chat_id": emu.group_chat_id})).json()
    assert [(m["sender_name"], m["app_id"]) for m in timeline["messages"]][-1] == (
        "Codex",
        CODEX,
    )
    menu = (
        await http.post("/_emulator/menu", json={"event_key": "status", "app_id": CODEX})
    ).json()
    assert menu["delivered"] is True
    assert [d.app_id for d in emu.deliveries()][-1] == CODEX


@pytest.mark.browser
async def test_a_group_with_two_bots_in_the_chat_page(
    page_apps: tuple[FeishuEmulator, Hooks, httpx.AsyncClient],
) -> None:
    _need_browser()
    from playwright.async_api import async_playwright, expect

    emu, hooks, http = page_apps
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 700})
            page.set_default_timeout(5_000)
            await page.goto(emu.url + "/", wait_until="domcontentloaded")
            await expect(page.locator("#status")).to_contain_text("live")
            await expect(page.locator("#bot-name")).to_have_text("Claude · Codex")

            await page.locator("#chat-group").check()
            members = page.locator("#members .member")
            await expect(members).to_have_text(
                ["Emulated User", "Claude（机器人）", "Codex（机器人）"]
            )
            picker = page.locator("#mention-picker label")
            await expect(picker).to_have_text(["@Claude", "@Codex"])

            await picker.nth(0).locator("input").uncheck()  # @Codex alone
            await picker.nth(1).locator("input").check()
            await page.locator("#composer").fill("codex, look")
            await page.locator("#send").click()
            await emu.wait_for(lambda: hooks.texts[CODEX])
            await picker.nth(0).locator("input").check()  # then both
            await page.locator("#composer").fill("both of you")
            await page.locator("#send").click()
            await emu.wait_for(lambda: hooks.texts[CLAUDE])
            assert hooks.texts == {
                CLAUDE: ["@_user_1 @_user_2 both of you"],
                CODEX: ["@_user_1 codex, look", "@_user_1 @_user_2 both of you"],
            }
            user = page.locator(".msg.user .bubble")
            await expect(user).to_have_text(["@Codex codex, look", "@Claude @Codex both of you"])

            await _bot_says(http, emu, CLAUDE, "Claude here")
            await _bot_says(http, emu, CODEX, "Codex here")
            bots = page.locator(".msg.bot")
            await expect(bots.locator(".sender")).to_have_text(["Claude", "Codex"])
            await expect(bots.locator(".bubble")).to_have_text(["Claude here", "Codex here"])
            await expect(bots.nth(1)).to_have_attribute("data-app-id", CODEX)
            SHOT.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(SHOT), full_page=True)

            # Each bot its own private chat, chosen beside 单聊.
            await page.locator("#chat-p2p").check()
            await expect(page.locator("#members")).to_be_hidden()
            await page.locator("#p2p-bot").select_option(CODEX)
            await page.locator("#composer").fill("only codex")
            await page.locator("#send").click()
            await emu.wait_for(lambda: "only codex" in hooks.texts[CODEX])
            await expect(page.locator(".msg.user .bubble")).to_have_text(["only codex"])
            assert emu.messages(emu.p2p_chat(CODEX))[0].text == "only codex"
        finally:
            await browser.close()
