"""The demo's chat page in a real headless Chromium: what a person sees during a slow turn
that stops for an approval — the ack reaction, the running hint, the approval card with its
buttons and the waiting line, the decided card after a click, the final reply.

Needs Debian's chromium at /usr/bin/chromium (`scripts/install-browser.sh`) and the Python
`playwright` package; never `playwright install`. Skipped without them, except in CI (env
`CI` set), where a missing browser fails the run instead of hiding it.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bridge.devtools.emulator.clips import SPOKEN_TRANSCRIPT
from bridge.i18n import Translator
from tests.integration.stack import running_stack

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # without these Chromium phones home, and the
    "--disable-component-update",  # sandbox refuses those connections
    "--disable-sync",
]
REPO_ROOT = Path(__file__).resolve().parents[2]  # not cwd: a fixture chdirs to tmp_path
SCREENSHOT = REPO_ROOT / "artifacts" / "demo-approval.png"
TIMEOUT_MS = 5_000  # per DOM wait; every step takes milliseconds with these timings

PROMPT = "sleep 800\npermission Delete build/"
ALLOW_ONCE = Translator("zh_CN")("card.approval.option.allow_once")

pytestmark = pytest.mark.browser


@asynccontextmanager
async def chat_page(
    tmp_path: Path, settings: dict[str, object], *, bots: int = 1
) -> AsyncIterator[Any]:
    """The demo stack with `settings` (and `bots`), its chat page open and live in Chromium."""
    from playwright.async_api import async_playwright, expect

    async with (
        running_stack(tmp_path / "bridge", settings=settings, bots=bots) as stack,
        async_playwright() as pw,
    ):
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 800})
            page.set_default_timeout(TIMEOUT_MS)
            await page.goto(stack.emu.url + "/", wait_until="domcontentloaded")
            await expect(page.locator("#status")).to_contain_text("live")
            yield page
        finally:
            await browser.close()


def _need_browser() -> None:
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (run scripts/install-browser.sh)")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing.append("the Python package playwright (pip install -e '.[dev]')")
    if not missing:
        return
    reason = "browser test needs " + " and ".join(missing)
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must not skip it", pytrace=False)
    pytest.skip(reason)


async def test_slow_turn_with_approval_in_the_chat_page(tmp_path: Path) -> None:
    _need_browser()
    from playwright.async_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    settings = {"bridge_first_hint_seconds": 0.3, "bridge_locale": "zh_CN"}
    async with chat_page(tmp_path, settings) as page:
        # Enter would send; the button sends the composer's text, newline included.
        await page.locator("#composer").fill(PROMPT)
        await page.locator("#send").click()

        user = page.locator(".msg.user").filter(has_text="permission Delete build/")
        await expect(user).to_have_count(1)
        await expect(user.locator(".bubble")).to_have_text(PROMPT)
        await expect(user.locator(".reaction")).to_have_count(1)  # the ack (OnIt)

        bot = page.locator(".msg.bot")
        await expect(bot.filter(has_text="正在处理…")).to_have_count(1)

        card = bot.locator(".card").filter(has=page.locator(".card-actions button"))
        await expect(card).to_have_count(1)
        await expect(card).to_contain_text("Delete build/")
        buttons = card.locator(".card-actions button")
        await expect(buttons.first).to_be_enabled()
        assert await buttons.count() >= 2, await card.inner_text()
        allow = buttons.filter(has_text=ALLOW_ONCE)
        await expect(allow).to_have_count(1)
        await expect(
            bot.locator(".bubble").filter(has_text="当前已暂停，等待你审批后继续。")
        ).to_have_count(1)

        await allow.click()

        # The card is replaced in place: same message, no buttons, the decision shown.
        decided = bot.filter(has_text="已选择")
        await expect(decided).to_have_count(1)
        await expect(decided).to_contain_text(ALLOW_ONCE)
        await expect(decided.locator(".card button")).to_have_count(0)
        await expect(page.locator(".card button")).to_have_count(0)

        await expect(bot.locator(".bubble").filter(has_text=re.compile(r"^done$"))).to_have_count(1)
        texts = await bot.locator(".bubble").all_inner_texts()
        assert texts[-1] == "done", texts

        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOT), full_page=True)


CARD_SHOTS = (
    REPO_ROOT / "artifacts" / "card-mid-turn.png",
    REPO_ROOT / "artifacts" / "card-end.png",
)
CARD_PROMPT = "tool Read README.md\nplan Look | Write\nstream 12 150\nsay Done."


async def test_the_live_status_card_in_the_chat_page(tmp_path: Path) -> None:
    """Card style: one card that says it works, lists the tool and the plan, types the
    answer, and ends saying so; a screenshot mid-turn and one at the end."""
    _need_browser()
    from playwright.async_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    settings = {
        "bridge_presence_style": "card",
        "bridge_card_update_interval_seconds": 0.05,
        "bridge_first_hint_seconds": 0.05,
        "bridge_locale": "zh_CN",
    }
    t = Translator("zh_CN")
    async with chat_page(tmp_path, settings) as page:
        await page.locator("#composer").fill(CARD_PROMPT)
        await page.locator("#send").click()

        card = page.locator(".msg.bot .card")
        await expect(card).to_have_count(1)
        await expect(card).to_contain_text(t("presence.running_hint"))
        await expect(card).to_contain_text("Read README.md")
        await expect(card).to_contain_text("c3")  # the answer is being typed
        CARD_SHOTS[0].parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(CARD_SHOTS[0]), full_page=True)

        await expect(card).to_contain_text(t("card.status.ended"))
        await expect(card).to_contain_text("Done.")
        await expect(card).not_to_contain_text(t("presence.running_hint"))
        await expect(page.locator(".msg.bot")).to_have_count(1)  # one card, no lines
        await page.screenshot(path=str(CARD_SHOTS[1]), full_page=True)


ATTACH_SHOT = REPO_ROOT / "artifacts" / "attachment.png"


async def test_an_image_attached_in_the_chat_page_reaches_the_agent(tmp_path: Path) -> None:
    """The page's 📎 sends a real PNG from disk; the agent says it received it as an image;
    the 撤回 button recalls a queued message, which never runs."""
    _need_browser()
    from playwright.async_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    png = tmp_path / "screenshot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 2)  # 520 bytes
    t = Translator("zh_CN")
    async with chat_page(tmp_path, {"bridge_locale": "zh_CN"}) as page:
        await page.locator("#attach").set_input_files(str(png))
        bot = page.locator(".msg.bot .bubble")
        await expect(bot.filter(has_text=t("attachment.held", count=1))).to_have_count(1)
        await page.locator("#composer").fill("say what is in it")
        await page.locator("#send").click()
        received = bot.filter(has_text="received: image image/png 520 bytes")
        await expect(received).to_have_count(1)
        await expect(bot.filter(has_text=re.compile("what is in it$"))).to_have_count(1)

        # A round that hangs, a second message queued behind it, recalled from the page.
        await page.locator("#composer").fill("hang")
        await page.locator("#send").click()
        await expect(bot.filter(has_text=t("presence.running_hint"))).to_have_count(0)
        await page.locator("#composer").fill("say never")
        await page.locator("#send").click()
        queued = page.locator(".msg.user").filter(has_text="say never")
        await expect(bot.filter(has_text=t("presence.queued", position=1))).to_have_count(1)
        await queued.locator(".recall").click()
        await expect(page.locator(".bubble.recalled")).to_have_count(1)
        await expect(bot.filter(has_text=t("presence.recalled_queued"))).to_have_count(1)
        ATTACH_SHOT.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ATTACH_SHOT), full_page=True)
        await page.locator("#composer").fill("/stop")
        await page.locator("#send").click()
        await expect(bot.filter(has_text=t("presence.stopped"))).to_have_count(1)
        await expect(bot.filter(has_text="never")).to_have_count(0)


VOICE_SHOT = REPO_ROOT / "artifacts" / "voice.png"


async def test_a_voice_message_from_the_chat_page_is_heard_and_answered(tmp_path: Path) -> None:
    """The page's 🎤 sends the generated spoken clip (espeak-ng, Ogg Opus): the chat shows
    the voice, then what was understood quoted in one line, then the agent's answer to
    those words. What recognition hears is the composer's text, here a scenario line."""
    _need_browser()
    from playwright.async_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    t = Translator("zh_CN")
    async with chat_page(tmp_path, {"bridge_locale": "zh_CN"}) as page:
        await page.locator("#voice").click()  # the clip's own words
        user = page.locator(".msg.user")
        await expect(user.filter(has_text="[语音] 3.6″")).to_have_count(1)
        bot = page.locator(".msg.bot .bubble")
        heard = t("voice.heard", text=SPOKEN_TRANSCRIPT)
        await expect(bot.filter(has_text=heard)).to_have_count(1)
        await expect(bot.filter(has_text=f"echo: {SPOKEN_TRANSCRIPT}")).to_have_count(1)

        await page.locator("#composer").fill("say 登录页已修好")
        await page.locator("#voice").click()
        said = t("voice.heard", text="say 登录页已修好")
        await expect(bot.filter(has_text=said)).to_have_count(1)
        await expect(bot.filter(has_text=re.compile("^登录页已修好$"))).to_have_count(1)
        texts = await bot.all_inner_texts()
        assert texts == [heard, f"echo: {SPOKEN_TRANSCRIPT}", said, "登录页已修好"], texts
        VOICE_SHOT.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(VOICE_SHOT), full_page=True)


MENU_SHOT = REPO_ROOT / "artifacts" / "bot-menu.png"


async def test_the_bot_menu_under_the_private_chat_stops_and_shows_status(tmp_path: Path) -> None:
    """The page's bot menu (the private chat only, as in Feishu): 停止 stops a hanging
    round, 状态 shows the status, 新会话 starts a fresh session."""
    _need_browser()
    from playwright.async_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    t = Translator("zh_CN")
    async with chat_page(tmp_path, {"bridge_locale": "zh_CN"}) as page:
        menu = page.locator("#bot-menu")
        await expect(menu.locator("button")).to_have_text(
            ["⏹ 停止", "＋ 新会话", "ⓘ 状态", "？ 帮助"]
        )
        await page.locator("#composer").fill("hang")
        await page.locator("#send").click()
        bot = page.locator(".msg.bot .bubble")
        await expect(page.locator(".msg.user .reaction")).to_have_count(1)  # the round runs
        await menu.get_by_text("停止").click()
        await expect(bot.filter(has_text=t("presence.stopped"))).to_have_count(1)
        await menu.get_by_text("状态").click()
        # The status names the agent (the round may still be closing on the bridge's side).
        await expect(bot.filter(has_text="scripted_agent")).to_have_count(1)
        await menu.get_by_text("新会话").click()
        await expect(bot.filter(has_text=t("command.new_session"))).to_have_count(1)
        MENU_SHOT.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(MENU_SHOT), full_page=True)

        await page.locator("#chat-group").check()
        await expect(menu).to_be_hidden()  # Feishu shows the bot menu in the private chat only


TWO_BOTS_SHOT = REPO_ROOT / "artifacts" / "demo-two-bots.png"


async def test_the_demos_two_bots_answer_in_the_group_each_by_its_name(tmp_path: Path) -> None:
    """`feishu-bridge demo`'s two bots: the group lists Claude and Codex; a message that
    @-mentions both is answered by each, under its own name (its agent says who it is);
    one that mentions Codex alone, by Codex alone."""
    _need_browser()
    from playwright.async_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    async with chat_page(tmp_path, {"bridge_locale": "zh_CN"}, bots=2) as page:
        await expect(page.locator("#bot-name")).to_have_text("Claude · Codex")
        await page.locator("#chat-group").check()
        await expect(page.locator("#members .member")).to_have_text(
            ["Emulated User", "Claude（机器人）", "Codex（机器人）"]
        )
        picker = page.locator("#mention-picker label")
        await expect(picker).to_have_text(["@Claude", "@Codex"])
        await picker.nth(1).locator("input").check()  # Claude is ticked already: both
        await page.locator("#composer").fill("whoami")
        await page.locator("#send").click()

        bot = page.locator(".msg.bot")
        claude = bot.filter(has_text="Claude: resumed=0")
        codex = bot.filter(has_text="Codex: resumed=0")
        await expect(claude).to_have_count(1)
        await expect(codex).to_have_count(1)
        await expect(claude.locator(".sender")).to_have_text("Claude")
        await expect(codex.locator(".sender")).to_have_text("Codex")

        await picker.nth(0).locator("input").uncheck()  # Codex alone
        await page.locator("#composer").fill("history")
        await page.locator("#send").click()
        history = bot.filter(has_text="history: 2 prompts")
        await expect(history).to_have_count(1)
        await expect(history.locator(".sender")).to_have_text("Codex")
        await expect(bot.filter(has_text="history")).to_have_count(1)  # Claude was not asked
        TWO_BOTS_SHOT.parent.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(TWO_BOTS_SHOT), full_page=True)
