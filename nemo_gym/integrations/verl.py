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
```

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
from collections.abc import Iterable, Mapping
from typing import Any

from nemo_gym import training
from nemo_gym.errors import ConfigError, MissingDependency, ModelError
from nemo_gym.harnesses import opening_messages
from nemo_gym.models.base import ModelAdapter
from nemo_gym.protocols import Environment, Harness
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

__all__ = ["AGENT_NAME", "NemoGymAgentLoop", "ServerPolicy", "rows"]

AGENT_NAME = "nemo_gym"
"""The name the agent loop is registered under (the rows' `agent_name`)."""


class ServerPolicy(ModelAdapter):
    """verl's rollout server as a nemo_gym `Model`, token-exact across turns.

    `server_manager` is what verl hands an agent loop (`generate(request_id,
    prompt_ids=, sampling_params=)` returning a `TokenOutput`); `sampling_params` are
    verl's for this sample, under which each request's own sampling is merged. One
    `request_id` serves every turn of a rollout (verl routes it to the same server, so
    its prefix cache holds).
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
    ) -> None:
        super().__init__()
        from nemo_gym.models.chat import ChatTemplate
        from nemo_gym.models.tokens import Continuations

        self.server_manager = server_manager
        self.template = ChatTemplate(
            tokenizer, chat_template=chat_template, tool_format=tool_format
        )
        self.continuations = Continuations(self.template, max_conversations=64)
        self.sampling_params = dict(sampling_params or {})
        self.request_id = request_id or uuid.uuid4().hex
        eos = {getattr(tokenizer, "eos_token_id", None)}
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

    async def _generate(self, request: ModelRequest) -> ModelResponse:
        prompt = self.continuations.prompt(request)
        params = self._params(request.sampling)
        try:
            output = await self.server_manager.generate(
                request_id=self.request_id, prompt_ids=prompt.ids, sampling_params=params
            )
        except Exception as exc:
            raise ModelError(f"verl server: {type(exc).__name__}: {exc}", code="verl") from exc
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
        stop = getattr(output, "stop_reason", None)
        return ModelResponse(
            message=message,
            finish_reason="tool_calls" if calls else ("stop" if ended else (stop or "length")),
            usage=Usage(prompt_tokens=len(prompt.ids), completion_tokens=len(ids)),
            model="verl",
            prompt_token_ids=list(prompt.ids),
            completion_token_ids=ids,
            completion_logprobs=logprobs,
            sampling=Sampling(
                **{k: params.get(k) for k in ("temperature", "top_p", "max_tokens", "seed")}
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
    `gym.make`, default `env.name`) and `env_options`.
    """
    harness = harness or default_harness(env)
    items = list(env.tasks(split=split, limit=limit) if tasks is None else tasks)
    name = env_name or env.name
    options = dict(env_options or {})
    json.dumps(options)  # the options travel in the dataset: they must be JSON
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
    options = dict(spec.get("env_options") or {})
    key = json.dumps([name, options], sort_keys=True)
    env = _ENVIRONMENTS.get(key)
    if env is None:
        from nemo_gym.catalog import make

        env = _ENVIRONMENTS[key] = make(name, **options)
    return env


@register(AGENT_NAME)
class NemoGymAgentLoop(AgentLoopBase):
    """verl agent loop running nemo_gym's harness, verifier and exact token trace.

    Reads `nemo_gym` options from `actor_rollout_ref.rollout.agent` when present:
    `chat_template`, `tool_format` ("hermes"), `timeout` (seconds per rollout).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's own tool list: our environments bring theirs
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        agent = self.rollout_config.get("agent", {}) or {}
        options = dict(agent.get("nemo_gym", {}) or {})
        self.chat_template: str | None = options.get("chat_template")
        self.tool_format: str = options.get("tool_format", "hermes")
        self.timeout: float | None = options.get("timeout")

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
        )
        done = await rollout(env, policy, task, harness=default_harness(env), timeout=self.timeout)
        item = training.sample(done, max_length=None)
        status = "ok"
        if item.trainable and item.prompt_length > self.prompt_length:
            status = (
                f"too long: prompt of {item.prompt_length} tokens > "
                f"prompt_length={self.prompt_length}"
            )
        elif item.trainable and len(item.token_ids) - item.prompt_length > self.response_length:
            status = (
                f"too long: response of {len(item.token_ids) - item.prompt_length} tokens > "
                f"response_length={self.response_length}"
            )
        elif not item.trainable:
            status = item.excluded or "excluded"
        metrics = AgentLoopMetrics(
            generate_sequences=done.timings.model_s,
            tool_calls=done.timings.tool_s,
            compute_score=done.timings.verify_s,
        )
        fields = {
            "nemo_gym_status": status,
            "nemo_gym_masked": status != "ok",
            "nemo_gym_components": dict(item.components),
            "turn_scores": list(item.step_rewards),
            "tool_rewards": [],
        }
        if status == "ok":
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
