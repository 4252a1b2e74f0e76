"""`RemoteAgent`: a Responses-speaking agent service, our tools, our verifier.

The service in these tests is a real HTTP server (loopback) that reads each Responses
request with the wire module and asks its model through the real `openai` SDK, at the
policy route the request's metadata names: so the policy calls land on the rollout.
"""

from __future__ import annotations

import json
from typing import Any

import openai

import nemo_gym as gym
from nemo_gym.harnesses.remote import RemoteAgent
from nemo_gym.models import ScriptedModel
from nemo_gym.testing.httpserver import HTTPRequest, LoopbackHTTPServer, Reply
from nemo_gym.wire import openai_chat, openai_responses


async def agent_service(request: HTTPRequest) -> Reply:
    """A minimal remote agent: relays the conversation to its policy, returns the reply."""
    body = request.json()
    served = openai_responses.parse_request(body)
    metadata = served.options.get("metadata") or {}
    chat, _ = openai_chat.build_request(served.request, model="policy")
    async with openai.AsyncOpenAI(
        base_url=metadata["nemo_gym_policy_base_url"],
        api_key=metadata["nemo_gym_policy_api_key"],
        max_retries=0,
    ) as client:
        completion = await client.chat.completions.create(**chat)
    reply = openai_chat.parse_response(completion.model_dump())
    return Reply(200, openai_responses.build_response(reply, model="agent", id="resp_1"))


@gym.tool
async def lookup(city: str) -> str:
    """The temperature of a city."""
    return {"Paris": "21C"}.get(city, "unknown")


class Weather(gym.Env):
    name = "weather"

    def __init__(self) -> None:
        super().__init__(self.score, tasks=[gym.Task(id="w", prompt="Paris?", answer="21C")])

    async def open(self, task: gym.Task) -> gym.BasicEpisode:
        return gym.BasicEpisode([lookup])

    @staticmethod
    async def score(task: gym.Task, trajectory: gym.Trajectory) -> float:
        return float(task.answer in trajectory.final_text)


def policy(request: gym.ModelRequest) -> gym.ModelResponse:
    done = any(m.role == "tool" for m in request.messages)
    if done:
        message = gym.Message.assistant("It is 21C in Paris.")
    else:
        call = gym.ToolCall(id="call_1", name="lookup", arguments=json.dumps({"city": "Paris"}))
        message = gym.Message.assistant(None, tool_calls=(call,))
    return gym.ModelResponse(
        message=message, prompt_token_ids=[1, len(request.messages)], completion_token_ids=[9, 9]
    )


async def test_we_run_the_tools_the_service_asks_for_and_capture_its_policy_calls() -> None:
    async with LoopbackHTTPServer(agent_service) as service:
        harness = RemoteAgent(f"{service.url}/v1", api_key="service-key")
        env = Weather()
        model = ScriptedModel(policy)
        rollout = await gym.rollout(env, model, env.tasks()[0], harness=harness)
        await harness.aclose()
        bodies: list[dict[str, Any]] = [r.json() for r in service.requests]
    assert rollout.ok, rollout.failure
    assert rollout.reward == 1.0
    assert [t.output for t in rollout.trajectory.tool_results] == ["21C"]
    assert [m.role for m in rollout.messages] == ["user", "assistant", "tool", "assistant"]
    # two policy calls, through the service, recorded here with their token ids
    calls = rollout.trajectory.model_calls
    assert [c.response.prompt_token_ids for c in calls] == [[1, 1], [1, 3]]
    # the service saw our tool and, on the second turn, the tool's result
    assert bodies[0]["tools"][0]["name"] == "lookup"
    assert bodies[1]["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "21C",
    }
    assert "service-key" not in json.dumps(harness.to_spec().model_dump())


async def test_the_service_sees_the_episodes_opening_messages() -> None:
    class Briefed(Weather):
        async def open(self, task: gym.Task) -> gym.BasicEpisode:
            return gym.BasicEpisode([lookup], opening=[gym.Message.user("Use Celsius.")])

    async with LoopbackHTTPServer(agent_service) as service:
        harness = RemoteAgent(f"{service.url}/v1")
        env = Briefed()
        rollout = await gym.rollout(env, ScriptedModel(policy), env.tasks()[0], harness=harness)
        await harness.aclose()
        first = service.requests[0].json()
    assert rollout.ok, rollout.failure
    assert [m.content for m in rollout.messages[:2]] == ["Paris?", "Use Celsius."]
    assert "Use Celsius." in json.dumps(first["input"])


async def test_a_failing_service_is_a_harness_failure() -> None:
    async with LoopbackHTTPServer(lambda r: Reply(400, {"error": {"message": "nope"}})) as svc:
        harness = RemoteAgent(f"{svc.url}/v1", serve_policy=False)
        env = Weather()
        rollout = await gym.rollout(env, ScriptedModel([]), env.tasks()[0], harness=harness)
        await harness.aclose()
    assert rollout.failure is not None
    assert (rollout.failure.kind, rollout.failure.code) == ("harness", "remote_agent")
    assert "nope" in rollout.failure.message


async def test_a_policy_failure_under_the_service_keeps_its_kind() -> None:
    async with LoopbackHTTPServer(agent_service) as service:
        harness = RemoteAgent(f"{service.url}/v1")
        env = Weather()
        model = ScriptedModel([gym.errors.ModelError("policy down", code="model")])
        rollout = await gym.rollout(env, model, env.tasks()[0], harness=harness)
        await harness.aclose()
    assert rollout.failure is not None and rollout.failure.kind == "model"
    assert "policy down" in rollout.failure.message


def test_registered_by_name() -> None:
    harness = gym.registry.build("harness", "remote_agent", base_url="http://127.0.0.1:1/v1")
    assert isinstance(harness, RemoteAgent) and harness.to_spec().name == "remote_agent"
