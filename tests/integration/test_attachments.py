"""Images and files from the chat reach the agent, over the real stack: downloaded through
the message-resource API, an image as image content for an agent that takes images, else a
file in the session's folder under `.feishu/inbox/<message>/` and a resource link; one sent
alone is held and joins the sender's next text; past the size limit, one line says so. The
scripted agent says what it received, so each test checks what reached the agent."""

from __future__ import annotations

from pathlib import Path

from bridge.demo import scripted_agent_command
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack
from tests.integration.test_faults_and_restart import _crash_and_restart

T = Translator("zh_CN")
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # 1,032 bytes
RESOURCES = "/open-apis/im/v1/messages/"


def fetched(stack: Stack) -> list[tuple[str, str, str]]:
    """The resources the bridge downloaded: (message id, key, type)."""
    return [
        (c.path.split("/")[5], c.path.rsplit("/", 1)[-1], c.query.get("type", ""))
        for c in stack.emu.calls(RESOURCES, "GET")
        if "/resources/" in c.path
    ]


async def test_an_image_with_text_reaches_an_image_capable_agent_as_image_content(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        key = stack.emu.upload_image(PNG)
        post = {
            "title": "",
            "content": [[{"tag": "text", "text": "say look"}], [{"tag": "img", "image_key": key}]],
        }
        await stack.say("", message_type="post", content=post)
        answer = await stack.wait_text(lambda t: t.startswith("received:"))
        assert answer == "received: image image/png 1032 bytes\nlook"
        assert [(k, kind) for _, k, kind in fetched(stack)] == [(key, "image")]
        await stack.settled()
        inbox = stack.demo.service.settings.store.bridge_data_dir / "inbox"
        assert inbox.is_dir()
        assert not any(inbox.rglob("*")), "the turn's download outlived it"


async def test_an_image_sent_alone_is_held_and_joins_the_next_text(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await stack.emu.send_user_file(PNG, kind="image", mime="image/png")
        await stack.wait_text(lambda t: t == T("attachment.held", count=1))
        await stack.say("say what is this")
        answer = await stack.wait_text(lambda t: t.startswith("received:"))
        assert answer == "received: image image/png 1032 bytes\nwhat is this"
        await stack.settled()
        # The held image went with that text only: the next message carries nothing.
        await stack.say("say again")
        await stack.wait_text(lambda t: t == "again")


async def test_a_file_for_an_agent_without_images_lands_in_the_workspace_inbox(
    tmp_path: Path,
) -> None:
    command = f"{scripted_agent_command()} --no-images"
    async with running_stack(tmp_path / "bridge", agent_command=command) as stack:
        await stack.emu.send_user_file(b"col1,col2\n1,2\n", name="../../etc/passwd data.csv")
        await stack.wait_text(lambda t: t == T("attachment.held", count=1))
        sent = await stack.emu.send_user_file(PNG, kind="image", mime="image/png")
        await stack.wait_text(lambda t: t == T("attachment.held", count=2))
        await stack.say("say got them")
        answer = await stack.wait_text(lambda t: t.startswith("received:"))
        workdir = stack.demo.service.settings.agent.bridge_workdir.resolve()
        inbox = workdir / ".feishu" / "inbox"
        (csv,) = list(inbox.rglob("*.csv"))
        (png,) = list(inbox.rglob("*.png"))
        assert csv.name == "passwd_data.csv"  # a name, never a path
        assert png.parent.name == sent.message_id
        assert csv.read_bytes() == b"col1,col2\n1,2\n"
        assert answer == (
            f"received: link passwd_data.csv {csv.as_uri()} 14 bytes; "
            f"link {png.name} {png.as_uri()} 1032 bytes\ngot them"
        )


async def test_an_attachment_over_the_limit_is_told_in_one_line_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    settings = {"bridge_max_attachment_mb": 1}
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        big = b"x" * (1024 * 1024 + 1)
        await stack.emu.send_user_file(big, name="dump.bin", mime="application/octet-stream")
        await stack.wait_text(lambda t: t == T("attachment.held", count=1))
        await stack.say("say anyway")
        line = await stack.wait_text(lambda t: t.startswith("附件"))
        assert line == T("attachment.too_large", name="dump.bin", limit=1)
        await stack.wait_text(lambda t: t == "anyway")  # no "received:": nothing reached it
        await stack.settled()
        assert not any(t.startswith("received:") for t in stack.texts())
        inbox = stack.demo.service.settings.store.bridge_data_dir / "inbox"
        assert not any(inbox.rglob("*")), "a partial download was left behind"


async def test_audio_as_voice_file_and_video_are_files_to_the_agent(tmp_path: Path) -> None:
    # BRIDGE_VOICE=file: a voice message passes through as a file (tests/integration/
    # test_voice.py has the default, where it is heard).
    async with running_stack(tmp_path / "bridge", settings={"bridge_voice": "file"}) as stack:
        await stack.emu.send_user_file(b"OggS....", kind="audio", mime="audio/ogg")
        await stack.emu.send_user_file(
            b"\x00\x00\x00 ftypmp4", kind="media", name="clip.mp4", mime="video/mp4"
        )
        await stack.wait_text(lambda t: t == T("attachment.held", count=2))
        await stack.say("say ok")
        answer = await stack.wait_text(lambda t: t.startswith("received:"))
        assert answer.count("link ") == 2
        assert "clip.mp4" in answer
        assert [kind for _, _, kind in fetched(stack)] == ["file", "file"]


async def test_a_quote_reply_to_an_image_carries_it(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        image = await stack.emu.send_user_file(PNG, kind="image", mime="image/png")
        await stack.wait_text(lambda t: t == T("attachment.held", count=1))
        await stack.say("say first")  # takes the held image
        await stack.wait_text(lambda t: t == "received: image image/png 1032 bytes\nfirst")
        await stack.settled()
        await stack.say("say again, that one", parent_id=image.message_id)
        answer = await stack.wait_text(lambda t: t.endswith("again, that one"))
        assert answer == "received: image image/png 1032 bytes\nagain, that one"
        assert [message for message, _, _ in fetched(stack)] == [image.message_id] * 2


async def test_a_quote_reply_in_a_group_to_an_image_the_bot_never_took_carries_it(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        # Posted in the group without @bot: the bridge ignores it (it was not for the bot).
        image = await stack.emu.send_user_file(
            PNG, kind="image", mime="image/png", chat_type="group"
        )
        group = image.chat_id
        await stack.say(
            "say that one", chat_type="group", mention_bot=True, parent_id=image.message_id
        )
        answer = await stack.wait_text(lambda t: t.endswith("that one"), chat_id=group)
        assert answer == "received: image image/png 1032 bytes\nthat one"
        looked_up = stack.emu.calls(f"{RESOURCES}{image.message_id}", "GET")
        assert [c.path.endswith(image.message_id) for c in looked_up] == [True, False]


async def test_a_held_image_survives_a_bridge_restart(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await stack.emu.send_user_file(PNG, kind="image", mime="image/png")
        await stack.wait_text(lambda t: t == T("attachment.held", count=1))
        await stack.demo.service.engine.wait_idle()
        await _crash_and_restart(stack)
        await stack.say("say still there?")
        answer = await stack.wait_text(lambda t: t.endswith("still there?"))
        assert answer == "received: image image/png 1032 bytes\nstill there?"
        await stack.settled()
        # One held line, no "picked up again" line for the image.
        assert stack.texts() == [T("attachment.held", count=1), answer]
