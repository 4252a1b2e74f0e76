"""verl: an agent loop that plays nemo_gym rollouts against verl's rollout servers.

`NemoGymAgentLoop` is a verl `AgentLoopBase` registered as `nemo_gym`. For each
dataset row it runs our runner's `gym.rollout` with the environment's own harness and
a `ServerPolicy`: a `Model` over verl's `server_manager.generate(prompt_ids=...)` that
renders prompts with the policy's chat template and continues each conversation from
the exact ids of the turn before (nemo_gym.models.tokens), so the `response_ids` verl
trains on are exactly the ids the policy produced and consumed. It returns verl's
`AgentLoopOutput` with `prompt_ids`, `response_ids`, `response_mask` (0 on tool
results and template glue), `response_logprobs`, `reward_score` (our verifier's) and
`num_turns`.

```python
rows = nemo_gym.integrations.verl.rows(gym.make("bank"), split="train")  # -> parquet
# verl config: actor_rollout_ref.rollout.agent.agent_loop_config_path: a YAML with
#   - name: nemo_gym
#     _target_: nemo_gym.integrations.verl.NemoGymAgentLoop
#     timeout: 600            # options: keys of this entry (verl passes them as kwargs)
```

Each model turn gets the response budget that is left (`rollout.response_length`
minus what the rollout's response already holds), as verl's own tool agent does; a
rollout with none left for another turn ends there, is verified as it stands and kept
(`extra_fields["nemo_gym_budget_exhausted"]`). A turn ends on any of the model's EOS
ids (the tokenizer's and its generation config's, as vLLM stops on) or of the
request's `stop_token_ids`.

verl's reward is a number per sample: a failed or untrustworthy rollout gets
`reward_score` 0.0 with an all-zero `response_mask` (nothing of it is trained on) and
`extra_fields["nemo_gym_masked"] = True`; its 0.0 still enters the group's mean in
verl's GRPO advantage (verl has no per-sample mask there). Tested against verl 0.9.1's
own classes (installed without its GPU dependencies; see scripts/test-verl.sh).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncGenerator, Iterable, Mapping
from contextlib import aclosing
from typing import Any

from nemo_gym import training
from nemo_gym.errors import ConfigError, MissingDependency, ModelError
from nemo_gym.harnesses import opening_messages
from nemo_gym.models.base import ModelAdapter
from nemo_gym.protocols import Environment, Episode, Event, Harness, Model
from nemo_gym.records import Message, ModelRequest, ModelResponse, Sampling, Task, Usage
from nemo_gym.runner import default_harness, rollout

try:
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError as exc:  # pragma: no cover - exercised where verl is absent
    raise MissingDependency("verl", "verl") from exc

log = logging.getLogger(__name__)

__all__ = ["AGENT_NAME", "NemoGymAgentLoop", "ResponseBudgetExhausted", "ServerPolicy", "rows"]

AGENT_NAME = "nemo_gym"
"""The name the agent loop is registered under (the rows' `agent_name`)."""


class ResponseBudgetExhausted(ModelError):
    """No response budget left for another turn (`NemoGymAgentLoop` ends the rollout)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="response_budget")


class _UntilBudget:
    """A harness run that ends, as finished, when the response budget runs out.

    verl's tool agent stops at `response_length` and keeps the sample; ending the
    harness (not failing it) lets the runner verify the episode's end state as usual.
    The refused turn is recorded as an errored model call: it has no tokens.
    """

    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    def __getattr__(self, name: str) -> Any:
        return getattr(self.harness, name)

    async def run(self, task: Task, episode: Episode, model: Model) -> AsyncGenerator[Event, None]:
        events = self.harness.run(task, episode, model)
        try:
            async with aclosing(events):
                async for event in events:
                    yield event
        except ResponseBudgetExhausted:
            return


class ServerPolicy(ModelAdapter):
    """verl's rollout server as a nemo_gym `Model`, token-exact across turns.

    `server_manager` is what verl hands an agent loop (`generate(request_id,
    prompt_ids=, sampling_params=)` returning a `TokenOutput`); `sampling_params` are
    verl's for this sample, under which each request's own sampling is merged. One
    instance serves one rollout: one `request_id` for every turn (verl routes it to the
    same server, so its prefix cache holds) and, given `response_length`, one response
    budget counted from the first turn's prompt. `eos_token_ids` end a turn besides the
    tokenizer's EOS (pass the generation config's, which vLLM stops on).
    """

    def __init__(
        self,
        server_manager: Any,
        tokenizer: Any,
        *,
        sampling_params: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
        tool_format: str = "hermes",
        request_id: str | None = None,
        response_length: int | None = None,
        eos_token_ids: Iterable[int] = (),
    ) -> None:
        super().__init__()
        from nemo_gym.models.chat import ChatTemplate
        from nemo_gym.models.tokens import Continuations

        if response_length is not None and response_length < 1:
            raise ConfigError(f"ServerPolicy(response_length={response_length}): must be >= 1")
        self.server_manager = server_manager
        self.template = ChatTemplate(
            tokenizer, chat_template=chat_template, tool_format=tool_format
        )
        self.continuations = Continuations(self.template, max_conversations=64)
        self.sampling_params = dict(sampling_params or {})
        self.request_id = request_id or uuid.uuid4().hex
        self.response_length = response_length
        self._first_prompt: int | None = None
        stops = self.sampling_params.get("stop_token_ids") or ()
        eos = {getattr(tokenizer, "eos_token_id", None), *eos_token_ids, *stops}
        self._eos_ids = frozenset(i for i in eos if isinstance(i, int))

    def _params(self, sampling: Sampling) -> dict[str, Any]:
        params = dict(self.sampling_params)
        for name in ("temperature", "top_p", "max_tokens", "seed"):
            value = getattr(sampling, name)
            if value is not None:
                params[name] = value
        if sampling.stop:
            params["stop"] = list(sampling.stop)
        params.update(sampling.extra)
        return params

    def _budget(self, prompt_ids: list[int]) -> int | None:
        """Response tokens left: what the first prompt leaves of `response_length`."""
        if self._first_prompt is None:
            self._first_prompt = len(prompt_ids)
        if self.response_length is None:
            return None
        return self.response_length - (len(prompt_ids) - self._first_prompt)

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        prompt = self.continuations.prompt(request)
        params = self._params(request.sampling)
        budget = self._budget(prompt.ids)
        if budget is not None and budget <= 0:
            raise ResponseBudgetExhausted(
                f"the rollout's response has used up response_length={self.response_length}: "
                "no budget left for another turn"
            )
        if budget is not None:
            params["max_tokens"] = min(int(params.get("max_tokens") or budget), budget)
        try:
            output = await self.server_manager.generate(
                request_id=self.request_id, prompt_ids=prompt.ids, sampling_params=params
            )
        except Exception as exc:
            raise ModelError(f"verl server: {type(exc).__name__}: {exc}", code="verl") from exc
        if getattr(output, "stop_reason", None) == "aborted":
            # verl aborts in-flight requests when it pauses generation (weight sync).
            raise ModelError("verl server aborted the request", code="aborted")
        ids = list(output.token_ids)
        logprobs = list(output.log_probs) if output.log_probs else None
        ended = bool(ids) and ids[-1] in self._eos_ids
        text = self.template.decode(ids[:-1] if ended else ids)
        content: str | None = text
        calls: tuple[Any, ...] = ()
        if request.tools:
            content, calls = self.template.parse(text)
        message = Message.assistant(content, tool_calls=calls)
        self.continuations.remember(request, message, prompt.ids, ids, ended_on_stop_token=ended)
        # verl reports "completed" for EOS, stop strings and the token limit alike.
        limit = params.get("max_tokens")
        cut = limit is not None and len(ids) >= int(limit)
        if calls:
            finish = "tool_calls"
        elif ended:
            finish = "stop"
        elif cut or not request.sampling.stop:
            finish = "length"
        else:
            finish = "stop"  # a stop string (vLLM drops it from the ids it returns)
        return ModelResponse(
            message=message,
            finish_reason=finish,
            usage=Usage(prompt_tokens=len(prompt.ids), completion_tokens=len(ids)),
            model="verl",
            prompt_token_ids=list(prompt.ids),
            completion_token_ids=ids,
            completion_logprobs=logprobs,
            sampling=Sampling(
                temperature=params.get("temperature"),
                top_p=params.get("top_p"),
                max_tokens=params.get("max_tokens"),
                seed=params.get("seed"),
            ),
            metadata={"history": prompt.history},
        )


def rows(
    env: Environment,
    *,
    split: str = "train",
    limit: int | None = None,
    tasks: Iterable[Task] | None = None,
    env_name: str | None = None,
    env_options: Mapping[str, Any] | None = None,
    harness: Harness | None = None,
) -> list[dict[str, Any]]:
    """Dataset rows for verl's `RLHFDataset` (write them to parquet for `data.train_files`).

    Each row: `prompt` (the opening messages; verl's `raw_prompt`), `data_source`,
    `agent_name` ("nemo_gym"), `reward_model` and `extra_info.nemo_gym` with the task
    (JSON) and how to rebuild the environment in verl's workers: `env` (a name for
    `gym.make`, default `env.name`) and `env_options` (JSON text: Parquet cannot store an
    empty struct, and rows with different options would share one struct's fields).
    """
    harness = harness or default_harness(env)
    items = list(env.tasks(split=split, limit=limit) if tasks is None else tasks)
    name = env_name or env.name
    options = json.dumps(dict(env_options or {}), sort_keys=True)
    out = []
    for index, task in enumerate(items):
        messages = opening_messages(task, getattr(harness, "system_prompt", None))
        out.append(
            {
                "prompt": [{"role": m.role, "content": m.content or ""} for m in messages],
                "data_source": f"nemo_gym/{name}",
                "agent_name": AGENT_NAME,
                "reward_model": {"style": "nemo_gym", "ground_truth": ""},
                "extra_info": {
                    "index": index,
                    "nemo_gym": {
                        "env": name,
                        "env_options": options,
                        "task": task.model_dump_json(),
                    },
                },
            }
        )
    return out


_ENVIRONMENTS: dict[str, Environment] = {}


def _environment(spec: Mapping[str, Any]) -> Environment:
    """The environment a row names, built once per worker process."""
    name = spec.get("env")
    if not name:
        raise ConfigError(
            "a row's extra_info.nemo_gym has no `env`; build the rows with "
            "nemo_gym.integrations.verl.rows"
        )
    raw = spec.get("env_options") or "{}"
    try:
        options = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"a row's extra_info.nemo_gym.env_options is not a JSON object: {raw!r}"
        ) from exc
    if not isinstance(options, dict):
        raise ConfigError(f"a row's extra_info.nemo_gym.env_options is not a JSON object: {raw!r}")
    key = json.dumps([name, options], sort_keys=True)
    env = _ENVIRONMENTS.get(key)
    if env is None:
        from nemo_gym.catalog import make

        env = _ENVIRONMENTS[key] = make(name, **options)
    return env


@register(AGENT_NAME)
class NemoGymAgentLoop(AgentLoopBase):
    """verl agent loop running nemo_gym's harness, verifier and exact token trace.

    Options are keys of its entry in verl's agent loop YAML (verl passes them as keyword
    arguments): `chat_template`, `tool_format` ("hermes"), `timeout` (seconds per
    rollout), `eos_token_ids` (default: the tokenizer's EOS and the model's generation
    config's, which vLLM stops on).
    """

    def __init__(
        self,
        *args: Any,
        chat_template: str | None = None,
        tool_format: str = "hermes",
        timeout: float | None = None,
        eos_token_ids: Iterable[int] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: our environments bring theirs
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.chat_template = chat_template
        self.tool_format = tool_format
        self.timeout = None if timeout is None else float(timeout)
        self.eos_token_ids: tuple[int, ...] = (
            tuple(int(i) for i in eos_token_ids)
            if eos_token_ids is not None
            else _generation_eos_ids(self.config)
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = kwargs.get("extra_info") or {}
        spec = extra.get("nemo_gym") if isinstance(extra, Mapping) else None
        if not spec:
            raise ConfigError(
                "the row carries no extra_info.nemo_gym; build the dataset with "
                "nemo_gym.integrations.verl.rows(env)"
            )
        env = _environment(spec)
        task = Task.model_validate_json(spec["task"])
        policy = ServerPolicy(
            self.server_manager,
            self.tokenizer,
            sampling_params=sampling_params,
            chat_template=self.chat_template,
            tool_format=self.tool_format,
            response_length=self.response_length,
            eos_token_ids=self.eos_token_ids,
        )
        harness = _UntilBudget(default_harness(env))
        done = await rollout(env, policy, task, harness=harness, timeout=self.timeout)
        item = training.sample(done, max_length=None)
        status = "ok"
        response = len(item.token_ids) - item.prompt_length
        if item.trainable and item.prompt_length > self.prompt_length:
            status = (
                f"too long: prompt of {item.prompt_length} tokens > "
                f"prompt_length={self.prompt_length}"
            )
        elif item.trainable and response > self.response_length:
            # A guard: each turn is capped at the budget left, and verl's padding
            # cannot hold more.
            status = f"too long: response of {response} tokens > {self.response_length}"
        elif not item.trainable:
            status = item.excluded or "excluded"
        metrics = AgentLoopMetrics(
            generate_sequences=done.timings.model_s,
            tool_calls=done.timings.tool_s,
            compute_score=done.timings.verify_s,
        )
        fields = {
            "nemo_gym_status": status,
            "nemo_gym_budget_exhausted": _exhausted(done),
            "nemo_gym_masked": status != "ok",
            "nemo_gym_components": dict(item.components),
            "turn_scores": list(item.step_rewards),
            "tool_rewards": [],
        }
        if status == "ok":
            # Each turn was capped at the budget left, so the response fits.
            cut = item.prompt_length
            return AgentLoopOutput(
                prompt_ids=item.token_ids[:cut],
                response_ids=item.token_ids[cut:],
                response_mask=item.loss_mask[cut:],
                response_logprobs=item.logprobs[cut:] if item.logprobs is not None else None,
                reward_score=float(item.reward or 0.0),
                num_turns=len(done.trajectory.messages),
                metrics=metrics,
                extra_fields=fields,
            )
        log.warning("rollout of task %s masked: %s", done.task_id, status)
        # Masked: shapes verl can pad, nothing to train on (cut only because it is unused).
        prompt = self._masked_prompt(done, task, env)
        eos = self.tokenizer.eos_token_id
        return AgentLoopOutput(
            prompt_ids=prompt[-self.prompt_length :],
            response_ids=[eos],
            response_mask=[0],
            response_logprobs=[0.0] if sampling_params.get("logprobs") else None,
            reward_score=0.0,
            num_turns=len(done.trajectory.messages),
            metrics=metrics,
            extra_fields=fields,
        )

    def _masked_prompt(self, done: Any, task: Task, env: Environment) -> list[int]:
        for call in done.trajectory.model_calls:
            if call.response is not None and call.response.prompt_token_ids:
                return list(call.response.prompt_token_ids)
        from nemo_gym.models.chat import ChatTemplate

        harness = default_harness(env)
        template = ChatTemplate(
            self.tokenizer, chat_template=self.chat_template, tool_format=self.tool_format
        )
        messages = opening_messages(task, getattr(harness, "system_prompt", None))
        return template.encode(template.render(messages, (), generation_prompt=True))


def _exhausted(done: Any) -> bool:
    calls = done.trajectory.model_calls
    return bool(calls) and (calls[-1].error or "").startswith(ResponseBudgetExhausted.__name__)


_EOS_CACHE: dict[str, tuple[int, ...]] = {}


def _generation_eos_ids(config: Any) -> tuple[int, ...]:
    """The EOS ids of the model's generation config, read as verl's workers read it."""
    model = config.actor_rollout_ref.model
    path = str(model.get("hf_config_path") or model.path)
    cached = _EOS_CACHE.get(path)
    if cached is not None:
        return cached
    from verl.utils.fs import copy_to_local
    from verl.utils.model import get_generation_config

    local = copy_to_local(path, use_shm=bool(model.get("use_shm", False)))
    generation = get_generation_config(
        local, trust_remote_code=bool(model.get("trust_remote_code", False))
    )
    value = getattr(generation, "eos_token_id", None)
    ids = [value] if isinstance(value, int) else list(value or ())
    _EOS_CACHE[path] = result = tuple(i for i in ids if isinstance(i, int))
    return result
