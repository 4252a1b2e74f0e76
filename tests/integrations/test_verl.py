"""The verl agent loop, against verl 0.9.1's own classes.

verl pins transformers < 5.11 and pulls ray and a GPU stack, so it is installed without
its dependencies in a venv of its own layered over the project's (scripts/test-verl.sh);
in the main venv these tests skip. The rollout server is a fake with verl's
`generate(request_id, prompt_ids=, sampling_params=) -> TokenOutput` shape that replies
from a script; the tokenizer is SmolLM2's (from the embedded GGUF).
"""

from __future__ import annotations

import asyncio
import json

import pytest

import nemo_gym as gym

pytest.importorskip("verl", reason="verl is tested in its own venv: bash scripts/test-verl.sh")
pytest.importorskip("nemo_gym.models.chat", reason="needs the shared chat-template module")

import hydra
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from nemo_gym.integrations import verl as gym_verl


class FakeServer:
    """Replies from `script(request_id, turn)`; keeps every prompt it was sent."""

    def __init__(self, tokenizer, script):
        self.tokenizer = tokenizer
        self.script = script
        self.prompts: dict[str, list[list[int]]] = {}
        self.replies: dict[str, list[list[int]]] = {}
        self.params: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        turns = self.prompts.setdefault(request_id, [])
        turns.append(list(prompt_ids))
        self.params.append(dict(sampling_params))
        text = self.script(request_id, len(turns) - 1)
        ids = [
            *self.tokenizer(text, add_special_tokens=False)["input_ids"],
            self.tokenizer.eos_token_id,
        ]
        self.replies.setdefault(request_id, []).append(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


def config(prompt_length=2048, response_length=2048):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "agent": {},
                }
            },
            "data": {},
        }
    )


def agent_loop(server, tokenizer, cfg=None):
    """Built the way verl's AgentLoopWorker builds one: hydra over the registry entry."""
    cfg = cfg or config()
    return hydra.utils.instantiate(
        config=_agent_loop_registry[gym_verl.AGENT_NAME],
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )


def call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def bank_script(task: gym.Task) -> list[str]:
    start, final = task.metadata["initial_balances"], task.answer
    replies = [call("get_balance", account="checking")]
    for account in ("checking", "savings", "travel"):
        delta = final[account] - start[account]
        if delta:
            replies.append(
                call("deposit" if delta > 0 else "withdraw", account=account, amount=abs(delta))
            )
    return [*replies, "Done."]


def run(loop, row, sampling=None):
    kwargs = {k: v for k, v in row.items() if k != "agent_name"}
    kwargs["raw_prompt"] = row["prompt"]
    return asyncio.run(
        loop.run(sampling or {"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **kwargs)
    )


def test_registered_under_its_name() -> None:
    assert _agent_loop_registry["nemo_gym"] == {
        "_target_": "nemo_gym.integrations.verl.NemoGymAgentLoop"
    }


def test_a_multi_turn_tool_rollout_comes_back_token_exact(smollm2_tokenizer) -> None:
    env = gym.make("bank")
    (row,) = gym_verl.rows(env, split="train", limit=1)
    task = gym.Task.model_validate_json(row["extra_info"]["nemo_gym"]["task"])
    replies = bank_script(task)
    server = FakeServer(smollm2_tokenizer, lambda request_id, turn: replies[turn])
    output = run(agent_loop(server, smollm2_tokenizer), row)
    assert isinstance(output, AgentLoopOutput)
    assert output.reward_score == 1.0
    assert output.extra_fields["nemo_gym_status"] == "ok"
    ((request_id, prompts),) = server.prompts.items()
    generated = server.replies[request_id]
    assert len(prompts) == len(replies) >= 3
    # Each turn's prompt extends the previous prompt + generation exactly.
    for k in range(1, len(prompts)):
        before = prompts[k - 1] + generated[k - 1]
        assert prompts[k][: len(before)] == before
    # The output is the first prompt, then everything after it, masked to the generations.
    assert output.prompt_ids == prompts[0]
    assert output.prompt_ids + output.response_ids == prompts[-1] + generated[-1]
    ones = [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m]
    assert ones == [t for g in generated for t in g]
    assert len(output.response_logprobs) == len(output.response_ids)
    assert output.num_turns == len(replies) * 2 - 1 + 2  # system, user, then the turns
    # verl turns it into its tensors without complaint.
    tensors = output.as_dict()
    assert (
        tensors["rm_scores"][-1] == 1.0
        and tensors["responses"].shape == tensors["response_mask"].shape
    )


def test_sampling_params_reach_the_server_and_validation_is_greedy(smollm2_tokenizer) -> None:
    env = gym.make("arithmetic")
    (row,) = gym_verl.rows(env, split="train", limit=1)
    task = gym.Task.model_validate_json(row["extra_info"]["nemo_gym"]["task"])
    server = FakeServer(smollm2_tokenizer, lambda rid, turn: f"\\boxed{{{task.answer}}}")
    output = run(
        agent_loop(server, smollm2_tokenizer), row, {"temperature": 0, "top_p": 1.0, "top_k": -1}
    )
    assert output.reward_score == 1.0 and sum(output.response_mask) == len(output.response_ids)
    assert server.params[0]["temperature"] == 0 and server.params[0]["top_k"] == -1


def test_failed_and_too_long_rollouts_are_masked(smollm2_tokenizer) -> None:
    env = gym.make("bank")
    (row,) = gym_verl.rows(env, split="train", limit=1)

    def broken(request_id, turn):
        raise RuntimeError("server gone")

    output = run(agent_loop(FakeServer(smollm2_tokenizer, broken), smollm2_tokenizer), row)
    assert output.extra_fields["nemo_gym_masked"] is True
    assert output.extra_fields["nemo_gym_status"].startswith("failed: model")
    assert output.response_mask == [0] and output.reward_score == 0.0

    task = gym.Task.model_validate_json(row["extra_info"]["nemo_gym"]["task"])
    replies = bank_script(task)
    server = FakeServer(smollm2_tokenizer, lambda rid, turn: replies[turn])
    short = agent_loop(server, smollm2_tokenizer, config(response_length=16))
    output = run(short, row)
    assert output.extra_fields["nemo_gym_status"].startswith("too long: response")
    assert sum(output.response_mask) == 0


def test_rows_say_how_to_rebuild_the_environment() -> None:
    env = gym.make("guess_number", high=7)
    rows = gym_verl.rows(env, split="train", limit=2, env_options={"high": 7})
    assert [r["agent_name"] for r in rows] == ["nemo_gym", "nemo_gym"]
    spec = rows[0]["extra_info"]["nemo_gym"]
    assert gym_verl._environment(spec).high == 7
    with pytest.raises(TypeError):
        gym_verl.rows(env, env_options={"bad": object()})
