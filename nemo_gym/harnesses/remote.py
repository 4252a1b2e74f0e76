"""`RemoteAgent`: drive an agent service over `POST /v1/responses`; we own tools and scoring.

The service is any server speaking the OpenAI Responses API (an agent deployed behind
its own endpoint, a Responses-compatible agent framework). Each turn the harness sends
the conversation so far and the episode's tools; the service answers with a message
and/or function calls; the harness runs those calls with the episode's tools (exactly
as `ToolLoop` does: malformed arguments and tool errors go back to the service) and
sends the results, until the service answers without a call or `max_turns` is reached.
The environment's verifier scores the result, never the service.

The policy: with `serve_policy=True` (the default) each request carries, in its
`metadata`, a loopback endpoint route to the rollout's own model:
`nemo_gym_policy_base_url` (OpenAI style, `.../v1`), `nemo_gym_policy_anthropic_base_url`
and `nemo_gym_policy_api_key`. A service that calls its model there has every call
recorded on this rollout with its token ids, what a trainer needs; a service with its
own model ignores them, and the rollout then holds the conversation only.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Literal

from nemo_gym.endpoint import ModelEndpoint, Route
from nemo_gym.errors import HarnessError, ModelError
from nemo_gym.harnesses import ToolLoop, opening_messages
from nemo_gym.protocols import Episode, Model
from nemo_gym.records import Event, ModelRequest, Sampling, Task
from nemo_gym.registry import Described
from nemo_gym.tools import tool_table

__all__ = ["RemoteAgent"]


class RemoteAgent(Described):
    """Drive a remote agent service (`POST {base_url}/responses`) through a task.

    Args:
        base_url: the service's OpenAI-style base URL, e.g. "http://127.0.0.1:9000/v1".
        agent: the `model` name sent to the service.
        api_key: the service's key (never part of the spec).
        max_turns: service turns before the rollout stops.
        serve_policy: give the service a route to the rollout's model (see module doc).
        system_prompt: sent first unless the task has its own system message.
        parallel_tool_calls, tool_timeout, tool_errors: as for `ToolLoop`.
        timeout: seconds per service turn.
        metadata: more `metadata` entries sent on every request.
    """

    spec_kind = "harness"
    spec_exclude = frozenset({"api_key"})

    def __init__(
        self,
        base_url: str,
        *,
        agent: str = "agent",
        api_key: str | None = None,
        max_turns: int = 10,
        serve_policy: bool = True,
        system_prompt: str | None = None,
        parallel_tool_calls: bool = True,
        tool_timeout: float | None = None,
        tool_errors: Literal["model", "fail"] = "model",
        timeout: float = 600.0,
        metadata: dict[str, str] | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        self.base_url = base_url
        self.agent = agent
        self.api_key = api_key
        self.max_turns = max_turns
        self.serve_policy = serve_policy
        self.system_prompt = system_prompt
        self.timeout = timeout
        self.metadata = dict(metadata or {})
        self._tools = ToolLoop(
            parallel_tool_calls=parallel_tool_calls,
            tool_timeout=tool_timeout,
            tool_errors=tool_errors,
        )
        self._client: Any = None
        self._endpoint: ModelEndpoint | None = None

    def _service(self) -> Any:
        if self._client is None:
            from nemo_gym.models.openai import OpenAIResponses

            self._client = OpenAIResponses(
                self.agent, base_url=self.base_url, api_key=self.api_key, timeout=self.timeout
            )
        return self._client

    @property
    def endpoint(self) -> ModelEndpoint:
        """The endpoint the policy is served on to the service (created on first use)."""
        if self._endpoint is None:
            self._endpoint = ModelEndpoint()
        return self._endpoint

    def _metadata(self, route: Route | None) -> dict[str, str]:
        metadata = dict(self.metadata)
        if route is not None:
            metadata.update(
                nemo_gym_policy_base_url=route.base_url,
                nemo_gym_policy_anthropic_base_url=route.anthropic_base_url,
                nemo_gym_policy_api_key=route.api_key,
            )
        return metadata

    async def run(self, task: Task, episode: Episode, model: Model) -> AsyncGenerator[Event, None]:
        route = await self.endpoint.route(model) if self.serve_policy else None
        try:
            async for event in self._loop(task, episode, route):
                yield event
        finally:
            if route is not None:
                await route.aclose()

    async def _loop(
        self, task: Task, episode: Episode, route: Route | None
    ) -> AsyncGenerator[Event, None]:
        messages = opening_messages(task, self.system_prompt, episode)
        for message in messages:
            yield message
        tools = tool_table(episode.tools)
        specs = tuple(t.spec for t in episode.tools)
        metadata = self._metadata(route)
        sampling = Sampling(extra={"metadata": metadata}) if metadata else Sampling()
        service = self._service()
        for _ in range(self.max_turns):
            request = ModelRequest(messages=tuple(messages), tools=specs, sampling=sampling)
            try:
                response = await service.generate(request)
            except ModelError as exc:
                if route is not None:
                    route.raise_failure()  # the policy failed under the service: that kind
                raise HarnessError(
                    f"the remote agent at {self.base_url} failed: {exc}", code="remote_agent"
                ) from exc
            if route is not None:
                route.raise_failure()
            reply = response.message
            messages.append(reply)
            yield reply
            if not reply.tool_calls:
                return
            for event in await self._tools.run_tools(tools, reply.tool_calls, messages):
                yield event

    async def aclose(self) -> None:
        """Close the service client and the policy endpoint (both are made again on use)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        if self._endpoint is not None:
            await self._endpoint.aclose()
