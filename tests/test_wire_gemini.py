"""The Gemini API dialect: `nemo_gym.wire.gemini` both ways, and the endpoint serving it.

The wire tests round-trip a conversation (client body -> server parse, server reply ->
client parse, whole and streamed). The endpoint tests speak HTTP as Gemini CLI's SDK
does (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`, the key
as `x-goog-api-key` or `key=`), through a real rollout, and check the calls land on it
with the model's token ids. Gemini CLI itself is driven in
tests/harnesses/test_cli_agents.py.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

import nemo_gym as gym
from nemo_gym.endpoint import ModelEndpoint, Route
from nemo_gym.models import ScriptedModel
from nemo_gym.wire import gemini, iter_sse
from nemo_gym.wire.common import WireError

SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}


def conversation() -> gym.ModelRequest:
    return gym.ModelRequest(
        messages=(
            gym.Message.system("Be terse."),
            gym.Message.user("fix the test"),
            gym.Message.assistant(
                "Looking.",
                tool_calls=(
                    gym.ToolCall(id="c1", name="shell", arguments='{"cmd": "ls"}'),
                    gym.ToolCall(id="c2", name="shell", arguments="not json"),
                ),
            ),
            gym.Message.tool("calc.py", tool_call_id="c1"),
            gym.Message.tool("error: bad", tool_call_id="c2"),
            gym.Message.user("go on"),
        ),
        tools=(gym.ToolSpec(name="shell", description="run", parameters=SCHEMA),),
        sampling=gym.Sampling(temperature=0.5, top_p=0.9, max_tokens=64, seed=3, stop=("END",)),
    )


def reply(
    content: str | None = None, *calls: tuple[str, str, str], reasoning: str | None = None
) -> gym.ModelResponse:
    message = gym.Message(
        role="assistant",
        content=content,
        reasoning=reasoning,
        tool_calls=tuple(gym.ToolCall(id=i, name=n, arguments=a) for i, n, a in calls),
    )
    return gym.ModelResponse(
        message=message,
        finish_reason="tool_calls" if calls else "stop",
        usage=gym.Usage(prompt_tokens=7, completion_tokens=3),
        prompt_token_ids=[1, 2, 3],
        completion_token_ids=[500, 501, 502],
    )


# ----------------------------------------------------------------------------- wire


def test_a_request_round_trips_through_the_client_and_server_sides() -> None:
    request = conversation()
    body, sent = gemini.build_request(request)
    assert body["systemInstruction"] == {"parts": [{"text": "Be terse."}]}
    assert [turn["role"] for turn in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][1]["parts"][2] == {
        "functionCall": {"id": "c2", "name": "shell", "args": {"_raw": "not json"}}
    }
    assert body["contents"][2]["parts"][0] == {
        "functionResponse": {"id": "c1", "name": "shell", "response": {"output": "calc.py"}}
    }
    assert body["generationConfig"] == {
        "temperature": 0.5,
        "topP": 0.9,
        "maxOutputTokens": 64,
        "seed": 3,
        "stopSequences": ["END"],
    }
    assert sent.seed == 3 and sent.stop == ("END",)
    served = gemini.parse_request(json.loads(json.dumps(body)), model="m", stream=True)
    assert served.stream and served.request.model == "m"
    assert served.request.messages == request.messages
    assert served.request.tools == request.tools
    assert served.request.sampling == request.sampling


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_round_trips_whole_and_streamed(stream: bool) -> None:
    response = reply(
        "Running it.",
        ("c1", "shell", '{"cmd": "pytest -q"}'),
        ("c2", "edit", '{"path": "calc.py"}'),
        reasoning="The test fails.",
    )
    if stream:
        events = gemini.stream_events(response, model="m", id="r1")
        assert len(events) == 4  # a part an event; the last carries the finish and usage
        gathered = gemini.GenerateStream()
        for event, data in iter_sse(b"".join(events)):
            gathered.feed_event(event, data)
        back = gathered.response()
    else:
        body = gemini.build_response(response, model="m", id="r1")
        assert body["candidates"][0]["finishReason"] == "STOP"
        assert body["usageMetadata"] == {
            "promptTokenCount": 7,
            "candidatesTokenCount": 3,
            "totalTokenCount": 10,
        }
        back = gemini.parse_response(json.loads(json.dumps(body)))
    assert back.message == response.message
    assert back.finish_reason == "tool_calls"
    assert back.usage == response.usage
    assert back.model == "m"


def test_a_text_split_over_stream_events_is_one_text() -> None:
    gathered = gemini.GenerateStream()
    for text, finish in (("Hel", None), ("lo", "MAX_TOKENS")):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
        if finish:
            candidate["finishReason"] = finish
        gathered.feed_event(None, json.dumps({"candidates": [candidate]}))
    back = gathered.response()
    assert back.message.content == "Hello" and back.finish_reason == "length"
    unfinished = gemini.GenerateStream()
    unfinished.feed_event(None, json.dumps({"candidates": [{"content": {"parts": []}}]}))
    with pytest.raises(WireError, match="without a finishReason"):
        unfinished.response()


def test_a_function_response_without_an_id_answers_the_earliest_open_call_of_its_name() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "ls", "args": {}}},
                    {"functionCall": {"name": "cat", "args": {"path": "a"}}},
                    {"functionCall": {"name": "ls", "args": {"dir": "b"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "cat", "response": {"error": "no such file"}}},
                    {"functionResponse": {"name": "ls", "response": {"output": "x"}}},
                    {"functionResponse": {"name": "ls", "response": {"files": ["y"]}}},
                ],
            },
        ]
    }
    messages = gemini.parse_request(body).request.messages
    calls = messages[1].tool_calls
    results = [m for m in messages if m.role == "tool"]
    assert [r.tool_call_id for r in results] == [calls[1].id, calls[0].id, calls[2].id]
    assert len({c.id for c in calls}) == 3
    assert [r.content for r in results] == ["no such file", "x", '{"files": ["y"]}']
    orphan = {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "ls"}}]}]}
    with pytest.raises(WireError, match=r"contents\[0\]\.parts\[0\]\.functionResponse"):
        gemini.parse_request(orphan)


def test_openapi_schemas_become_json_schema_and_server_tools_are_skipped() -> None:
    body = {
        "contents": [{"parts": [{"text": "hi"}]}],
        "tools": [
            {"googleSearch": {}},
            {
                "functionDeclarations": [
                    {
                        "name": "shell",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"cmd": {"type": "STRING"}},
                            "required": ["cmd"],
                        },
                    },
                    {"name": "read", "parametersJsonSchema": SCHEMA},
                ]
            },
        ],
        "generationConfig": {"topK": 5, "thinkingConfig": {"includeThoughts": True}},
    }
    served = gemini.parse_request(body)
    assert [t.parameters for t in served.request.tools] == [SCHEMA, SCHEMA]
    assert served.options["generationConfig"] == {
        "topK": 5,
        "thinkingConfig": {"includeThoughts": True},
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"contents": [{"role": "system", "parts": []}]}, r"contents\[0\]\.role"),
        ({"contents": []}, "contents"),
        (
            {"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]},
            r"contents\[0\]\.parts\[0\]\.functionCall\.name",
        ),
        (
            {
                "contents": [
                    {"role": "model", "parts": [{"functionCall": {"name": "f", "args": 1}}]}
                ]
            },
            r"functionCall\.args",
        ),
        ({"contents": [{"parts": "text"}]}, r"contents\[0\]\.parts"),
    ],
)
def test_a_malformed_request_names_its_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(WireError, match=field):
        gemini.parse_request(body)


def test_model_paths() -> None:
    assert gemini.split_path("/models/gemini-2.5-pro:generateContent") == (
        "gemini-2.5-pro",
        "generateContent",
    )
    assert gemini.split_path("/models/m:streamGenerateContent") == ("m", "streamGenerateContent")
    assert gemini.split_path("/models/m:countTokens") is None
    assert gemini.split_path("/models/a/b:generateContent") is None
    assert gemini.path("m", stream=True) == "/v1beta/models/m:streamGenerateContent?alt=sse"


# ----------------------------------------------------------------------------- endpoint


class ViaEndpoint:
    """Hands its recording model to `client(route)` through a loopback endpoint."""

    def __init__(self, endpoint: ModelEndpoint, client: Any) -> None:
        self.endpoint = endpoint
        self.client = client
        self.results: list[Any] = []

    async def run(self, task: Any, episode: Any, model: Any) -> Any:
        async with await self.endpoint.route(model) as route:
            self.results.append(await self.client(route))
            route.raise_failure()
        if route.last is not None:
            request, response = route.last
            for message in request.messages:
                yield message
            yield response.message


async def one_rollout(client: Any, replies: list[gym.ModelResponse]) -> Any:
    endpoint = ModelEndpoint()

    async def anything(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return 1.0

    env = gym.Env(anything, name="e", tasks=[gym.Task(id="t", prompt="hi")])
    model = ScriptedModel(replies)
    harness = ViaEndpoint(endpoint, client)
    try:
        rollout = await gym.rollout(env, model, env.tasks()[0], harness=harness)
    finally:
        await endpoint.aclose()
    return rollout, model, harness


TOOLS = [{"functionDeclarations": [{"name": "shell", "parametersJsonSchema": SCHEMA}]}]


@pytest.mark.parametrize("stream", [False, True])
async def test_the_endpoint_serves_a_tool_conversation_in_the_gemini_dialect(
    stream: bool,
) -> None:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"

    async def call(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> gym.ModelResponse:
        answer = await http.post(url, json=body)
        assert answer.status_code == 200, answer.text
        if not stream:
            return gemini.parse_response(answer.json())
        gathered = gemini.GenerateStream()
        for event, data in iter_sse(answer.content):
            gathered.feed_event(event, data)
        return gathered.response()

    async def client(route: Route) -> Any:
        url = f"{route.anthropic_base_url}/v1beta/models/gemini-label:{method}"
        contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "list files"}]}]
        body = {
            "contents": contents,
            "systemInstruction": {"parts": [{"text": "Be terse."}]},
            "tools": TOOLS,
        }
        async with httpx.AsyncClient() as http:
            first = await call(http, url, body)
            call_id = first.message.tool_calls[0].id
            contents += [
                {
                    "role": "model",
                    "parts": [
                        {"functionCall": {"id": call_id, "name": "shell", "args": {"cmd": "ls"}}}
                    ],
                },
                {
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "id": call_id,
                                "name": "shell",
                                "response": {"output": "calc.py"},
                            }
                        }
                    ],
                },
            ]
            final = await call(http, url, body)
        return first, final

    rollout, model, harness = await one_rollout(
        client, [reply(None, ("c1", "shell", '{"cmd": "ls"}')), reply("Done.")]
    )
    assert rollout.ok, rollout.failure
    first, final = harness.results[0]
    assert first.message.tool_calls[0].id == "c1" and final.message.content == "Done."
    second = model.requests[1]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[3].tool_call_id == "c1" and second.messages[3].content == "calc.py"
    assert second.model is None  # the path's model name is a label, never forwarded
    for model_call in rollout.trajectory.model_calls:
        assert model_call.response.completion_token_ids == [500, 501, 502]


async def test_the_route_token_may_be_the_goog_api_key_and_is_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}

    async def client(route: Route) -> Any:
        base = f"{route.endpoint.url}/v1beta/models/m:generateContent"
        async with httpx.AsyncClient() as http:
            by_header = await http.post(base, json=body, headers={"x-goog-api-key": route.token})
            by_query = await http.post(f"{base}?key={route.token}", json=body)
            stranger = await http.post(base, json=body, headers={"x-goog-api-key": "nope"})
            missing = await http.post(f"{route.endpoint.url}/v1beta/nothing?key={route.token}")
        return by_header, by_query, stranger, missing, route.token

    rollout, model, harness = await one_rollout(client, [reply("one"), reply("two")])
    by_header, by_query, stranger, missing, token = harness.results[0]
    assert rollout.ok, rollout.failure
    assert gemini.parse_response(by_header.json()).message.content == "one"
    assert gemini.parse_response(by_query.json()).message.content == "two"
    assert stranger.status_code == 401
    assert stranger.json()["error"]["status"] == "UNAUTHENTICATED"
    assert missing.status_code == 404 and token not in missing.text
    assert len(model.requests) == 2
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("nemo_gym"))
    assert "gemini request" in ours  # the endpoint did log these requests, without the key
    assert token not in ours


async def test_an_unreadable_gemini_request_fails_the_rollout_naming_the_field() -> None:
    async def client(route: Route) -> Any:
        url = f"{route.anthropic_base_url}/v1beta/models/m:generateContent"
        async with httpx.AsyncClient() as http:
            answer = await http.post(url, json={"contents": [{"role": "tool", "parts": []}]})
        return answer

    rollout, model, harness = await one_rollout(client, [])
    answer = harness.results[0]
    assert answer.status_code == 400
    assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert rollout.failure is not None and rollout.failure.code == "bad_agent_request"
    assert "contents[0].role" in rollout.failure.message
    assert model.requests == []
