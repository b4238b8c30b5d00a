"""Voice messages over the real stack: a spoken clip (espeak-ng, Ogg Opus as Feishu keeps
it) is downloaded through the message-resource API, decoded to 16 kHz PCM and recognized by
the emulator's speech_to_text API, which checks it got that clip's PCM and answers the
scripted transcript. The scripted agent echoes its prompt, so each test sees what reached
the agent; each failure gives its one line and the agent nothing."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import httpx
import pytest

from bridge.demo import scripted_agent_command
from bridge.devtools.emulator.clips import SPOKEN_TRANSCRIPT, repeated, spoken_clip
from bridge.devtools.emulator.records import ApiCall
from bridge.devtools.emulator.speech import Recognition
from bridge.i18n import Translator
from tests.integration.stack import Stack, running_stack
from tests.integration.test_attachments import PNG

T = Translator("zh_CN")
HEARD = T("voice.heard", text=SPOKEN_TRANSCRIPT)
ECHO = f"echo: {SPOKEN_TRANSCRIPT}"
ASR = "/open-apis/speech_to_text/v1/speech/"
RESOURCES = "/open-apis/im/v1/messages/"
PROBE_SECONDS = 0.1


def heard(stack: Stack) -> list[Recognition]:
    """What the bridge had recognized, less the start-up probe (100 ms of silence)."""
    return [r for r in stack.emu.speech.recognitions if r.seconds > PROBE_SECONDS]


async def probed(stack: Stack) -> None:
    """Until the start-up probe was answered (so a fault armed next is the voice's)."""
    await stack.emu.wait_for(lambda: stack.emu.speech.recognitions)


def heard_calls(stack: Stack) -> list[ApiCall]:
    return [c for c in stack.emu.calls(ASR) if len(c.body["speech"]["speech"]) > 5000]


def prompts(stack: Stack) -> list[str]:
    return [t for t in stack.texts() if t.startswith(("echo:", "received:"))]


async def test_a_spoken_clip_is_heard_and_its_words_are_the_prompt(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        sent = await stack.emu.send_user_voice()
        await stack.wait_text(lambda t: t == ECHO)
        await stack.settled()
        # What was understood comes first, quoted in one line, then the agent's answer.
        assert stack.texts() == [HEARD, ECHO]
        assert stack.bot()[0].parent_id == sent.message_id
        content = json.loads(sent.payload["event"]["message"]["content"])
        assert content["duration"] == 3575  # ms, as Feishu says it
        (download,) = [c for c in stack.emu.calls(RESOURCES) if c.method == "GET"]
        assert download.path == f"{RESOURCES}{sent.message_id}/resources/{content['file_key']}"
        assert download.query == {"type": "file"}
        probe, voice = stack.emu.speech.recognitions
        assert (probe.api, probe.seconds, probe.transcript) == ("file", PROBE_SECONDS, "")
        assert (voice.api, voice.transcript) == ("file", SPOKEN_TRANSCRIPT)
        assert voice.seconds == pytest.approx(3.575, abs=0.02)
        assert stack.emu.speech.problems == []
        call = stack.emu.calls(ASR + "file_recognize")[-1]
        assert len(base64.b64decode(call.body["speech"]["speech"])) == 57_204 * 2  # 16 kHz s16
        assert call.body["config"]["format"] == "pcm"
        assert call.body["config"]["engine_type"] == "16k_auto"
        assert stack.reactions(sent.message_id)  # the ack, as for any message
        inbox = stack.demo.service.settings.store.bridge_data_dir / "inbox"
        assert not any(inbox.rglob("*")), "the voice outlived its turn"


async def test_an_agent_that_takes_audio_gets_the_clip_beside_the_words(tmp_path: Path) -> None:
    command = f"{scripted_agent_command()} --audio"
    async with running_stack(tmp_path / "bridge", agent_command=command) as stack:
        await stack.emu.send_user_voice()
        answer = await stack.wait_text(lambda t: t.startswith("received:"))
        size = len(spoken_clip())
        assert answer == f"received: audio audio/ogg {size} bytes\n{ECHO}"
        assert stack.texts()[0] == HEARD


async def test_a_voice_joins_the_images_held_before_it(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await stack.emu.send_user_file(PNG, kind="image", mime="image/png")
        await stack.wait_text(lambda t: t == T("attachment.held", count=1))
        await stack.emu.send_user_voice()
        answer = await stack.wait_text(lambda t: t.startswith("received:"))
        assert answer == f"received: image image/png 1032 bytes\n{ECHO}"
        assert stack.texts()[1] == HEARD


async def test_a_voice_over_the_file_limit_is_recognized_in_stream_pieces(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        words = "Read the whole log and tell me why the build failed."
        await stack.emu.send_user_voice(repeated(spoken_clip(), 65), transcript=words)
        await stack.wait_text(lambda t: t == f"echo: {words}", within=60)
        (voice,) = heard(stack)
        assert voice.api == "stream"
        assert voice.seconds == pytest.approx(65, abs=0.05)
        assert voice.pieces == 325  # 200 ms each, the documented 100–200 ms
        assert len(stack.emu.calls(ASR + "file_recognize")) == 1  # the start-up probe only
        assert stack.texts()[0] == T("voice.heard", text=words)


async def failure_line(stack: Stack, key: str, **params: object) -> str:
    line = await stack.wait_text(lambda t: t.startswith(T(key, **params)[:12]))
    await stack.settled()
    assert line == T(key, **params)
    assert stack.texts() == [line], "one line, and nothing else of the round"
    assert prompts(stack) == []
    return line


async def test_a_voice_past_the_limit_gets_one_line_naming_it(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge", settings={"bridge_voice_max_seconds": 2}) as s:
        await s.emu.send_user_voice()
        line = await failure_line(s, "voice.too_long", limit=2)
        assert "2" in line
        assert heard(s) == []
        state = await s.runtime_state()
        assert state["last_terminal"]["ending"] == "voice"


async def test_recognition_refused_for_lack_of_the_scope_says_so(tmp_path: Path) -> None:
    async with running_stack(
        tmp_path / "bridge",
        settings={"bridge_voice": "transcribe"},
        emulator_options={"speech_scope": False},
    ) as stack:
        await stack.emu.send_user_voice()
        line = await failure_line(stack, "voice.refused")
        assert "speech_to_text:speech" in line


async def test_recognition_that_fails_says_so(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await probed(stack)
        stack.emu.fail_next("POST", ASR + "*", "business_error", code=2200, msg="Internal Error")
        await stack.emu.send_user_voice()
        await failure_line(stack, "voice.failed")


async def test_a_voice_with_nothing_recognized_says_so(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await stack.emu.send_user_voice(transcript="")
        await failure_line(stack, "voice.silent")


async def test_audio_that_does_not_decode_says_so(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await stack.emu.send_user_file(b"OggS" + bytes(500), kind="audio")
        await failure_line(stack, "voice.undecodable")
        assert heard(stack) == []


async def test_a_voice_recalled_while_it_is_heard_stops_like_any_recalled_message(
    tmp_path: Path,
) -> None:
    async with running_stack(tmp_path / "bridge") as stack:
        await probed(stack)
        stack.emu.fail_next("POST", ASR + "*", "timeout", hold_seconds=1.0)
        sent = await stack.emu.send_user_voice()
        await stack.emu.wait_for(lambda: heard_calls(stack))
        await stack.emu.recall_message(sent.message_id)
        await stack.wait_text(lambda t: t == T("presence.recalled"))
        await stack.settled()
        assert stack.texts() == [T("presence.recalled")]
        assert prompts(stack) == []
        await stack.say("after")
        await stack.wait_text(lambda t: t == "echo: after")


async def test_voice_off_is_refused_politely_and_never_fetched(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge", settings={"bridge_voice": "off"}) as stack:
        await stack.emu.send_user_voice()
        await stack.wait_text(lambda t: t == T("voice.off"))
        await stack.settled()
        assert stack.texts() == [T("voice.off")]
        assert [c for c in stack.emu.calls(RESOURCES) if c.method == "GET"] == []
        assert stack.emu.calls(ASR) == []  # not even the probe


async def test_voice_as_file_passes_the_audio_through_as_before(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "bridge", settings={"bridge_voice": "file"}) as stack:
        await stack.emu.send_user_voice()
        await stack.wait_text(lambda t: t == T("attachment.held", count=1))
        assert stack.emu.calls(ASR) == []  # not even the probe


async def test_without_the_scope_start_up_says_so_and_voice_goes_as_a_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bridge.media.voice")
    async with running_stack(tmp_path / "bridge", emulator_options={"speech_scope": False}) as s:
        await s.emu.wait_for(lambda: s.demo.service.engine.voice_mode.scope_missing)
        assert "lacks the scope speech_to_text:speech" in caplog.text
        async with httpx.AsyncClient(trust_env=False) as http:
            status = (await http.get(f"{s.ops_url}/status")).json()
        assert status["voice"] == {"mode": "file", "scope_missing": True}
        await s.emu.send_user_voice()
        await s.wait_text(lambda t: t == T("attachment.held", count=1))


async def test_in_card_style_what_was_heard_still_comes_before_the_card(tmp_path: Path) -> None:
    settings = {
        "bridge_presence_style": "card",
        "bridge_first_hint_seconds": 0.05,
        "bridge_card_update_interval_seconds": 0.05,
    }
    async with running_stack(tmp_path / "bridge", settings=settings) as stack:
        await stack.emu.send_user_voice(transcript="sleep 300\nsay Done.")
        await stack.wait_text(lambda t: "Done." in t)
        await stack.settled()
        first, *rest = stack.bot()
        assert first.text == T("voice.heard", text="sleep 300 say Done.")  # one line
        assert [m.msg_type for m in rest] == ["interactive"]  # the status card, then no line
