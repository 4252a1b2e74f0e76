"""The loopback model endpoint, driven by the real `openai` and `anthropic` SDKs.

Every call goes through a real rollout: the harness opens a route on the endpoint for
the recording model it was handed, an SDK client talks HTTP to it, and the test checks
the call is on that rollout's trajectory with the model's token ids.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai
import pytest

import nemo_gym as gym
from nemo_gym.endpoint import ModelEndpoint, Route
from nemo_gym.errors import ConfigError, HarnessError, ModelError
from nemo_gym.models import ScriptedModel

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def tokens(text: str, base: int = 100) -> list[int]:
    return [base + i for i, _ in enumerate(text.split())]


def reply(
    content: str | None = None, *calls: tuple[str, str, str], prompt_ids: list[int] | None = None
) -> gym.ModelResponse:
    message = gym.Message.assistant(
        content, tool_calls=tuple(gym.ToolCall(id=i, name=n, arguments=a) for i, n, a in calls)
    )
    completion = tokens(content or "call " * max(1, len(calls)), 500)
    return gym.ModelResponse(
        message=message,
        finish_reason="tool_calls" if calls else "stop",
        usage=gym.Usage(prompt_tokens=7, completion_tokens=len(completion)),
        prompt_token_ids=prompt_ids or [1, 2, 3],
        completion_token_ids=completion,
        completion_logprobs=[-0.5] * len(completion),
    )


class ViaEndpoint:
    """A harness that hands its recording model to `client(route)` through an endpoint."""

    def __init__(self, endpoint: ModelEndpoint, client: Callable[[Route], Awaitable[Any]]):
        self.endpoint = endpoint
        self.client = client
        self.routes: list[Route] = []
        self.results: list[Any] = []

    async def run(self, task, episode, model):
        async with await self.endpoint.route(model) as route:
            self.routes.append(route)
            self.results.append(await self.client(route))
            route.raise_failure()
        if route.last is None:
            return
        request, response = route.last
        for message in request.messages:
            yield message
        yield response.message


async def one_rollout(client, replies, *, endpoint=None, task=None):
    endpoint = endpoint or ModelEndpoint()
    harness = ViaEndpoint(endpoint, client)

    async def anything(task, trajectory):
        return 1.0

    env = gym.Env(anything, name="e", tasks=[task or gym.Task(id="t", prompt="hi")])
    model = ScriptedModel(replies)
    try:
        rollout = await gym.rollout(env, model, env.tasks()[0], harness=harness)
    finally:
        await endpoint.aclose()
    return rollout, model, harness


def openai_client(route: Route) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=route.base_url, api_key=route.api_key, max_retries=0)


def anthropic_client(route: Route) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=route.anthropic_base_url, api_key=route.api_key, max_retries=0
    )


# ----------------------------------------------------------------------------- chat


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_completions_with_tool_calls_through_the_openai_sdk(stream: bool) -> None:
    async def client(route: Route) -> Any:
        async with openai_client(route) as sdk:
            tools = [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}}]
            messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Paris?"}]
            if stream:
                chunks = await sdk.chat.completions.create(
                    model="any-label",
                    messages=messages,
                    tools=tools,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                parts = [chunk async for chunk in chunks]
                calls = [c for p in parts for ch in p.choices for c in (ch.delta.tool_calls or [])]
                call_id, name, arguments = (
                    calls[0].id,
                    calls[0].function.name,
                    calls[0].function.arguments,
                )
                assert parts[-1].usage is not None and parts[-1].usage.prompt_tokens == 7
            else:
                first = await sdk.chat.completions.create(
                    model="any-label", messages=messages, tools=tools, temperature=0.3
                )
                call = first.choices[0].message.tool_calls[0]
                call_id, name, arguments = call.id, call.function.name, call.function.arguments
                assert first.choices[0].finish_reason == "tool_calls"
            assert (name, json.loads(arguments)) == ("weather", {"city": "Paris"})
            messages += [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call_id, "content": "sunny"},
            ]
            if stream:
                chunks = await sdk.chat.completions.create(
                    model="any-label", messages=messages, tools=tools, stream=True
                )
                return "".join(
                    [c.choices[0].delta.content or "" async for c in chunks if c.choices]
                )
            final = await sdk.chat.completions.create(
                model="any-label", messages=messages, tools=tools
            )
            return final.choices[0].message.content

    rollout, model, harness = await one_rollout(
        client,
        [
            reply(None, ("call_w1", "weather", '{"city": "Paris"}')),
            reply("It is sunny.", prompt_ids=[1, 2, 3, 9]),
        ],
    )
    assert rollout.ok, rollout.failure
    assert harness.results == ["It is sunny."]
    calls = rollout.trajectory.model_calls
    assert len(calls) == 2
    # the exact ids the in-process model returned, although the SDK only saw text
    assert calls[0].response.completion_token_ids == tokens("call", 500)
    assert calls[1].response.prompt_token_ids == [1, 2, 3, 9]
    assert calls[1].response.completion_logprobs == [-0.5] * 3
    second = model.requests[1]
    assert second.model is None  # the client's label is not forwarded
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]
    assert second.messages[2].tool_call_id == "call_w1" and second.messages[2].content == "sunny"
    assert second.tools[0].name == "weather" and second.tools[0].parameters == WEATHER
    if not stream:
        assert model.requests[0].sampling.temperature == 0.3
    assert [m.role for m in rollout.messages] == ["user", "assistant", "tool", "assistant"]


# ----------------------------------------------------------------------------- responses


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_api_with_function_calls_through_the_openai_sdk(stream: bool) -> None:
    async def client(route: Route) -> Any:
        async with openai_client(route) as sdk:
            tools = [
                {"type": "function", "name": "weather", "parameters": WEATHER, "strict": False}
            ]
            if stream:
                events = await sdk.responses.create(
                    model="m", input="weather?", instructions="Be brief.", tools=tools, stream=True
                )
                seen = [event async for event in events]
                assert seen[0].type == "response.created"
                first = seen[-1].response
            else:
                first = await sdk.responses.create(
                    model="m", input="weather?", instructions="Be brief.", tools=tools
                )
            call = next(item for item in first.output if item.type == "function_call")
            assert (call.name, json.loads(call.arguments)) == ("weather", {"city": "Oslo"})
            follow = [
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": "snow"},
            ]
            final = await sdk.responses.create(
                model="m", input=follow, previous_response_id=first.id, tools=tools
            )
            return final.output_text

    rollout, model, _ = await one_rollout(
        client, [reply(None, ("fc_1", "weather", '{"city": "Oslo"}')), reply("Snowing.")]
    )
    assert rollout.ok, rollout.failure
    second = model.requests[1]
    # previous_response_id brought back the first turn (instructions, input, the call)
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "assistant", "tool"]
    assert second.messages[0].content == "Be brief."
    assert second.messages[-1].content == "snow" and second.messages[-1].tool_call_id == "fc_1"
    assert rollout.trajectory.model_calls[1].response.completion_token_ids == tokens(
        "Snowing.", 500
    )


# ----------------------------------------------------------------------------- anthropic


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_messages_with_tool_use_through_the_anthropic_sdk(stream: bool) -> None:
    async def client(route: Route) -> Any:
        async with anthropic_client(route) as sdk:
            tools = [{"name": "weather", "description": "w", "input_schema": WEATHER}]
            messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Rome?"}]
            system = [
                {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
            ]
            if stream:
                async with sdk.messages.stream(
                    model="claude-label",
                    max_tokens=64,
                    system=system,
                    messages=messages,
                    tools=tools,
                ) as events:
                    first = await events.get_final_message()
            else:
                first = await sdk.messages.create(
                    model="claude-label",
                    max_tokens=64,
                    system=system,
                    messages=messages,
                    tools=tools,
                )
            assert first.stop_reason == "tool_use"
            use = next(block for block in first.content if block.type == "tool_use")
            assert (use.name, use.input) == ("weather", {"city": "Rome"})
            messages += [
                {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "warm"}],
                },
            ]
            final = await sdk.messages.create(
                model="claude-label", max_tokens=64, system=system, messages=messages, tools=tools
            )
            return final.content[0].text

    rollout, model, harness = await one_rollout(
        client,
        [reply("Checking.", ("toolu_1", "weather", '{"city": "Rome"}')), reply("Warm.")],
    )
    assert rollout.ok, rollout.failure
    assert harness.results == ["Warm."]
    second = model.requests[1]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[0].content == "You are terse."
    assert second.messages[2].tool_calls[0].id == "toolu_1"
    assert second.messages[3].tool_call_id == "toolu_1" and second.messages[3].content == "warm"
    assert second.sampling.max_tokens == 64
    assert rollout.trajectory.model_calls[0].response.completion_token_ids == tokens(
        "Checking.", 500
    )


# ----------------------------------------------------------------------------- routing


async def test_concurrent_rollouts_land_on_their_own_trajectories() -> None:
    endpoint = ModelEndpoint()

    def echo(request: gym.ModelRequest) -> gym.ModelResponse:
        text = request.messages[-1].content or ""
        return gym.ModelResponse(
            message=gym.Message.assistant(f"echo {text}"),
            prompt_token_ids=[len(text)],
            completion_token_ids=[7, len(text)],
        )

    async def client(route: Route) -> Any:
        async with openai_client(route) as sdk:
            for turn in range(3):
                await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"{route.token} {turn}"}]
                )

    harness = ViaEndpoint(endpoint, client)

    async def anything(task, trajectory):
        return 1.0

    tasks = [gym.Task(id=f"t{i}", prompt=str(i)) for i in range(6)]
    env = gym.Env(anything, name="e", tasks=tasks)
    rollouts = [
        r async for r in gym.rollouts(env, ScriptedModel(echo), harness=harness, concurrency=6)
    ]
    await endpoint.aclose()
    assert len(rollouts) == 6 and all(r.ok for r in rollouts)
    tokens_seen = set()
    for r in rollouts:
        calls = r.trajectory.model_calls
        assert len(calls) == 3
        owners = {c.request.messages[-1].content.split()[0] for c in calls}
        assert len(owners) == 1  # every call of this rollout came through its own route
        tokens_seen |= owners
        assert all(c.response.completion_token_ids[0] == 7 for c in calls)
    assert len(tokens_seen) == 6


async def test_the_token_may_be_the_api_key_on_plain_paths() -> None:
    async def client(route: Route) -> Any:
        base = route.endpoint.url + "/v1"
        async with openai.AsyncOpenAI(base_url=base, api_key=route.token, max_retries=0) as sdk:
            chat = await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "a"}]
            )
        async with anthropic.AsyncAnthropic(
            base_url=route.endpoint.url, api_key=route.token, max_retries=0
        ) as sdk:
            message = await sdk.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "b"}]
            )
        return chat.choices[0].message.content, message.content[0].text

    rollout, _, harness = await one_rollout(client, [reply("one"), reply("two")])
    assert rollout.ok and harness.results == [("one", "two")]
    assert len(rollout.trajectory.model_calls) == 2


async def test_models_list_and_unknown_tokens() -> None:
    endpoint = ModelEndpoint(served_model="policy-v3")

    async def client(route: Route) -> Any:
        async with openai_client(route) as sdk:
            listed = [m.id async for m in sdk.models.list()]
        stranger = openai.AsyncOpenAI(
            base_url=route.endpoint.url + "/r/nope/v1", api_key="x", max_retries=0
        )
        async with stranger:
            with pytest.raises(openai.AuthenticationError):
                await stranger.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "a"}]
                )
        return listed

    rollout, model, harness = await one_rollout(client, [], endpoint=endpoint)
    assert rollout.ok and harness.results == [["policy-v3"]]
    assert model.requests == []


# ----------------------------------------------------------------------------- failures


async def test_a_model_error_fails_the_rollout_and_the_client_does_not_retry() -> None:
    async def client(route: Route) -> Any:
        async with openai.AsyncOpenAI(base_url=route.base_url, api_key="k", max_retries=3) as sdk:
            with pytest.raises(openai.InternalServerError, match="backend down"):
                await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "a"}]
                )
        assert route.failed.is_set()

    rollout, model, _ = await one_rollout(client, [ModelError("backend down", code="model")])
    assert not rollout.ok
    assert rollout.failure.kind == "model" and "backend down" in rollout.failure.message
    assert len(model.requests) == 1  # x-should-retry: false kept the SDK from retrying
    assert rollout.trajectory.model_calls[0].error is not None


async def test_an_empty_reply_is_the_runners_empty_response_failure() -> None:
    async def client(route: Route) -> Any:
        async with anthropic_client(route) as sdk:
            with pytest.raises(anthropic.InternalServerError):
                await sdk.messages.create(
                    model="m", max_tokens=5, messages=[{"role": "user", "content": "a"}]
                )

    rollout, _, _ = await one_rollout(client, [reply("")])
    assert rollout.failure is not None and rollout.failure.code == "empty_response"


async def test_an_unreadable_request_is_a_harness_failure_naming_the_field() -> None:
    async def client(route: Route) -> Any:
        async with openai_client(route) as sdk:
            with pytest.raises(openai.BadRequestError, match="messages"):
                await sdk.chat.completions.create(model="m", messages=[])
        assert isinstance(route.failure, HarnessError)

    rollout, _, _ = await one_rollout(client, [])
    assert rollout.failure is not None
    assert (rollout.failure.kind, rollout.failure.code) == ("harness", "bad_agent_request")


# ----------------------------------------------------------------------------- lifecycle


async def test_lazy_start_close_and_reuse() -> None:
    endpoint = ModelEndpoint()
    assert not endpoint.started
    model = ScriptedModel(["a", "b"])
    route = await endpoint.route(model)
    first_url = endpoint.url
    async with openai_client(route) as sdk:
        await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    await endpoint.aclose()
    await endpoint.aclose()  # idempotent
    assert not endpoint.started and route.closed
    route = await endpoint.route(model)  # usable again: a new server
    async with openai_client(route) as sdk:
        chat = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "y"}]
        )
    assert chat.choices[0].message.content == "b"
    assert endpoint.url.startswith("http://127.0.0.1:") and first_url.startswith(
        "http://127.0.0.1:"
    )
    await endpoint.aclose()


def test_a_new_event_loop_gets_a_new_server() -> None:
    endpoint = ModelEndpoint()
    model = ScriptedModel(["a", "b"], cycle=True)

    async def once() -> str:
        route = await endpoint.route(model)
        async with openai_client(route) as sdk:
            chat = await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
        await route.aclose()
        return chat.choices[0].message.content

    assert asyncio.run(once()) == "a"
    assert asyncio.run(once()) == "b"  # the first loop's server died with it; a new one serves
    asyncio.run(endpoint.aclose())


async def test_thread_mode_serves_from_its_own_loop() -> None:
    endpoint = ModelEndpoint(thread=True)

    async def client(route: Route) -> Any:
        async with anthropic_client(route) as sdk:
            async with sdk.messages.stream(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "a"}]
            ) as events:
                text = [t async for t in events.text_stream]
        return "".join(text)

    rollout, _, harness = await one_rollout(client, [reply("from the thread")], endpoint=endpoint)
    assert rollout.ok and harness.results == ["from the thread"]
    assert rollout.trajectory.model_calls[0].response.completion_token_ids == tokens(
        "from the thread", 500
    )


def test_only_loopback_is_served() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        ModelEndpoint(host="0.0.0.0")
