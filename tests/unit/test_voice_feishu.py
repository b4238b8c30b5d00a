"""The Feishu side of voice messages: the speech_to_text wire format (one file_recognize up
to 60 s, 200 ms stream pieces beyond, 99991672 typed as the missing scope), the Opus decoder
on the committed spoken clip, the emulator refusing audio that is not the clip's 16 kHz
PCM, and the receiver giving an audio message its kind by BRIDGE_VOICE."""

from __future__ import annotations

import base64
import io
import json
import wave
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from bridge.clock import LoopClock
from bridge.devtools.emulator import codes
from bridge.devtools.emulator.clips import SPOKEN_CLIP, encode_opus, pcm_of, spoken_clip
from bridge.devtools.emulator.speech import SpeechRecognition
from bridge.feishu.client import FeishuClient, RetryPolicy
from bridge.feishu.errors import BusinessError
from bridge.feishu.opus import TooLong, Undecodable, decode_pcm16k
from bridge.feishu.speech import SCOPE_MISSING, scope_missing

DOMAIN = "https://open.feishu.test"
ASR = "/open-apis/speech_to_text/v1/speech/"
SECOND = 32_000  # bytes of 16 kHz mono s16


async def no_sleep(_: float) -> None:
    return None


async def recognize(pcm: bytes) -> str:
    clock = LoopClock().now
    async with FeishuClient(
        "cli_x", "s", DOMAIN, clock=clock, retry=RetryPolicy(0, 0), sleep=no_sleep
    ) as c:
        return await c.recognize_speech(pcm)


@pytest.fixture
def feishu() -> Any:
    with respx.mock(base_url=DOMAIN, assert_all_called=False, using="httpx") as mock:
        mock.post("/open-apis/auth/v3/tenant_access_token/internal").respond(
            json={"code": 0, "msg": "ok", "tenant_access_token": "t-1", "expire": 7200}
        )
        yield mock


def bodies(route: respx.Route) -> list[dict[str, Any]]:
    return [json.loads(call.request.content) for call in route.calls]


async def test_up_to_a_minute_is_one_file_recognize(feishu: Any) -> None:
    route = feishu.post(ASR + "file_recognize").respond(
        json={"code": 0, "msg": "success", "data": {"recognition_text": " 跑一遍测试 "}}
    )
    pcm = bytes(range(256)) * (60 * SECOND // 256)
    assert await recognize(pcm) == "跑一遍测试"
    (body,) = bodies(route)
    assert base64.b64decode(body["speech"]["speech"]) == pcm
    config = body["config"]
    assert (config["format"], config["engine_type"]) == ("pcm", "16k_auto")
    assert len(config["file_id"]) == 16
    assert config["file_id"].isalnum()


async def test_longer_goes_in_200_ms_pieces_of_one_stream(feishu: Any) -> None:
    texts = iter(["", "so far", ""] + [""] * 400)

    def answer(request: httpx.Request) -> httpx.Response:
        config = json.loads(request.content)["config"]
        text = "the whole text" if config["action"] == 2 else next(texts)
        data = {"stream_id": config["stream_id"], "sequence_id": config["sequence_id"]}
        return httpx.Response(200, json={"code": 0, "data": {**data, "recognition_text": text}})

    route = feishu.post(ASR + "stream_recognize").mock(side_effect=answer)
    pcm = bytes(61 * SECOND + 100)
    assert await recognize(pcm) == "the whole text"
    sent = bodies(route)
    assert len(sent) == 306  # 305 full pieces of 6,400 bytes and the 100 left
    assert [b["config"]["sequence_id"] for b in sent] == list(range(306))
    assert [b["config"]["action"] for b in sent] == [1] + [0] * 304 + [2]
    assert {b["config"]["stream_id"] for b in sent} == {sent[0]["config"]["stream_id"]}
    assert b"".join(base64.b64decode(b["speech"]["speech"]) for b in sent) == pcm


async def test_a_missing_scope_is_told_apart(feishu: Any) -> None:
    feishu.post(ASR + "file_recognize").respond(
        400, json={"code": SCOPE_MISSING, "msg": "Access denied. One of the following scopes…"}
    )
    with pytest.raises(BusinessError) as refused:
        await recognize(bytes(SECOND))
    assert scope_missing(refused.value)


def test_the_spoken_clip_decodes_to_16_khz_mono_pcm() -> None:
    pcm = decode_pcm16k(SPOKEN_CLIP, max_seconds=60)
    assert len(pcm) == 57_204 * 2  # 3.575 s
    assert pcm == pcm_of(spoken_clip())
    assert max(abs(s) for s in memoryview(pcm).cast("h")) > 3000  # speech, not silence


def test_past_the_limit_decoding_stops(tmp_path: Path) -> None:
    with pytest.raises(TooLong) as stopped:
        decode_pcm16k(SPOKEN_CLIP, max_seconds=3)
    assert stopped.value.limit_seconds == 3


def test_what_is_not_ogg_opus_is_undecodable(tmp_path: Path) -> None:
    wav = io.BytesIO()
    with wave.open(wav, "wb") as out:  # real audio, but not what Feishu keeps a voice as
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16_000)
        out.writeframes(pcm_of(spoken_clip()))
    for junk in (b"", b"OggS" + bytes(300), b"\x89PNG\r\n\x1a\n" + bytes(64), wav.getvalue()):
        path = tmp_path / "voice.ogg"
        path.write_bytes(junk)
        with pytest.raises(Undecodable):
            decode_pcm16k(path, max_seconds=60)


def speech_body(pcm: bytes) -> dict[str, Any]:
    config = {"file_id": "a" * 16, "format": "pcm", "engine_type": "16k_auto"}
    return {"speech": {"speech": base64.b64encode(pcm).decode()}, "config": config}


def test_the_emulator_hears_only_the_clip_as_16_khz_pcm() -> None:
    speech = SpeechRecognition()
    speech.expect(spoken_clip(), "fix it")
    pcm = pcm_of(spoken_clip())
    assert speech.file_recognize(speech_body(pcm)) == {"recognition_text": "fix it"}
    # The same clip at 8 kHz (every other sample), or the Opus bytes themselves: refused.
    for wrong in (
        pcm[: len(pcm) // 4 * 4][::4] + pcm[1::4],
        spoken_clip()[: len(spoken_clip()) // 2 * 2],
    ):
        with pytest.raises(codes.FeishuError) as refused:
            speech.file_recognize(speech_body(wrong))
        assert refused.value.code == 99992402
    assert len(speech.problems) == 2
    # Another clip of the same length but other sounds: refused too.
    noise = encode_opus(bytes((i * 7919) % 251 for i in range(len(pcm))))
    with pytest.raises(codes.FeishuError):
        speech.file_recognize(speech_body(pcm_of(noise)))


def test_the_emulator_without_the_scope_answers_99991672() -> None:
    speech = SpeechRecognition()
    speech.scope_granted = False
    with pytest.raises(codes.FeishuError) as refused:
        speech.file_recognize(speech_body(bytes(3200)))
    assert (refused.value.http_status, refused.value.code) == (400, 99991672)
