"""The operator console (`GET /console`) in a real headless Chromium, against the running
stack with an operator token: the token from the URL fragment, the conversation listed after
a user message, its row changing live (from `/events`, no reload) when the scripted agent asks
for an approval, and a click showing the turn's timeline; then the agent processes panel, an
operator's display name shown as text, and the agent killed mid-turn showing up live as
faults and a restart. Plus, without a browser: the shell holds no data and the data routes
still need the token.

Same browser rules as test_demo_browser.py (Debian's chromium, skipped without it unless CI).
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import httpx
import pytest

from tests.integration.stack import running_stack
from tests.integration.test_demo_browser import CHROMIUM, CHROMIUM_ARGS, REPO_ROOT, _need_browser

TOKEN = "ops-console-t0ken-<b>&'\""  # markup in it: must still work from the fragment
SCREENSHOT = REPO_ROOT / "artifacts" / "console.png"
TIMEOUT_MS = 5_000
APPROVAL_PROMPT = "permission Delete build/"


@pytest.mark.browser
async def test_the_console_shows_conversations_live_and_a_turn_timeline(tmp_path: Path) -> None:
    _need_browser()
    from urllib.parse import quote

    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=TIMEOUT_MS)
    settings = {"bridge_ops_token": TOKEN}
    async with (
        running_stack(tmp_path / "bridge", settings=settings) as stack,
        async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            page.set_default_timeout(TIMEOUT_MS)
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            await page.goto(
                f"{stack.ops_url}/console#token={quote(TOKEN, safe='')}",
                wait_until="domcontentloaded",
            )
            await expect(page.locator("#status")).to_have_text("live")
            # The app: its bot, its health, Feishu's API as its posts find it, and the call
            # budget's use (GET /status).
            app = page.locator("#app-rows tr.app")
            await expect(app).to_have_count(1)
            await expect(app.locator(".app")).to_have_text("default")
            await expect(app.locator(".bot .name")).to_have_text(stack.emu.app().bot_name)
            await expect(app.locator(".health")).to_have_text("ok")
            await expect(app.locator(".longconn")).to_have_text("webhook")
            feishu = app.locator(".feishu")
            await expect(feishu).to_contain_text("Feishu API: up")
            await expect(feishu).to_contain_text(re.compile(r"each API at most \d+/s now"))
            await expect(feishu).to_contain_text("waiting: ending 0, answer 0")
            assert "#" not in page.url  # the token left the address bar
            await expect(page.locator("#empty")).to_be_visible()

            await stack.say("say hello")
            await stack.settled()
            row = page.locator("tr.conversation").filter(has_text=stack.chat)
            await expect(row).to_have_count(1)
            await expect(row.locator(".app")).to_have_text("default")
            await expect(row.locator(".state")).to_have_text("idle")

            sent = await stack.say(APPROVAL_PROMPT)
            await expect(row.locator(".state")).to_have_text("waiting_approval")
            await expect(row.locator(".next-move")).to_have_text("user")
            await expect(row.locator(".approval")).to_contain_text("Delete build/")
            await expect(row.locator(".queue")).to_have_text("0")

            await row.click()
            await expect(page.locator("#turn-id")).to_have_text(sent.message_id)
            kinds = page.locator("#timeline .kind")
            await expect(kinds.filter(has_text="permission")).to_have_count(1)
            await expect(kinds.filter(has_text="approval_card")).to_have_count(1)
            assert (await kinds.first.inner_text()) == "start"

            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(SCREENSHOT), full_page=True)
            # Same origin only, and the token never in a URL the page asked for.
            assert all(u.startswith(stack.ops_url) for u in requests), requests
            assert not any("token" in u for u in requests), requests
            assert await page.evaluate("() => Object.keys(sessionStorage)") == [
                "feishu-bridge-ops-token"
            ]

            # The agent processes, live: the one serving this turn.
            process = page.locator("#process-rows tr.process")
            await expect(process).to_have_count(1)
            await expect(process.locator(".health")).to_have_text("alive")
            [agent] = stack.demo.service.runtime.running_processes()
            await expect(process.locator(".pid")).to_have_text(str(agent.pid))
            await expect(process.locator(".restarts")).to_have_text("0")
            await expect(page.locator("#no-fault")).to_be_visible()

            # An operator's display name: shown, as text (markup in it stays text).
            name = "<b>Release</b> room"
            async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
                named = await http.patch(
                    f"{stack.ops_url}/sessions/{stack.chat}",
                    json={"display_name": name},
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
            assert named.status_code == 200
            await expect(row.locator(".name")).to_have_text(name)
            await expect(row.locator("b")).to_have_count(0)

            # The agent killed mid-turn (waiting for the approval): faults and a restart,
            # pushed to the open page.
            os.kill(agent.pid, signal.SIGKILL)
            faults = page.locator("#fault-rows tr.fault")
            await expect(faults.filter(has_text="agent_exit")).to_have_count(1)
            await expect(faults.filter(has_text="turn_interrupted")).to_have_count(1)
            await expect(faults.filter(has_text=name)).not_to_have_count(0)
            await expect(row.locator(".state")).to_have_text("idle")
            await expect(process.locator(".health")).to_have_text("alive")
            await expect(process.locator(".restarts")).to_have_text("1")
            await page.screenshot(path=str(tmp_path / "console-faults.png"), full_page=True)
        finally:
            await browser.close()


OPS_DATA_ROUTES = ["/status", "/runtime-states", "/events", "/turns/om_x", "/metrics"]


async def test_the_console_shell_holds_no_data_and_data_routes_need_the_token(
    tmp_path: Path,
) -> None:
    async with (
        running_stack(tmp_path / "bridge", settings={"bridge_ops_token": TOKEN}) as stack,
        httpx.AsyncClient(trust_env=False, timeout=5.0) as http,
    ):
        await stack.say("say hello")
        await stack.settled()
        shell = await http.get(f"{stack.ops_url}/console")
        script = await http.get(f"{stack.ops_url}/console/console.js")
        # Behind the token like every route (a browser still gets the data-free shell to
        # render, and its script); with the token, a plain 200.
        assert (shell.status_code, script.status_code) == (401, 200)
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert (await http.get(f"{stack.ops_url}/console", headers=good)).status_code == 200
        assert shell.headers["Content-Type"].startswith("text/html")
        assert script.headers["Content-Type"].startswith("text/javascript")
        csp = shell.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp
        assert "connect-src 'self'" in csp
        assert shell.headers["Cache-Control"] == "no-store"
        for body in (shell.text, script.text):
            assert stack.chat not in body  # no conversation, no state, no secret
            assert TOKEN not in body
            assert "http://" not in body
            assert "https://" not in body  # no outside asset
        for sink in (".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write"):
            assert sink not in script.text, sink  # data goes in with textContent only
        for path in OPS_DATA_ROUTES:
            response = await http.get(f"{stack.ops_url}{path}")
            assert response.status_code == 401, path
            assert stack.chat not in response.text
        states = await http.get(f"{stack.ops_url}/runtime-states", headers=good)
        assert stack.chat in states.json()["conversations"]
        # Only the shell is open: nothing under it, and the Feishu port serves none of it.
        assert (await http.get(f"{stack.ops_url}/console/other.js")).status_code == 401
        assert (await http.get(f"{stack.feishu_url}/console")).status_code == 404


TWO_APPS_SHOT = REPO_ROOT / "artifacts" / "console-two-apps.png"
CLAUDE, CODEX = "cli_demo_claude", "cli_demo_codex"


@pytest.mark.browser
async def test_the_console_tells_the_apps_apart_and_which_one_is_unhealthy(
    tmp_path: Path,
) -> None:
    """The demo's two bots in one bridge: the console lists both apps and their health,
    labels each conversation with its app (the group is a conversation of each), shows a
    Codex conversation's turn as Codex's, and says when Codex's Feishu API is down while
    Claude stays healthy."""
    _need_browser()
    from urllib.parse import quote

    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=TIMEOUT_MS)
    settings = {"bridge_ops_token": TOKEN}
    async with (
        running_stack(tmp_path / "bridge", settings=settings, bots=2) as stack,
        async_playwright() as pw,
    ):
        emu, group = stack.emu, stack.emu.group_chat_id
        sent = await emu.send_user_message(
            "say hello", chat_id=group, chat_type="group", mention_apps=[CLAUDE, CODEX]
        )
        await emu.wait_for(
            lambda: all(emu.bot_messages(group, app_id=a) for a in (CLAUDE, CODEX)), 15.0
        )
        await stack.settled()
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(TIMEOUT_MS)
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            await page.goto(
                f"{stack.ops_url}/console#token={quote(TOKEN, safe='')}",
                wait_until="domcontentloaded",
            )
            await expect(page.locator("#status")).to_have_text("live")
            apps = page.locator("#app-rows tr.app")
            await expect(apps.locator(".app")).to_have_text(["claude", "codex"])
            await expect(apps.locator(".bot .name")).to_have_text(["Claude", "Codex"])
            await expect(apps.locator(".health")).to_have_text(["ok", "ok"])
            await expect(apps.locator(".longconn")).to_have_text(["webhook", "webhook"])

            # The group is a conversation of each bot: the first app's key as a single
            # app's, the other's prefixed with its name.
            rows = page.locator("tr.conversation")
            claude = rows.filter(has=page.get_by_text(group, exact=True))
            codex = rows.filter(has=page.get_by_text(f"codex/{group}", exact=True))
            await expect(claude.locator(".app")).to_have_text("claude")
            await expect(codex.locator(".app")).to_have_text("codex")
            await codex.click()
            await expect(page.locator("#turn-id")).to_have_text(sent.message_id)
            await expect(page.locator("#turn-outcome")).to_have_text("outcome: completed")
            assert f"{stack.ops_url}/turns/{sent.message_id}?app=codex" in requests

            # Codex's Feishu API goes down: its row says so, and why; Claude's stays ok.
            emu.set_api_outage("503", apps=[CODEX])
            await emu.send_user_message(
                "say later", chat_id=group, chat_type="group", mention_apps=[CODEX]
            )
            down = "Feishu's API is taken to be down for this app since"
            await expect(apps.nth(1).locator(".health.app-problem")).to_contain_text(
                down, timeout=30_000
            )
            await expect(apps.nth(1).locator(".feishu")).to_contain_text("Feishu API: DOWN")
            await expect(apps.nth(0).locator(".health")).to_have_text("ok")
            TWO_APPS_SHOT.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(TWO_APPS_SHOT), full_page=True)
            emu.set_api_outage("up")
            await emu.wait_for(
                lambda: "later" in [m.text for m in emu.bot_messages(group, app_id=CODEX)], 30.0
            )
        finally:
            await browser.close()
