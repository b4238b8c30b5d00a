"""The scripted model's Gemini API (bridge/devtools/fake_model/gemini.py), as Gemini CLI calls
it: the router's JSON side request, the streamed turn with text or a function call, the answer
after the function's response, countTokens and the models list."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bridge.devtools.fake_model.script import DRIP_SECONDS, HELLO, Say, long_text, plan
from bridge.devtools.fake_model.server import build_app

Client = TestClient[web.Request, web.Application]
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
WRITE_FILE = {
    "name": "write_file",
    "parametersJsonSchema": {"properties": {"file_path": {}, "content": {}}},
}


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    test_client: Client = TestClient(TestServer(build_app(), host="127.0.0.1", port=0))
    await test_client.start_server()
    yield test_client
    await test_client.close()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


async def events(client: Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post(STREAM, json=body)
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    raw = await response.text()
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]


def parts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]


async def test_a_streamed_answer_is_chunks_of_text_ending_with_stop(client: Client) -> None:
    context = user("<session_context>WRITE /x y</session_context>")  # not the user's words
    chunks = await events(client, {"contents": [context, user("LONG 3")]})
    assert "".join(p["text"] for p in parts(chunks)) == long_text(3)
    assert [c["candidates"][0].get("finishReason") for c in chunks][-2:] == [None, "STOP"]
    assert chunks[-1]["usageMetadata"]["totalTokenCount"] == 20
    assert all(c["candidates"][0]["content"]["role"] == "model" for c in chunks)


async def test_a_write_is_a_function_call_and_its_response_gets_the_answer(
    client: Client,
) -> None:
    tools = [{"functionDeclarations": [WRITE_FILE]}]
    asked = {"contents": [user("WRITE /w/notes.txt hi there")], "tools": tools}
    chunks = await events(client, asked)
    call = {"name": "write_file", "args": {"file_path": "/w/notes.txt", "content": "hi there"}}
    assert parts(chunks) == [{"functionCall": call}]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    reply = {"functionResponse": {"name": "write_file", "response": {"output": "written"}}}
    after = dict(
        asked,
        contents=[
            *asked["contents"],
            {"role": "model", "parts": [{"functionCall": call}]},
            {"role": "user", "parts": [reply]},
        ],
    )
    answer = "".join(p["text"] for p in parts(await events(client, after)))
    assert answer == 'the tool said: {"output": "written"}'


async def test_the_routers_json_request_gets_json_that_fits_its_schema(client: Client) -> None:
    schema = {
        "type": "OBJECT",
        "properties": {
            "complexity_reasoning": {"type": "STRING"},
            "complexity_score": {"type": "INTEGER"},
            "model_choice": {"type": "STRING", "enum": ["flash", "pro"]},
        },
    }
    body = {
        "contents": [user("hello")],
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema},
    }
    response = await client.post("/v1beta/models/gemini-2.5-flash-lite:generateContent", json=body)
    answer = await response.json()
    text = answer["candidates"][0]["content"]["parts"][0]["text"]
    assert json.loads(text) == {
        "complexity_reasoning": "scripted",
        "complexity_score": 1,
        "model_choice": "flash",
    }
    assert answer["candidates"][0]["finishReason"] == "STOP"


async def test_count_tokens_and_the_models_list(client: Client) -> None:
    count = await client.post("/v1beta/models/gemini-2.5-pro:countTokens", json={"contents": []})
    assert (await count.json())["totalTokens"] >= 1
    listed = await (await client.get("/v1beta/models")).json()
    assert "models/gemini-2.5-pro" in [m["name"] for m in listed["models"]]
    unknown = await client.post("/v1beta/models/gemini-2.5-pro:embedContent", json={})
    assert unknown.status == 404


def test_drip_is_a_long_answer_paced() -> None:
    assert plan("DRIP 4", tools=True) == Say(long_text(4), pace=DRIP_SECONDS)
    assert plan("LONG 4", tools=True) == Say(long_text(4))
    assert plan("hello", tools=True) == Say(HELLO)
