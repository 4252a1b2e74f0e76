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
from pathlib import Path

import pytest

import nemo_gym as gym

pytest.importorskip("verl", reason="verl is tested in its own venv: bash scripts/test-verl.sh")
pytest.importorskip("nemo_gym.models.chat", reason="needs the shared chat-template module")

import hydra
import pandas as pd
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopOutput,
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.protocol import DataProto
from verl.utils import omega_conf_to_dataclass
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

from nemo_gym.integrations import verl as gym_verl


class FakeServer:
    """Replies from `script(request_id, turn)`; keeps every prompt it was sent.

    As verl's vLLM server: a reply ends with `eos` (the tokenizer's EOS unless given)
    unless `max_tokens` cuts it first, and `stop_reason` is "completed" either way.
    """

    def __init__(self, tokenizer, script, eos=None):
        self.tokenizer = tokenizer
        self.script = script
        self.eos = tokenizer.eos_token_id if eos is None else eos
        self.prompts: dict[str, list[list[int]]] = {}
        self.replies: dict[str, list[list[int]]] = {}
        self.params: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        turns = self.prompts.setdefault(request_id, [])
        turns.append(list(prompt_ids))
        self.params.append(dict(sampling_params))
        text = self.script(request_id, len(turns) - 1)
        ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.eos]
        if sampling_params.get("max_tokens") is not None:
            ids = ids[: sampling_params["max_tokens"]]
        self.replies.setdefault(request_id, []).append(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed")


def checkpoint() -> str:
    from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path

    return str(converted_checkpoint(embedded_gguf_path())[0])


def config(prompt_length=2048, response_length=2048, model_path=None):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "model": {"path": model_path or checkpoint()},
                "rollout": {
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "agent": {},
                },
            },
            "data": {},
        }
    )


def verl_config(tmp_path: Path, entry: str, rows: list[dict], **lengths: int):
    """verl 0.9.1's own trainer config, composed by hydra as its entry point does, with
    our agent loop's YAML entry and `rows` as the training parquet."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "agents.yaml").write_text(
        "- name: nemo_gym\n  _target_: nemo_gym.integrations.verl.NemoGymAgentLoop\n" + entry
    )
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    overrides = [
        f"actor_rollout_ref.model.path={checkpoint()}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.prompt_length={lengths.get('prompt_length', 1024)}",
        f"actor_rollout_ref.rollout.response_length={lengths.get('response_length', 1024)}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'agents.yaml'}",
        f"data.train_files={tmp_path / 'train.parquet'}",
    ]
    with initialize_config_dir(
        config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None
    ):
        return compose("ppo_trainer", overrides=overrides)


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


def test_a_failed_rollout_is_masked(smollm2_tokenizer) -> None:
    env = gym.make("bank")
    (row,) = gym_verl.rows(env, split="train", limit=1)

    def broken(request_id, turn):
        raise RuntimeError("server gone")

    output = run(agent_loop(FakeServer(smollm2_tokenizer, broken), smollm2_tokenizer), row)
    assert output.extra_fields["nemo_gym_masked"] is True
    assert output.extra_fields["nemo_gym_status"].startswith("failed: model")
    assert output.response_mask == [0] and output.reward_score == 0.0


def test_each_turn_gets_the_budget_left_and_an_exhausted_rollout_is_kept(
    smollm2_tokenizer,
) -> None:
    env = gym.make("bank")
    (row,) = gym_verl.rows(env, split="train", limit=1)
    task = gym.Task.model_validate_json(row["extra_info"]["nemo_gym"]["task"])
    replies = bank_script(task)
    server = FakeServer(smollm2_tokenizer, lambda rid, turn: replies[turn])
    budget = 100  # room for the first two turns, not for their tool results and a third
    output = run(agent_loop(server, smollm2_tokenizer, config(response_length=budget)), row)
    # As verl's tool agent: the sample is kept (not masked), its response cut at the budget.
    assert output.extra_fields["nemo_gym_status"] == "ok"
    assert output.extra_fields["nemo_gym_masked"] is False
    assert output.extra_fields["nemo_gym_budget_exhausted"] is True
    assert len(output.response_ids) == len(output.response_mask) <= budget
    assert sum(output.response_mask) > 0
    ((_, prompts),) = server.prompts.items()
    first = len(prompts[0])
    # Each turn's max_tokens is what the response has left, never the whole budget again.
    asked = [p["max_tokens"] for p in server.params]
    assert asked == [budget - (len(p) - first) for p in prompts]
    assert len(asked) < len(replies) and all(0 < a <= budget for a in asked)
    assert asked[0] == budget and asked[-1] < budget


def test_a_reply_cut_at_the_budget_is_length_and_any_eos_id_ends_a_turn(
    smollm2_tokenizer,
) -> None:
    request = gym.ModelRequest(messages=(gym.Message.user("Say hi."),))
    server = FakeServer(smollm2_tokenizer, lambda rid, turn: "Hello there, how are you today?")
    cut = asyncio.run(
        gym_verl.ServerPolicy(server, smollm2_tokenizer, response_length=4).generate(request)
    )
    assert len(cut.completion_token_ids) == 4 and cut.finish_reason == "length"
    whole = asyncio.run(
        gym_verl.ServerPolicy(server, smollm2_tokenizer, response_length=64).generate(request)
    )
    assert whole.finish_reason == "stop"
    # vLLM stops on every EOS id of the generation config, not only the tokenizer's.
    other = smollm2_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert other != smollm2_tokenizer.eos_token_id
    server = FakeServer(smollm2_tokenizer, lambda rid, turn: "Hi.", eos=other)
    policy = gym_verl.ServerPolicy(server, smollm2_tokenizer, eos_token_ids=[other])
    reply = asyncio.run(policy.generate(request))
    assert reply.finish_reason == "stop" and reply.message.content == "Hi."


def test_the_agent_loop_reads_the_eos_ids_of_the_models_generation_config(
    tmp_path, smollm2_tokenizer
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    for file in Path(checkpoint()).iterdir():
        if file.name != "generation_config.json":
            (model / file.name).symlink_to(file)
    other = smollm2_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    eos = [smollm2_tokenizer.eos_token_id, other]
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    loop = agent_loop(
        FakeServer(smollm2_tokenizer, None), smollm2_tokenizer, config(model_path=str(model))
    )
    assert set(loop.eos_token_ids) == set(eos)


def test_verls_config_composition_dataset_and_worker_run_the_agent_loop(
    tmp_path, smollm2_tokenizer
) -> None:
    env = gym.make("guess_number", high=7)
    rows = gym_verl.rows(env, split="train", limit=2, env_options={"high": 7})
    # Options are keys of the agent loop's YAML entry: verl passes them to the constructor.
    cfg = verl_config(tmp_path, "  timeout: 123\n  tool_format: hermes\n", rows)
    # Where the docs used to put them, verl's own config conversion rejects the key.
    bad = cfg.actor_rollout_ref.rollout.copy()
    with open_dict(bad):
        bad.agent.nemo_gym = {"timeout": 123}
    with pytest.raises(Exception, match="nemo_gym"):
        omega_conf_to_dataclass(bad)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)

    dataset = RLHFDataset(str(tmp_path / "train.parquet"), smollm2_tokenizer, cfg.data)
    assert len(dataset) == 2
    spec = dataset[0]["extra_info"]["nemo_gym"]
    assert gym_verl._environment(spec).high == 7  # the options came through Parquet
    batch = DataProto.from_single_dict(collate_fn([dataset[0], dataset[1]]))

    def script(request_id, turn):
        return str(turn + 1)  # guesses 1, 2, 3, ...

    server = FakeServer(smollm2_tokenizer, script)
    worker = AgentLoopWorker(cfg, llm_client=server)
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry["nemo_gym"],
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=server,
        tokenizer=smollm2_tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )
    assert loop.timeout == 123.0
    out = asyncio.run(worker.generate_sequences(batch))
    assert out.non_tensor_batch["nemo_gym_status"].tolist() == ["ok", "ok"]
    assert out.batch["rm_scores"].sum(dim=-1).tolist() == [1.0, 1.0]
    assert out.batch["responses"].shape[1] == 1024


def test_rows_say_how_to_rebuild_the_environment() -> None:
    env = gym.make("guess_number", high=7)
    rows = gym_verl.rows(env, split="train", limit=2, env_options={"high": 7})
    assert [r["agent_name"] for r in rows] == ["nemo_gym", "nemo_gym"]
    spec = rows[0]["extra_info"]["nemo_gym"]
    assert gym_verl._environment(spec).high == 7
    with pytest.raises(TypeError):
        gym_verl.rows(env, env_options={"bad": object()})
    with pytest.raises(gym.errors.ConfigError, match="env_options"):
        gym_verl._environment({**spec, "env_options": "[1]"})
    # No options: Parquet cannot write an empty struct, so they travel as JSON text.
    (plain,) = gym_verl.rows(gym.make("arithmetic"), split="train", limit=1)
    assert plain["extra_info"]["nemo_gym"]["env_options"] == "{}"


def test_the_docs_parquet_snippet_runs_and_verl_reads_it(
    tmp_path, monkeypatch, smollm2_tokenizer
) -> None:
    import re

    page = Path(__file__).parents[2] / "docs" / "trainers.md"
    section = page.read_text().split("## verl\n", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(block, {})
    cfg = verl_config(tmp_path / "cfg", "", gym_verl.rows(gym.make("bank"), limit=1))
    dataset = RLHFDataset(str(tmp_path / "train.parquet"), smollm2_tokenizer, cfg.data)
    assert len(dataset) > 0 and dataset[0]["agent_name"] == "nemo_gym"


def test_a_request_verl_aborted_fails_the_rollout(smollm2_tokenizer) -> None:
    class Aborting(FakeServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            # What verl's vLLM server returns for a request pause_generation aborted.
            return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted")

    (row,) = gym_verl.rows(gym.make("arithmetic"), split="train", limit=1)
    output = run(agent_loop(Aborting(smollm2_tokenizer, None), smollm2_tokenizer), row)
    assert output.extra_fields["nemo_gym_status"] == "failed: model/aborted"
    assert output.extra_fields["nemo_gym_masked"] is True and sum(output.response_mask) == 0
