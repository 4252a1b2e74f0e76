"""NeMo RL: a nemo_gym environment as a NeMo RL `EnvironmentInterface`.

NeMo RL generates every model turn itself and calls the environment's
`step(message_log_batch, metadata)` after each one. Here each sample's rollout is our
runner's `gym.rollout` with the environment's own harness (single turn, tool loop,
multi-step or your own), played against a stand-in model: when the harness asks for a
model turn, `step` hands NeMo RL the text to append (the tool results or feedback,
written exactly as the chat template continues the conversation, generation prompt
included) and ends; the next `step` for that sample delivers NeMo RL's generation as
the reply. When the harness ends, the verifier scores the trajectory and the sample
terminates with that reward. Per-turn rewards are 0; the episode's reward comes on its
last turn (NeMo RL sums them).

```python
env_cfg = {"env": "bank", "tokenizer": "HuggingFaceTB/SmolLM2-135M-Instruct"}
nemo_env = ray.remote(NemoGymEnvironment).remote(env_cfg)      # as NeMo RL does
dataset rows: nemo_gym.integrations.nemo_rl.datum(env, task, tokenizer, idx)
```

NeMo RL's interface has no way for an environment to mask a sample: a failed rollout
gets reward 0.0 in the tensor, is counted in `nemo_gym/failed`, and
`global_post_process_and_metrics(batch)` sets its `loss_multiplier` to 0 (call it on
the batch before training; NeMo RL's GRPO loop does not). It finds the row by its
conversation and reward 0, and masks one row per failure (identical rows are
interchangeable), so a success with the same text is never masked. NeMo RL is not installed
here (PyPI's `nemo-rl` is a 0.0.0 placeholder), so the tests run against a faithful
copy of its interface; see docs/trainers.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from nemo_gym.errors import ConfigError, HarnessError, require
from nemo_gym.harnesses import opening_messages
from nemo_gym.integrations.bridge import LoopThread
from nemo_gym.lifecycle import close_all
from nemo_gym.protocols import Environment, Harness
from nemo_gym.records import Message, ModelRequest, ModelResponse, Rollout, Task, ToolSpec
from nemo_gym.runner import default_harness, rollout

log = logging.getLogger(__name__)

__all__ = ["EnvironmentReturn", "NemoGymEnvironment", "data_processor", "datum"]


_MAX_UNMASKED = 65536
"""Failed conversations kept for masking (a batch never post-processed leaves some)."""


class _EnvironmentReturn(NamedTuple):
    """NeMo RL's `EnvironmentReturn`, field for field (used when nemo_rl is absent)."""

    observations: list[dict[str, str]]
    metadata: list[Any]
    next_stop_strings: list[list[str] | None] | list[None]
    rewards: Any  # Tensor[B]
    terminateds: Any  # Tensor[B] of bool
    answers: list[str | None] | None


def _nemo_rl_types() -> tuple[Any, Any]:
    """NeMo RL's (EnvironmentInterface, EnvironmentReturn), or (None, our copy)."""
    try:
        from nemo_rl.environments.interfaces import (
            EnvironmentInterface,
            EnvironmentReturn,
        )
    except ImportError:
        return None, _EnvironmentReturn
    return EnvironmentInterface, EnvironmentReturn


EnvironmentReturn = _nemo_rl_types()[1]


def _template(tokenizer: Any, chat_template: str | None, tool_format: str) -> Any:
    from nemo_gym.models.chat import ChatTemplate

    return ChatTemplate(tokenizer, chat_template=chat_template, tool_format=tool_format)


def _load_tokenizer(name: str) -> Any:
    transformers = require("transformers", "local")
    return transformers.AutoTokenizer.from_pretrained(name)


def _probe_tools(env: Environment, task: Task, loop: LoopThread) -> list[ToolSpec]:
    async def probe() -> list[ToolSpec]:
        episode = await env.open(task)
        async with episode:
            return [t.spec for t in episode.tools]

    return loop.run(probe())


def datum(
    env: Environment,
    task: Task,
    tokenizer: Any,
    idx: int,
    *,
    harness: Harness | None = None,
    tools: Sequence[ToolSpec] | None = None,
    chat_template: str | None = None,
    tool_format: str = "hermes",
    max_seq_length: int | None = None,
    task_name: str | None = None,
    loop: LoopThread | None = None,
) -> dict[str, Any]:
    """A NeMo RL `DatumSpec` for `task`: the prompt our harness would send, tokenized.

    The prompt is one message holding the chat template's text of the opening messages
    (the harness's system prompt and the tools included) with the generation prompt,
    and its `token_ids`; `extra_env_info` carries the task. `tools` defaults to those
    of an episode of `task` (opened and closed here). A prompt of `max_seq_length`
    tokens or more is handled as NeMo RL's own processors handle one: its `token_ids`
    cut to `min(4, max_seq_length)`, `loss_multiplier` 0, `length` the full length; the
    environment ends such a sample at its first step (reward 0, no rollout).
    """
    torch = require("torch", "nemo-rl")
    harness = harness or default_harness(env)
    if tools is None:
        from nemo_gym.integrations.bridge import shared_loop

        tools = _probe_tools(env, task, loop or shared_loop())
    template = _template(tokenizer, chat_template, tool_format)
    messages = opening_messages(task, getattr(harness, "system_prompt", None))
    text = template.render(messages, tools, generation_prompt=True)
    ids = template.encode(text)
    length = len(ids)
    info: dict[str, Any] = {"task": task.model_dump_json()}
    too_long = max_seq_length is not None and length >= max_seq_length
    if too_long:
        assert max_seq_length is not None
        # As nemo_rl/data/processors.py: "make smaller and mask out".
        ids = ids[: min(4, max_seq_length)]
        info["prompt_too_long"] = True
    return {
        "message_log": [
            {"role": "user", "content": text, "token_ids": torch.tensor(ids, dtype=torch.long)}
        ],
        "length": length,
        "extra_env_info": info,
        "loss_multiplier": 0.0 if too_long else 1.0,
        "idx": idx,
        "task_name": task_name or env.name,
    }


def data_processor(
    env: Environment,
    *,
    harness: Harness | None = None,
    chat_template: str | None = None,
    tool_format: str = "hermes",
    task_name: str | None = None,
) -> Any:
    """A NeMo RL `TaskDataProcessFnCallable` over rows holding a `task` (JSON or `Task`).

    The tools are read once, from an episode of the first row's task.
    """
    tools: list[ToolSpec] | None = None

    def process(
        datum_dict: dict[str, Any],
        task_data_spec: Any,
        tokenizer: Any,
        max_seq_length: int | None,
        idx: int,
    ) -> dict[str, Any]:
        nonlocal tools
        raw = datum_dict.get("task")
        if raw is None:
            raise ConfigError(f"row {idx}: no `task` field (a nemo_gym Task, or its JSON)")
        task = raw if isinstance(raw, Task) else Task.model_validate_json(raw)
        if tools is None:
            from nemo_gym.integrations.bridge import shared_loop

            tools = _probe_tools(env, task, shared_loop())
        return datum(
            env,
            task,
            tokenizer,
            idx,
            harness=harness,
            tools=tools,
            chat_template=chat_template,
            tool_format=tool_format,
            max_seq_length=max_seq_length,
            task_name=task_name,
        )

    return process


# ---------------------------------------------------------------------------------------
# Sessions: one rollout each, paused while NeMo RL generates


class _Turns:
    """The model a session's harness talks to: each call waits for NeMo RL's generation."""

    def __init__(self, template: Any) -> None:
        self.template = template
        self.asked: asyncio.Future[ModelRequest] = asyncio.get_running_loop().create_future()
        self._reply: asyncio.Future[tuple[str, bool]] | None = None
        self.last: tuple[ModelRequest, Message] | None = None
        self.last_cut = False  # the last reply hit max_new_tokens (no EOS closes it)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        loop = asyncio.get_running_loop()
        self._reply = loop.create_future()
        if not self.asked.done():
            self.asked.set_result(request)
        text, cut = await self._reply
        content: str | None = text
        calls: tuple[Any, ...] = ()
        if request.tools:
            content, calls = self.template.parse(text)
        message = Message.assistant(content, tool_calls=calls)
        self.last = (request, message)
        self.last_cut = cut
        finish = "tool_calls" if calls else ("length" if cut else "stop")
        return ModelResponse(message=message, finish_reason=finish, model="nemo_rl")

    def answer(self, text: str, *, cut: bool = False) -> None:
        """Deliver NeMo RL's generation (`cut`: it hit max_new_tokens) to the harness."""
        if self._reply is None or self._reply.done():
            raise HarnessError("a generation arrived for a session that asked for none")
        self.asked = asyncio.get_running_loop().create_future()
        self._reply.set_result((text, cut))


class _Turn(NamedTuple):
    """One sample's part of a step's return."""

    observation: dict[str, str]
    metadata: Any
    reward: float
    terminated: bool
    answer: str | None


@dataclass
class _Session:
    turns: _Turns
    job: asyncio.Task[Rollout]
    touched: float = field(default_factory=time.monotonic)


def _fingerprint(message_log: Sequence[Mapping[str, Any]]) -> str:
    """Identifies a sample by its conversation up to its last assistant message."""
    pairs = [(str(m.get("role")), str(m.get("content"))) for m in message_log]
    while pairs and pairs[-1][0] != "assistant":
        pairs.pop()
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()


class NemoGymEnvironment:
    """A NeMo RL environment over a nemo_gym environment (see the module docstring).

    `cfg` is what NeMo RL hands an environment actor: `env` (a name for `gym.make`),
    `env_options`, `tokenizer` (a name or path; the policy's), and optionally
    `chat_template`, `tool_format` ("hermes"), `timeout` (seconds per rollout) and
    `session_ttl` (seconds a paused rollout may wait for its next turn before it is
    cancelled and its episode closed: NeMo RL stops samples at its turn or length
    limits without telling the environment), `max_new_tokens` (the policy's
    `generation.max_new_tokens`: a reply that long hit the limit, and its turn is closed
    by the observation, which then starts with the EOS the model never generated; NeMo
    RL hands an environment only the decoded text, so without it every turn is taken
    to have ended on EOS, and a warning says so). Objects may be given directly instead.
    """

    def __init__(
        self,
        cfg: Mapping[str, Any] | None = None,
        *,
        env: Environment | None = None,
        tokenizer: Any = None,
        harness: Harness | None = None,
        loop: LoopThread | None = None,
    ) -> None:
        cfg = dict(cfg or {})
        torch = require("torch", "nemo-rl")
        self._torch = torch
        if env is None:
            name = cfg.get("env")
            if not name:
                raise ConfigError(
                    "NemoGymEnvironment: cfg['env'] (an environment name) is required"
                )
            from nemo_gym.catalog import make

            env = make(name, **dict(cfg.get("env_options") or {}))
        if tokenizer is None:
            name = cfg.get("tokenizer")
            if not name:
                raise ConfigError("NemoGymEnvironment: cfg['tokenizer'] (the policy's) is required")
            tokenizer = _load_tokenizer(str(name))
        self.env = env
        self.harness = harness or default_harness(env)
        self.tokenizer = tokenizer
        self.template = _template(
            tokenizer, cfg.get("chat_template"), str(cfg.get("tool_format", "hermes"))
        )
        self.timeout: float | None = cfg.get("timeout")
        self.session_ttl = float(cfg.get("session_ttl", 900.0))
        max_new_tokens = cfg.get("max_new_tokens")
        self.max_new_tokens: int | None = None if max_new_tokens is None else int(max_new_tokens)
        if self.max_new_tokens is None:
            log.warning(
                "NemoGymEnvironment: no cfg['max_new_tokens']; a turn cut at the policy's "
                "max_new_tokens cannot be told from one that ended on EOS, and is "
                "continued as if closed (give the policy's generation.max_new_tokens)"
            )
        self.loop = loop or LoopThread(f"nemo_gym-nemo_rl-{env.name}")
        self._sessions: dict[str, _Session] = {}
        # Failed samples not yet masked, by conversation: a multiset (GRPO groups hold
        # identical conversations), each entry consumed by the row it masks.
        self._failed: OrderedDict[str, int] = OrderedDict()
        self._counts = {
            "terminated": 0,
            "failed": 0,
            "turns": 0,
            "reaped": 0,
            "cut_turns": 0,
            "prompt_too_long": 0,
        }

    # -- the interface --------------------------------------------------------------

    def step(self, message_log_batch: list[list[dict[str, Any]]], metadata: list[Any]) -> Any:
        """One turn for each sample: its tool results / feedback, or its reward."""
        if len(message_log_batch) != len(metadata):
            raise ConfigError(
                f"step: {len(message_log_batch)} message logs but {len(metadata)} metadata"
            )
        results = self.loop.run(self._step_all(message_log_batch, metadata))
        return EnvironmentReturn(
            observations=[r.observation for r in results],
            metadata=[r.metadata for r in results],
            next_stop_strings=[None] * len(results),
            rewards=self._torch.tensor([r.reward for r in results], dtype=self._torch.float32),
            terminateds=self._torch.tensor([r.terminated for r in results], dtype=self._torch.bool),
            answers=[r.answer for r in results],
        )

    def global_post_process_and_metrics(self, batch: Any) -> tuple[Any, dict[str, float]]:
        """Mask the batch's failed samples (`loss_multiplier` 0) and report counts."""
        masked = 0
        logs = batch["message_log"] if "message_log" in batch else []
        rewards = next((batch[k] for k in ("total_reward", "rewards") if k in batch), None)
        if self._failed and len(logs):
            multiplier = batch["loss_multiplier"]
            for row, log_ in enumerate(logs):
                if rewards is not None and float(rewards[row]) != 0.0:
                    continue  # a failure's reward is 0: this row succeeded
                fingerprint = _fingerprint(log_)
                left = self._failed.get(fingerprint, 0)
                if left and float(multiplier[row]) != 0.0:
                    multiplier[row] = 0
                    masked += 1
                    if left == 1:
                        del self._failed[fingerprint]
                    else:
                        self._failed[fingerprint] = left - 1
            batch["loss_multiplier"] = multiplier
        done = max(1, self._counts["terminated"])
        metrics = {
            "nemo_gym/terminated": float(self._counts["terminated"]),
            "nemo_gym/failed": float(self._counts["failed"]),
            "nemo_gym/failed_fraction": self._counts["failed"] / done,
            "nemo_gym/masked_in_batch": float(masked),
            "nemo_gym/turns_per_rollout": self._counts["turns"] / done,
            "nemo_gym/open_rollouts": float(len(self._sessions)),
            "nemo_gym/reaped": float(self._counts["reaped"]),
            "nemo_gym/cut_turns": float(self._counts["cut_turns"]),
            "nemo_gym/prompt_too_long": float(self._counts["prompt_too_long"]),
            "nemo_gym/failed_unmasked": float(sum(self._failed.values())),
        }
        return batch, metrics

    def shutdown(self) -> None:
        """Cancel every paused rollout (closing its episode), close the environment, its
        verifier and the harness, and stop the loop."""
        if self._sessions:
            self.loop.run(self._cancel(list(self._sessions)))
        self.loop.run(close_all(self.env, self.env.verifier, self.harness))
        self.loop.close()

    # -- on the loop ------------------------------------------------------------------

    async def _step_all(self, logs: list[list[dict[str, Any]]], metadata: list[Any]) -> list[_Turn]:
        await self._reap()
        return list(
            await asyncio.gather(
                *(self._step_one(log_, meta) for log_, meta in zip(logs, metadata, strict=True))
            )
        )

    async def _step_one(self, message_log: list[dict[str, Any]], meta: Any) -> _Turn:
        if not isinstance(meta, Mapping) or "task" not in meta:
            raise ConfigError(
                "step: a sample's metadata has no `task`; build the dataset with "
                "nemo_gym.integrations.nemo_rl.datum / data_processor"
            )
        if not message_log or message_log[-1].get("role") != "assistant":
            raise ConfigError("step: a message log must end with the model's (assistant) turn")
        if meta.get("prompt_too_long"):
            # Its prompt was cut to a stub (as NeMo RL's processors do) and its loss is
            # masked: nothing to roll out.
            self._counts["prompt_too_long"] += 1
            return _Turn({"role": "environment", "content": ""}, None, 0.0, True, None)
        text = str(message_log[-1].get("content") or "")
        eos = getattr(self.tokenizer, "eos_token", None)
        if eos and text.endswith(eos):
            text = text[: -len(eos)]
        cut = self._cut(text)
        key = meta.get("session")
        session = self._sessions.get(key) if key else None
        if key and session is None:
            raise HarnessError(
                f"step: session {key} is unknown (finished, reaped or another actor's)"
            )
        if session is None:
            key = uuid.uuid4().hex
            task = Task.model_validate_json(meta["task"])
            turns = _Turns(self.template)
            job = asyncio.create_task(
                rollout(self.env, turns, task, harness=self.harness, timeout=self.timeout)
            )
            session = self._sessions[key] = _Session(turns, job)
            await self._next(session)  # the harness's first request, answered below
        session.touched = time.monotonic()
        turns = session.turns
        if turns.asked.done():
            turns.answer(text, cut=cut)
            self._counts["turns"] += 1
            self._counts["cut_turns"] += cut
        asked = await self._next(session)
        if asked is not None:
            observation = self._continuation(turns, asked)
            return _Turn(observation, {**meta, "session": key}, 0.0, False, None)
        assert key is not None
        del self._sessions[key]
        return self._finished(session.job.result(), message_log)

    def _cut(self, text: str) -> bool:
        """Whether NeMo RL's generation of `text` hit max_new_tokens (so has no EOS).

        NeMo RL decodes the generated ids without special tokens, so a reply that ended
        on EOS re-encodes to fewer than max_new_tokens ids (the EOS was one of them).
        """
        if self.max_new_tokens is None:
            return False
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return len(ids) >= self.max_new_tokens

    async def _next(self, session: _Session) -> ModelRequest | None:
        """Wait until the harness asks for another turn (its request) or ends (None)."""
        asked = session.turns.asked
        waited: set[asyncio.Future[Any]] = {asked, session.job}
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        return asked.result() if asked.done() else None

    def _continuation(self, turns: _Turns, asked: ModelRequest) -> dict[str, str]:
        """The text that continues the conversation from the last reply to `asked`."""
        assert turns.last is not None
        request, reply = turns.last
        before = [*request.messages, reply]
        after = list(asked.messages)
        if after[: len(before)] != before or request.tools != asked.tools:
            raise HarnessError(
                "the harness changed the conversation between turns; cannot continue it"
            )
        template = self.template
        prefix = template.render(before, asked.tools, generation_prompt=False)
        full = template.render(after, asked.tools, generation_prompt=True)
        if not full.startswith(prefix):
            raise HarnessError(
                "the chat template rewrites earlier turns; NeMo RL's tokens would not match"
            )
        # A generation that ended on EOS holds the EOS that closes the turn: the rest of
        # the template's closing text, the new messages and the generation prompt
        # follow. One cut at max_new_tokens has none: the observation closes the turn.
        glue = template.after_assistant(before, asked.tools)
        eos = getattr(self.tokenizer, "eos_token", None)
        if eos and glue.startswith(eos) and not turns.last_cut:
            glue = glue[len(eos) :]
        added = after[len(before) :]
        role = "tool" if added and all(m.role == "tool" for m in added) else "user"
        return {"role": role, "content": glue + full[len(prefix) :]}

    def _finished(self, done: Rollout, message_log: list[dict[str, Any]]) -> _Turn:
        self._counts["terminated"] += 1
        observation = {"role": "environment", "content": ""}
        if done.ok and done.rewards is not None:
            extracted = done.rewards.metadata.get("extracted_answer")
            answer = None if extracted is None else str(extracted)
            return _Turn(observation, None, done.rewards.reward, True, answer)
        self._counts["failed"] += 1
        failure = done.failure
        reason = f"{failure.kind}/{failure.code}: {failure.message}" if failure else "failed"
        fingerprint = _fingerprint(message_log)
        self._failed[fingerprint] = self._failed.pop(fingerprint, 0) + 1
        while len(self._failed) > _MAX_UNMASKED:  # never post-processed: drop the oldest
            self._failed.popitem(last=False)
        log.warning("rollout of task %s failed (reward 0, to be masked): %s", done.task_id, reason)
        return _Turn(observation, None, 0.0, True, None)

    async def _reap(self) -> None:
        now = time.monotonic()
        stale = [k for k, s in self._sessions.items() if now - s.touched > self.session_ttl]
        if stale:
            self._counts["reaped"] += len(stale)
            log.warning("cancelling %d rollouts NeMo RL stopped stepping", len(stale))
            await self._cancel(stale)

    async def _cancel(self, keys: list[str]) -> None:
        sessions = [self._sessions.pop(k) for k in keys if k in self._sessions]
        for session in sessions:
            session.job.cancel()
        await asyncio.gather(*(s.job for s in sessions), return_exceptions=True)


def _register() -> None:
    interface, _ = _nemo_rl_types()
    if interface is not None:
        interface.register(NemoGymEnvironment)


_register()
